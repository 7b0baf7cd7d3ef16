//go:build linux

package jail

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// metadataCalls change a file's mode, owner, times or extended
// attributes. Landlock controls none of them, and its path rules do not
// stop a walk to a file, so under Landlock alone QEMU, running as you,
// could chmod any file of yours it can name (and, run as root, any file
// root owns). QEMU needs none: its 9p server refuses them on a read-only
// share, and it changes no file of its own. The filter refuses them with
// EPERM in both jails; under namespaces every mount QEMU sees is
// read-only anyway.
var metadataCalls = []uint32{
	unix.SYS_CHMOD, unix.SYS_FCHMOD, unix.SYS_FCHMODAT, 452, // fchmodat2
	unix.SYS_CHOWN, unix.SYS_FCHOWN, unix.SYS_LCHOWN, unix.SYS_FCHOWNAT,
	unix.SYS_UTIME, unix.SYS_UTIMES, unix.SYS_FUTIMESAT, unix.SYS_UTIMENSAT,
	unix.SYS_SETXATTR, unix.SYS_LSETXATTR, unix.SYS_FSETXATTR, 463, // setxattrat
	unix.SYS_REMOVEXATTR, unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR, 466, // removexattrat
}

// x32Bit marks a system call of the x32 ABI, which reaches the same
// calls under other numbers: refused whole, QEMU does not use it.
const x32Bit = 0x40000000

// The fields of struct seccomp_data the filter reads.
const (
	offsetNr   = 0
	offsetArch = 4
)

// metadataFilter is the BPF program: x86-64 system calls only (any other
// architecture's, which this QEMU never makes, is refused), the x32 ABI
// refused, metadataCalls refused, everything else allowed (QEMU's own
// -sandbox filter, stacked after this one, is the allow-list).
func metadataFilter() []unix.SockFilter {
	errno := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offsetArch},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.AUDIT_ARCH_X86_64, Jt: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_KILL_PROCESS},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offsetNr},
		{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: x32Bit, Jt: uint8(len(metadataCalls) + 1)},
	}
	for i, nr := range metadataCalls {
		// Jump to the refusal, which sits after the remaining tests and
		// the allow.
		prog = append(prog, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: nr, Jt: uint8(len(metadataCalls) - i)})
	}
	return append(prog,
		unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
		unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: errno},
	)
}

// refuseMetadata loads metadataFilter on the calling thread (the one
// that execs the program). no_new_privs must be set.
func refuseMetadata() error {
	if runtime.GOARCH != "amd64" {
		return nil // QEMU is jailed on x86-64 hosts only (see host/vm)
	}
	filter := metadataFilter()
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_SECCOMP)", Err: err}
	}
	runtime.KeepAlive(filter)
	return nil
}
