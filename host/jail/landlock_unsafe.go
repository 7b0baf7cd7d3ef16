//go:build linux

package jail

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LandlockABI is the Landlock ABI this kernel offers: 0 when it has none
// (too old, or Landlock not among its security modules).
func LandlockABI() int {
	r, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(r)
}

// Filesystem rights, by the ABI that brought them.
const (
	fsABI1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	fsABI2 = fsABI1 | unix.LANDLOCK_ACCESS_FS_REFER
	fsABI3 = fsABI2 | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	fsABI5 = fsABI3 | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	// Newer than the ABIs named above: tried, and left out where the
	// kernel does not know it. RESOLVE_UNIX controls connecting to a
	// unix socket by its path (the user's D-Bus, ssh-agent).
	fsLater = unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX

	netTCP   = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	netLater = unix.LANDLOCK_ACCESS_NET_BIND_UDP | unix.LANDLOCK_ACCESS_NET_CONNECT_SEND_UDP
	scopes   = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
)

// What the program may do, where.
const (
	readTree  = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_EXECUTE
	readData  = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	readFile  = unix.LANDLOCK_ACCESS_FS_READ_FILE
	runFile   = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_EXECUTE
	useDevice = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// ruleAccess is what the program may do with each kind of entry.
var ruleAccess = map[kind]uint64{tree: readTree, file: readFile, program: runFile, device: useDevice, folder: readData}

// ruleset is the handled rights of one Landlock ruleset.
type ruleset struct {
	fs, net, scoped uint64
}

// rulesetFor is every right the kernel of abi can control: all handled,
// so that what no rule allows is denied.
func rulesetFor(abi int) ruleset {
	r := ruleset{fs: fsABI1}
	switch {
	case abi >= 5:
		r.fs = fsABI5
	case abi >= 3:
		r.fs = fsABI3
	case abi >= 2:
		r.fs = fsABI2
	}
	if abi >= 4 {
		r.net = netTCP
	}
	if abi >= 6 {
		r.scoped = scopes
	}
	return r
}

// restrict puts the helper's thread, and so the program it execs, under
// a Landlock ruleset: read what the VM needs, write nothing but the
// device nodes, truncate nothing, make and remove nothing.
func restrict(spec *Spec) error {
	abi := LandlockABI()
	if abi < MinLandlockABI {
		return fmt.Errorf("landlock: this kernel offers ABI %d; the jail needs %d (Linux 6.2) to stop truncation", abi, MinLandlockABI)
	}
	rs := rulesetFor(abi)
	fd, err := createRuleset(rs)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	entries, links := contents(spec)
	for _, e := range entries {
		dir, err := e.open()
		if err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
		err = addRuleFD(fd, dir, ruleAccess[e.kind]&rs.fs)
		unix.Close(dir)
		if err != nil {
			return fmt.Errorf("landlock: %s: %w", e.host, err)
		}
	}
	// A link among the system directories: its target, as the host has
	// it (under /usr on a merged /usr, where the rule adds nothing).
	for _, l := range links {
		if err := addRule(fd, l, readTree&rs.fs); err != nil {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_NO_NEW_PRIVS)", Err: err}
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); e != 0 {
		return &os.SyscallError{Syscall: "landlock_restrict_self", Err: e}
	}
	return nil
}

// createRuleset makes a ruleset handling rs, and the later rights too
// where the kernel knows them.
func createRuleset(rs ruleset) (int, error) {
	later := rs
	later.fs |= fsLater
	if rs.net != 0 {
		later.net |= netLater
	}
	fd, err := createRulesetExactly(later)
	if errors.Is(err, unix.EINVAL) {
		fd, err = createRulesetExactly(rs)
	}
	if err != nil {
		return -1, &os.SyscallError{Syscall: "landlock_create_ruleset", Err: err}
	}
	return fd, nil
}

func createRulesetExactly(rs ruleset) (int, error) {
	attr := unix.LandlockRulesetAttr{Handled_access_fs: rs.fs, Handled_access_net: rs.net, Scoped: rs.scoped}
	// The kernel takes the structure as long as the ABI knows it:
	// its first field from ABI 1, the second from 4, the third from 6.
	size := unsafe.Sizeof(attr.Handled_access_fs)
	switch {
	case rs.scoped != 0:
		size *= 3
	case rs.net != 0:
		size *= 2
	}
	r, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// addRule lets the program have access to path and what lies beneath
// it. A file takes only the rights that apply to files.
func addRule(ruleset int, path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := addRuleFD(ruleset, fd, access); err != nil {
		return fmt.Errorf("landlock: %s: %w", path, err)
	}
	return nil
}

func addRuleFD(ruleset, fd int, access uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
			unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if e != 0 {
		return &os.SyscallError{Syscall: "landlock_add_rule", Err: e}
	}
	return nil
}
