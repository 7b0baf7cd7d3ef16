//go:build linux

package seccomp

import (
	"os"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Load installs the policy on every thread of the calling process
// (SECCOMP_FILTER_FLAG_TSYNC): Go runs on several threads, and a filter
// on one thread alone would leave the others open until execve.
//
// The caller must have set no_new_privs first (prctl(PR_SET_NO_NEW_PRIVS));
// the kernel refuses an unprivileged filter otherwise. Load it as the
// last step before execve: from here on, only the calls in Policy work.
func Load() error {
	prog, err := native()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return &os.SyscallError{Syscall: "seccomp(SET_MODE_FILTER)", Err: errno}
	}
	if r != 0 {
		// TSYNC names the thread it could not synchronise.
		return &os.SyscallError{Syscall: "seccomp(SET_MODE_FILTER, TSYNC): thread " + strconv.Itoa(int(r)), Err: unix.EBUSY}
	}
	return nil
}
