//go:build linux

package seccomp

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The victim is this test binary run again with victimEnv set: it loads
// the real policy into itself and reports what the kernel answered.
const victimEnv = "PYBOX_SECCOMP_VICTIM"

func TestMain(m *testing.M) {
	if mode := os.Getenv(victimEnv); mode != "" {
		victim(mode)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// probe is one raw call and the answer it must get under the policy.
// Arguments are chosen so that a call the filter wrongly let through
// fails harmlessly with another errno (the victim runs as whoever runs
// the tests, root here): mount on a path that does not exist, a ptrace
// of a pid that does not exist, reboot with a bad magic.
type probe struct {
	name string
	nr   uintptr
	args []uintptr
	want string // errno name, or "ok"
}

func str(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

// atFDCWD is AT_FDCWD as the register holds it.
var atFDCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()

func probes(dir string) []probe {
	missing := str("/nonexistent-pybox-victim")
	var buf [64]byte
	b := uintptr(unsafe.Pointer(&buf[0]))
	return []probe{
		{"mount", unix.SYS_MOUNT, []uintptr{str("none"), missing, str("tmpfs"), 0, 0}, "EPERM"},
		{"umount2", unix.SYS_UMOUNT2, []uintptr{missing, 0}, "EPERM"},
		{"pivot_root", unix.SYS_PIVOT_ROOT, []uintptr{missing, missing}, "EPERM"},
		{"chroot", unix.SYS_CHROOT, []uintptr{missing}, "EPERM"},
		{"unshare user", unix.SYS_UNSHARE, []uintptr{unix.CLONE_NEWUSER}, "EPERM"},
		{"unshare net", unix.SYS_UNSHARE, []uintptr{unix.CLONE_NEWNET}, "EPERM"},
		{"unshare mount", unix.SYS_UNSHARE, []uintptr{unix.CLONE_NEWNS}, "EPERM"},
		{"setns", unix.SYS_SETNS, []uintptr{^uintptr(0), 0}, "EPERM"},
		{"clone newuser", unix.SYS_CLONE, []uintptr{unix.CLONE_NEWUSER | uintptr(unix.SIGCHLD), 0, 0, 0, 0}, "EPERM"},
		{"clone3", unix.SYS_CLONE3, []uintptr{0, 0}, "ENOSYS"},
		{"ptrace traceme", unix.SYS_PTRACE, []uintptr{unix.PTRACE_TRACEME, 0, 0, 0}, "EPERM"},
		{"ptrace attach", unix.SYS_PTRACE, []uintptr{unix.PTRACE_ATTACH, 1 << 30, 0, 0}, "EPERM"},
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV, []uintptr{1 << 30, 0, 0, 0, 0, 0}, "EPERM"},
		{"socket vsock", unix.SYS_SOCKET, []uintptr{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, "EPERM"},
		{"socket netlink route", unix.SYS_SOCKET, []uintptr{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, "EPERM"},
		{"socket netlink uevent", unix.SYS_SOCKET, []uintptr{unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT}, "EPERM"},
		{"socket packet", unix.SYS_SOCKET, []uintptr{unix.AF_PACKET, unix.SOCK_RAW, 0}, "EPERM"},
		{"socket alg", unix.SYS_SOCKET, []uintptr{unix.AF_ALG, unix.SOCK_SEQPACKET, 0}, "EPERM"},
		{"socket tipc", unix.SYS_SOCKET, []uintptr{unix.AF_TIPC, unix.SOCK_RDM, 0}, "EPERM"},
		{"socket inet raw", unix.SYS_SOCKET, []uintptr{unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP}, "EPERM"},
		{"bpf", unix.SYS_BPF, []uintptr{unix.BPF_PROG_LOAD, 0, 0}, "EPERM"},
		{"keyctl", unix.SYS_KEYCTL, []uintptr{0, ^uintptr(99), 0}, "EPERM"},
		{"add_key", unix.SYS_ADD_KEY, []uintptr{str("user"), str("x"), 0, 0, ^uintptr(99)}, "EPERM"},
		{"request_key", unix.SYS_REQUEST_KEY, []uintptr{str("user"), str("x"), 0, ^uintptr(99)}, "EPERM"},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, []uintptr{0, 0}, "EPERM"},
		{"userfaultfd", unix.SYS_USERFAULTFD, []uintptr{0}, "EPERM"},
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, []uintptr{0, 0, ^uintptr(0), ^uintptr(0), 0}, "EPERM"},
		{"init_module", unix.SYS_INIT_MODULE, []uintptr{0, 0, str("")}, "EPERM"},
		{"finit_module", unix.SYS_FINIT_MODULE, []uintptr{^uintptr(0), str(""), 0}, "EPERM"},
		{"delete_module", unix.SYS_DELETE_MODULE, []uintptr{str("pybox_victim_none"), unix.O_NONBLOCK}, "EPERM"},
		{"kexec_load", unix.SYS_KEXEC_LOAD, []uintptr{0, 0, 0, 0xdead0000}, "EPERM"},
		{"reboot", unix.SYS_REBOOT, []uintptr{0, 0, 0, 0}, "EPERM"},
		{"swapon", unix.SYS_SWAPON, []uintptr{missing, 0}, "EPERM"},
		{"sethostname", unix.SYS_SETHOSTNAME, []uintptr{0, 1 << 20}, "EPERM"},
		{"setuid", unix.SYS_SETUID, []uintptr{0}, "EPERM"},
		{"mknodat char device", unix.SYS_MKNODAT, []uintptr{atFDCWD, str(filepath.Join(dir, "null")), unix.S_IFCHR | 0o666, 0x103}, "EPERM"},
		{"ioctl TIOCSTI", unix.SYS_IOCTL, []uintptr{0, unix.TIOCSTI, b}, "EPERM"},
		{"ioctl TIOCSTI high bits", unix.SYS_IOCTL, []uintptr{0, 1<<32 | unix.TIOCSTI, b}, "EPERM"},
		// Known to the policy and refused: EPERM. Newer than the policy:
		// ENOSYS, so that glibc falls back (fchmodat2 exists on kernels
		// from 6.6: let through, it would fail with ENOENT here).
		{"set_mempolicy_home_node", LastKnownCall, []uintptr{0, 0, 0, 0}, "EPERM"},
		{"fchmodat2", 452, []uintptr{atFDCWD, missing, 0o644, unix.AT_SYMLINK_NOFOLLOW}, "ENOSYS"},
		{"a number past the table", 1000, nil, "ENOSYS"},
		// Ordinary work: must still be allowed.
		{"socket inet", unix.SYS_SOCKET, []uintptr{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, 0}, "ok"},
		{"socket unix", unix.SYS_SOCKET, []uintptr{unix.AF_UNIX, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, 0}, "ok"},
		{"mknodat fifo", unix.SYS_MKNODAT, []uintptr{atFDCWD, str(filepath.Join(dir, "fifo")), unix.S_IFIFO | 0o600, 0}, "ok"},
		{"ioctl FIONREAD", unix.SYS_IOCTL, []uintptr{0, fionread, b}, "ok"},
		{"ioctl TCGETS", unix.SYS_IOCTL, []uintptr{0, unix.TCGETS, b}, "ENOTTY"},
		{"getpid", unix.SYS_GETPID, nil, "ok"},
	}
}

func errnoName(e syscall.Errno) string {
	if e == 0 {
		return "ok"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprint(int(e))
}

// victim runs in the re-executed test binary. stdin is a pipe.
func victim(mode string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "victim:", err); os.Exit(3) }
	// A kill by SIGSYS must not leave a core file behind.
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		fail(err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail(err)
	}
	if err := Load(); err != nil {
		fail(err)
	}
	switch mode {
	case "x32":
		// Call getpid through the x32 ABI: the policy kills the process.
		unix.Syscall(0x40000000|unix.SYS_GETPID, 0, 0, 0)
		fmt.Println("survived")
		return
	case "calls":
	default:
		fail(errors.New("unknown mode " + mode))
	}
	got := map[string]string{}
	for _, p := range probes(os.Getenv("PYBOX_VICTIM_DIR")) {
		var a [6]uintptr
		copy(a[:], p.args)
		_, _, e := unix.Syscall6(p.nr, a[0], a[1], a[2], a[3], a[4], a[5])
		got[p.name] = errnoName(e)
	}
	got["work"] = ordinaryWork()
	if err := json.NewEncoder(os.Stdout).Encode(got); err != nil {
		fail(err)
	}
}

// ordinaryWork does what a Go or Python program does all day, under the
// policy, and says what broke.
func ordinaryWork() string {
	p := make([]int, 2)
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return "pipe2: " + err.Error()
	}
	p[0], p[1] = fds[0], fds[1]
	if _, err := unix.Write(p[1], []byte("x")); err != nil {
		return "write: " + err.Error()
	}
	mem, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return "mmap: " + err.Error()
	}
	mem[4096] = 1
	if err := unix.Munmap(mem); err != nil {
		return "munmap: " + err.Error()
	}
	// A goroutine locked to a thread of its own makes the runtime start
	// another thread (clone with thread flags).
	done := make(chan string)
	go func() {
		runtime.LockOSThread()
		done <- "ran"
	}()
	if s := <-done; s != "ran" {
		return "goroutine: " + s
	}
	// fork and exec a program (clone with CLONE_VFORK|CLONE_PIDFD, execve,
	// waitid on the pidfd).
	if out, err := exec.Command("/bin/sh", "-c", "echo hi").Output(); err != nil || string(out) != "hi\n" {
		return fmt.Sprintf("exec /bin/sh: %q %v", out, err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "read status: " + err.Error()
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(status), want) {
			return "status lacks " + want
		}
	}
	return "ok"
}

func runVictim(t *testing.T, mode string) (*exec.Cmd, []byte, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), victimEnv+"="+mode, "PYBOX_VICTIM_DIR="+t.TempDir())
	// stdin: a pipe (FIONREAD works on it; TCGETS says ENOTTY).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cmd.Stdin = r
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if stderr.Len() > 0 {
		t.Logf("victim stderr: %s", stderr.String())
	}
	return cmd, out, err
}

func TestVictimCalls(t *testing.T) {
	if AuditArch(runtime.GOARCH) == 0 {
		t.Skipf("no policy for %s", runtime.GOARCH)
	}
	_, out, err := runVictim(t, "calls")
	if err != nil {
		t.Fatalf("victim: %v\n%s", err, out)
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("victim output %q: %v", out, err)
	}
	for _, p := range probes(t.TempDir()) {
		if got[p.name] != p.want {
			t.Errorf("%s: got %s, want %s", p.name, got[p.name], p.want)
		}
	}
	if got["work"] != "ok" {
		t.Errorf("ordinary work under the policy failed: %s", got["work"])
	}
}

func TestVictimForeignABIKilled(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the x32 ABI exists on amd64 only")
	}
	_, out, err := runVictim(t, "x32")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("victim calling through x32: err %v, output %q; want killed by SIGSYS", err, out)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != unix.SIGSYS {
		t.Errorf("victim calling through x32 ended with %v; want killed by SIGSYS", ws)
	}
}
