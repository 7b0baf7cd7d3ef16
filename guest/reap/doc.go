// Package reap is the only waiter in the guest's PID 1.
//
// PID 1 inherits every orphan, and a process that nobody waits for stays a
// zombie forever. [Start] runs a loop that reaps every child with
// Wait4(-1, WNOHANG) on SIGCHLD and hands each exit status to the code that
// asked for it with [Wait]. Statuses of pids that nobody asked for yet are
// kept, so [Wait] may be called after the process has already exited;
// orphans that nobody ever asks for are reaped and eventually forgotten.
//
// Code in PID 1 that starts processes (os.StartProcess, syscall.ForkExec)
// must collect them with [Wait] and never with os.Process.Wait or
// exec.Cmd.Wait: the reaper would take their status first.
package reap
