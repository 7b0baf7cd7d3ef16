package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Main is the helper, `pybox vm _jail`: started by Cmd.Start in the
// jail's namespaces, it builds the jail and execs the program in it, or
// says on the status pipe why it could not, and returns 1. It never
// returns once the program runs.
func Main() int {
	// Capabilities, securebits and Landlock are per thread, and the
	// program gets the credentials of the thread that execs it: all of it
	// happens on this one.
	runtime.LockOSThread()
	var st unix.Stat_t
	if unix.Fstat(statusFD, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		fmt.Fprintln(os.Stderr, "pybox: vm _jail is started by the VM's supervisor, not by hand")
		return 1
	}
	unix.CloseOnExec(statusFD)
	// run returns only when it could not exec the program.
	fmt.Fprintln(os.NewFile(statusFD, "status"), run())
	return 1
}

// run is the helper's straight line: the supervisor still there, the
// spec, the jail of its mode, nothing inherited but the listener, no
// privilege left, no changing a file's metadata, and the program.
func run() error {
	if err := supervisorAlive(lifeFD); err != nil {
		return err
	}
	spec, err := readSpec()
	if err != nil {
		return err
	}
	unix.Umask(0o022)
	switch spec.Mode {
	case Namespaces:
		err = buildRoot(spec)
	case Landlock:
		err = restrict(spec)
	case Build:
		err = buildTree(spec)
	default:
		err = fmt.Errorf("unknown jail mode %q", spec.Mode)
	}
	if err != nil {
		return err
	}
	if err := closeInherited(spec.Listener); err != nil {
		return err
	}
	if spec.Mode == Build {
		// The program writes its output where the build bound it: no
		// filter on metadata there (a copy across mounts sets times).
		err = becomeUser(spec.User)
	} else if err = dropPrivileges(); err == nil {
		err = refuseMetadata()
	}
	if err != nil {
		return err
	}
	// Armed last, after every change of credentials (a change that
	// gains privilege would clear it), then checked: a supervisor that
	// died before this point sent no signal.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_PDEATHSIG)", Err: err}
	}
	if err := supervisorAlive(lifeFD); err != nil {
		return err
	}
	argv := append([]string{spec.Program}, spec.Args...)
	err = unix.Exec(spec.Program, argv, spec.Env)
	return fmt.Errorf("exec %s in the jail: %w", spec.Program, err)
}

func readSpec() (*Spec, error) {
	f := os.NewFile(specFD, "spec")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpec+1))
	if err != nil {
		return nil, fmt.Errorf("reading the jail's description: %w", err)
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("reading the jail's description: %w", err)
	}
	return &s, nil
}

// supervisorAlive checks the life pipe, the read end at fd: the
// supervisor holds its write end for as long as it lives, so a hang-up
// means it is gone.
func supervisorAlive(fd int) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return &os.SyscallError{Syscall: "poll(life pipe)", Err: err}
		}
		if n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return errors.New("the supervisor is gone")
		}
		return nil
	}
}

// closeInherited marks every descriptor above 2 close-on-exec but the
// listener: the program inherits nothing else of the helper's.
func closeInherited(listener bool) error {
	first := uint(listenerFD)
	if listener {
		first++
	}
	err := unix.CloseRange(first, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return &os.SyscallError{Syscall: "close_range", Err: err}
	}
	// Before Linux 5.11: one at a time, up to the limit of descriptors.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return &os.SyscallError{Syscall: "getrlimit(RLIMIT_NOFILE)", Err: err}
	}
	for fd := int(first); uint64(fd) < lim.Cur; fd++ {
		unix.CloseOnExec(fd)
	}
	return nil
}

// dropPrivileges leaves the program no capability in the jail's user
// namespace, and no way to gain one: with these securebits uid 0 is an
// ordinary user across exec, the bounding and ambient sets are empty,
// and no_new_privs stops set-user-ID and file capabilities. (The
// program's capabilities could only ever reach the jail's own
// namespaces; none is needed there, and none reaches the host.)
func dropPrivileges() error {
	const bits = secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, bits, 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_SECUREBITS)", Err: err}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return &os.SyscallError{Syscall: "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", Err: err}
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return &os.SyscallError{Syscall: fmt.Sprintf("prctl(PR_CAPBSET_DROP, %d)", c), Err: err}
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return &os.SyscallError{Syscall: "capset", Err: err}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_NO_NEW_PRIVS)", Err: err}
	}
	return nil
}

// The securebits (linux/securebits.h); x/sys/unix does not name them.
const (
	secbitNoRoot                  = 1 << 0
	secbitNoRootLocked            = 1 << 1
	secbitNoSetuidFixup           = 1 << 2
	secbitNoSetuidFixupLocked     = 1 << 3
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// sameDir opens the directory at path (following links, as the
// supervisor did) and checks it is the one the supervisor opened, by
// device and inode: a path swapped between the two opens is refused.
func sameDir(f Folder) (int, error) {
	fd, err := unix.Open(f.Host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("data folder %s: %w", f.Host, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("data folder %s: %w", f.Host, err)
	}
	if st.Dev != f.Dev || st.Ino != f.Ino {
		unix.Close(fd)
		return -1, fmt.Errorf("data folder %s: it is no longer the directory the supervisor checked (it was moved or replaced while the VM started): start the VM again", f.Host)
	}
	return fd, nil
}
