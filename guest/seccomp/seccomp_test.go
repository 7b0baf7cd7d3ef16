//go:build linux

package seccomp

import (
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retKill  = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retNOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// refused are calls that must never be in the policy, whatever a later
// edit to the table does.
var refused = []string{
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
	"io_uring_register", "keyctl", "add_key", "request_key", "init_module",
	"finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
	"swapon", "swapoff", "syslog", "acct", "name_to_handle_at",
	"open_by_handle_at", "fsopen", "fsmount", "move_mount", "open_tree",
	"setuid", "setgid", "setreuid", "setresuid", "setgroups", "sethostname",
	"setdomainname", "personality", "modify_ldt", "iopl", "ioperm", "seccomp",
	"vmsplice", "execveat", "quotactl", "clock_settime", "settimeofday",
}

func TestPolicyTable(t *testing.T) {
	in := map[string]bool{}
	for _, r := range Policy {
		if r.Name == "" || strings.TrimSpace(r.Reason) == "" {
			t.Errorf("rule %+v: every rule needs a name and a reason", r)
		}
		for _, c := range r.When {
			if c.Arg > 5 || (c.Op != Eq && c.Op != MaskedEq) {
				t.Errorf("rule %s: bad condition %+v", r.Name, c)
			}
		}
		if r.Errno == 0 {
			in[r.Name] = true
		}
	}
	for _, name := range refused {
		if in[name] {
			t.Errorf("%s is allowed; it must stay out of the policy", name)
		}
	}
}

func TestProgramsDecode(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		prog, err := Program(arch)
		if err != nil {
			t.Fatal(err)
		}
		if len(prog) < 50 {
			t.Errorf("%s: %d instructions: the compiled policy looks empty", arch, len(prog))
		}
	}
	if _, err := Program("riscv64"); err == nil {
		t.Error("Program(riscv64) gave a policy; want an error")
	}
}

// nativeCase is one call checked against the native policy.
type nativeCase struct {
	name string
	nr   uintptr
	args [6]uint64
	want uint32
}

func nativeCases() []nativeCase {
	return []nativeCase{
		{"write", unix.SYS_WRITE, [6]uint64{1}, retAllow},
		{"mmap", unix.SYS_MMAP, [6]uint64{}, retAllow},
		{"futex", unix.SYS_FUTEX, [6]uint64{}, retAllow},
		{"execve", unix.SYS_EXECVE, [6]uint64{}, retAllow},
		{"clone thread", unix.SYS_CLONE, [6]uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID}, retAllow},
		{"clone fork", unix.SYS_CLONE, [6]uint64{uint64(unix.SIGCHLD)}, retAllow},
		{"clone newuser", unix.SYS_CLONE, [6]uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, retEPERM},
		{"clone newns", unix.SYS_CLONE, [6]uint64{unix.CLONE_NEWNS}, retEPERM},
		{"clone newnet", unix.SYS_CLONE, [6]uint64{unix.CLONE_NEWNET | unix.CLONE_VM}, retEPERM},
		{"clone newpid", unix.SYS_CLONE, [6]uint64{unix.CLONE_NEWPID}, retEPERM},
		{"clone3", unix.SYS_CLONE3, [6]uint64{}, retNOSYS},
		{"socket unix", unix.SYS_SOCKET, [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, retAllow},
		{"socket inet dgram", unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK}, retAllow},
		{"socket inet6", unix.SYS_SOCKET, [6]uint64{unix.AF_INET6, unix.SOCK_STREAM}, retAllow},
		{"socket unix, high bits", unix.SYS_SOCKET, [6]uint64{1<<32 | unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"socket vsock", unix.SYS_SOCKET, [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, retEPERM},
		{"socket netlink", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW}, retEPERM},
		{"socket netlink dgram", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK, unix.SOCK_DGRAM}, retEPERM},
		{"socket packet", unix.SYS_SOCKET, [6]uint64{unix.AF_PACKET, unix.SOCK_RAW}, retEPERM},
		{"socket alg", unix.SYS_SOCKET, [6]uint64{unix.AF_ALG, unix.SOCK_SEQPACKET}, retEPERM},
		{"socket tipc", unix.SYS_SOCKET, [6]uint64{unix.AF_TIPC, unix.SOCK_RDM}, retEPERM},
		{"socket rds", unix.SYS_SOCKET, [6]uint64{unix.AF_RDS, unix.SOCK_SEQPACKET}, retEPERM},
		{"socket inet raw", unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_RAW}, retEPERM},
		{"socket inet sctp", unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_SEQPACKET}, retEPERM},
		{"socketpair unix", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"socketpair inet", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, retEPERM},
		{"ioctl FIONBIO", unix.SYS_IOCTL, [6]uint64{3, fionbio}, retAllow},
		{"ioctl TCGETS", unix.SYS_IOCTL, [6]uint64{1, unix.TCGETS}, retAllow},
		{"ioctl TIOCSTI", unix.SYS_IOCTL, [6]uint64{0, unix.TIOCSTI}, retEPERM},
		{"ioctl TIOCSTI, high bits", unix.SYS_IOCTL, [6]uint64{0, 1<<32 | unix.TIOCSTI}, retEPERM},
		{"ioctl TIOCSETD", unix.SYS_IOCTL, [6]uint64{0, unix.TIOCSETD}, retEPERM},
		{"mknodat fifo", unix.SYS_MKNODAT, [6]uint64{0, 0, unix.S_IFIFO | 0o644}, retAllow},
		{"mknodat char device", unix.SYS_MKNODAT, [6]uint64{0, 0, unix.S_IFCHR | 0o644, 0x103}, retEPERM},
		{"mknodat block device", unix.SYS_MKNODAT, [6]uint64{0, 0, unix.S_IFBLK | 0o644}, retEPERM},
		{"mount", unix.SYS_MOUNT, [6]uint64{}, retEPERM},
		{"umount2", unix.SYS_UMOUNT2, [6]uint64{}, retEPERM},
		{"pivot_root", unix.SYS_PIVOT_ROOT, [6]uint64{}, retEPERM},
		{"unshare", unix.SYS_UNSHARE, [6]uint64{unix.CLONE_NEWUSER}, retEPERM},
		{"setns", unix.SYS_SETNS, [6]uint64{}, retEPERM},
		{"ptrace", unix.SYS_PTRACE, [6]uint64{unix.PTRACE_TRACEME}, retEPERM},
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV, [6]uint64{}, retEPERM},
		{"bpf", unix.SYS_BPF, [6]uint64{}, retEPERM},
		{"keyctl", unix.SYS_KEYCTL, [6]uint64{}, retEPERM},
		{"add_key", unix.SYS_ADD_KEY, [6]uint64{}, retEPERM},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, [6]uint64{}, retEPERM},
		{"userfaultfd", unix.SYS_USERFAULTFD, [6]uint64{}, retEPERM},
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, [6]uint64{}, retEPERM},
		{"init_module", unix.SYS_INIT_MODULE, [6]uint64{}, retEPERM},
		{"finit_module", unix.SYS_FINIT_MODULE, [6]uint64{}, retEPERM},
		{"kexec_load", unix.SYS_KEXEC_LOAD, [6]uint64{}, retEPERM},
		{"reboot", unix.SYS_REBOOT, [6]uint64{}, retEPERM},
		{"setuid", unix.SYS_SETUID, [6]uint64{}, retEPERM},
		{"seccomp", unix.SYS_SECCOMP, [6]uint64{}, retEPERM},
		// Known to the policy but not allowed: EPERM. Newer than the
		// policy (past LastKnownCall): ENOSYS, as on an older kernel.
		{"set_mempolicy_home_node, the last known call", LastKnownCall, [6]uint64{}, retEPERM},
		{"cachestat, the first newer call", LastKnownCall + 1, [6]uint64{}, retNOSYS},
		{"fchmodat2", 452, [6]uint64{unix.AT_FDCWD & low32, 0, 0o644, unix.AT_SYMLINK_NOFOLLOW}, retNOSYS},
		{"a number past the table, 1000", 1000, [6]uint64{}, retNOSYS},
		{"the highest number below the x32 bit", 0x3fffffff, [6]uint64{}, retNOSYS},
		{"-1 (a call a tracer skipped)", ^uintptr(0) & low32, [6]uint64{}, retEPERM},
	}
}

func TestEvaluateNative(t *testing.T) {
	arch := runtime.GOARCH
	for _, c := range nativeCases() {
		got, err := Evaluate(arch, Data{Nr: int32(c.nr), Arch: AuditArch(arch), Args: c.args})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: verdict %#x, want %#x", c.name, got, c.want)
		}
	}
}

func TestEvaluateForeignABI(t *testing.T) {
	const x32Bit = 0x40000000
	cases := []struct {
		name, goarch string
		d            Data
	}{
		{"i386 on amd64", "amd64", Data{Nr: 4 /* i386 write */, Arch: unix.AUDIT_ARCH_I386}},
		{"x32 on amd64", "amd64", Data{Nr: x32Bit | 1, Arch: unix.AUDIT_ARCH_X86_64}},
		{"arm64 on amd64", "amd64", Data{Nr: 64, Arch: unix.AUDIT_ARCH_AARCH64}},
		{"arm32 on arm64", "arm64", Data{Nr: 4, Arch: unix.AUDIT_ARCH_ARM}},
		{"amd64 on arm64", "arm64", Data{Nr: 1, Arch: unix.AUDIT_ARCH_X86_64}},
	}
	for _, c := range cases {
		got, err := Evaluate(c.goarch, c.d)
		if err != nil {
			t.Fatal(err)
		}
		if got != retKill {
			t.Errorf("%s: verdict %#x, want kill process %#x", c.name, got, uint32(retKill))
		}
	}
}
