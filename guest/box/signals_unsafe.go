//go:build linux

package box

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// defaultSignals sets every signal but SIGKILL and SIGSTOP to its default
// action, behind the Go runtime's back (it installs handlers of its own
// for nearly all of them, and by default exits on SIGTERM, SIGINT,
// SIGHUP or SIGQUIT). box-init is the init of the box's pid namespace,
// and the kernel drops a signal sent to a namespace's init from inside
// the namespace when the init has no handler for it: with every action
// at its default, nothing the program sends reaches box-init, not even
// SIGKILL. SIG_IGN would do the same for box-init, but ignored signals
// stay ignored across execve; defaults are what a program starts with
// anyway.
//
// Two signals keep the runtime's handlers, because the runtime signals
// its own threads with them: SIGURG (preemption) and SIGRTMIN+1, with
// which every thread makes the same set*id call when box-init drops its
// ids (without it, setresuid waits forever). A program may send either;
// the runtime's handler then finds nothing to do. Everything else box-init
// can do without: it waits in wait4, not on SIGCHLD, and a write to a
// closed pipe fails with EPIPE (SIGPIPE to an init is dropped too).
func defaultSignals() error {
	// struct sigaction as the kernel takes it: handler (SIG_DFL = 0),
	// flags, restorer, mask. All zero is SIG_DFL with nothing else.
	var act [4]uint64
	for sig := 1; sig <= 64; sig++ {
		switch sig {
		case int(unix.SIGKILL), int(unix.SIGSTOP), int(unix.SIGURG), sigPerThreadSyscall:
			continue
		}
		_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
		if errno != 0 && errno != unix.EINVAL { // EINVAL: a number past this kernel's last signal
			return os.NewSyscallError("rt_sigaction", errno)
		}
	}
	return nil
}

// sigPerThreadSyscall is SIGRTMIN+1 (33), which the Go runtime uses on
// Linux to run a system call on every thread (syscall.AllThreadsSyscall,
// and so setresuid and setresgid).
const sigPerThreadSyscall = 33
