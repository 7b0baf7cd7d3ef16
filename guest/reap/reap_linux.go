package reap

import (
	"errors"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// keep bounds the statuses held for pids nobody asked for: orphans that
// nobody will ever claim must not grow PID 1's memory without end.
const keep = 1024

// exit is one reaped child.
type exit struct {
	status unix.WaitStatus
	rusage unix.Rusage
}

var (
	once    sync.Once
	mu      sync.Mutex
	waiters = map[int]chan exit{} // pids someone waits for
	done    = map[int]exit{}      // reaped pids nobody asked for yet
	order   []int                 // done's pids, oldest first
	reaped  uint64
)

// Start installs the SIGCHLD handler and starts the reaping loop. Calling
// it again does nothing.
func Start() {
	once.Do(func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, unix.SIGCHLD)
		go func() {
			// Children may have exited before the handler was installed.
			reapAll()
			for range sig {
				reapAll()
			}
		}()
	})
}

// Wait blocks until pid has exited and returns its status and resource
// use. pid must be a child of this process that the caller started; the
// status is handed out once. Start must have been called.
func Wait(pid int) (unix.WaitStatus, *unix.Rusage) {
	mu.Lock()
	if e, ok := done[pid]; ok && !isChild(pid) {
		forget(pid)
		mu.Unlock()
		return e.status, &e.rusage
	}
	// A status kept for pid belongs to an earlier process that had the
	// same pid: pid is alive again, so that status is not the caller's.
	forget(pid)
	ch := make(chan exit, 1)
	waiters[pid] = ch
	mu.Unlock()
	e := <-ch
	return e.status, &e.rusage
}

// Stats reports how many children were reaped and how many statuses are
// kept unclaimed, for the console.
func Stats() (reapedTotal uint64, unclaimed int) {
	mu.Lock()
	defer mu.Unlock()
	return reaped, len(done)
}

// reapAll collects every child that has exited. It holds mu while it
// reaps, so Wait's isChild check never races with a reap of the same pid.
func reapAll() {
	mu.Lock()
	defer mu.Unlock()
	for {
		var e exit
		pid, err := unix.Wait4(-1, &e.status, unix.WNOHANG, &e.rusage)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: no children; 0: none has exited
		}
		reaped++
		if ch, ok := waiters[pid]; ok {
			delete(waiters, pid)
			ch <- e
			continue
		}
		remember(pid, e)
	}
}

// remember keeps an unclaimed status, dropping the oldest beyond keep.
func remember(pid int, e exit) {
	if _, ok := done[pid]; !ok {
		order = append(order, pid)
	}
	done[pid] = e
	for len(order) > keep {
		delete(done, order[0])
		order = order[1:]
	}
}

func forget(pid int) {
	if _, ok := done[pid]; !ok {
		return
	}
	delete(done, pid)
	for i, p := range order {
		if p == pid {
			order = append(order[:i], order[i+1:]...)
			break
		}
	}
}

// isChild reports whether pid is a child of this process right now
// (running or a zombie not yet reaped). WNOWAIT leaves it unreaped.
func isChild(pid int) bool {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err == nil // ECHILD: no such child
		}
	}
}
