package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// buildTree makes a build's jail and enters it: the tree becomes the
// root, read-only, with a /dev of the basic devices, a /proc of the
// jail's own pid namespace, and the spec's binds (read-only unless
// Write), each opened before any mount covers it. The helper is root of
// the host here, in mount and pid namespaces of its own: nothing it
// mounts reaches the host.
func buildTree(spec *Spec) error {
	if spec.Root == "" || !filepath.IsAbs(spec.Root) {
		return fmt.Errorf("a build's jail needs an absolute root, not %q", spec.Root)
	}
	root := filepath.Clean(spec.Root)
	var binds []bind
	defer func() {
		for _, b := range binds {
			unix.Close(b.fd)
		}
	}()
	open := func(host, dst string, attr *unix.MountAttr, recursive bool) error {
		fd, err := unix.Open(host, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", host, err)
		}
		binds = append(binds, bind{src: host, dst: dst, fd: fd, recursive: recursive, attr: attr})
		return nil
	}
	if err := open(root, "", readOnly, true); err != nil {
		return err
	}
	for _, d := range basicDevices {
		if err := open(d, d, devices, false); err != nil {
			return err
		}
	}
	for _, b := range spec.Binds {
		if !filepath.IsAbs(b.Jail) || filepath.Clean(b.Jail) != b.Jail || b.Jail == "/" {
			return fmt.Errorf("bind %s: %q is not an absolute, clean path in the jail", b.Host, b.Jail)
		}
		attr := readOnly
		if b.Write {
			attr = writable
		}
		if err := open(b.Host, b.Jail, attr, false); err != nil {
			return err
		}
	}

	steps := []step{
		{"mount --make-rprivate /", func() error { return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "") }},
		binds[0].into(root),
		{"mount -t tmpfs -o size=64k,nr_inodes=64,mode=0755,nosuid,noexec dev " + root + "/dev", func() error {
			return unix.Mount("dev", root+"/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755")
		}},
	}
	for _, b := range binds[1:] {
		steps = append(steps, b.into(root))
	}
	steps = append(steps,
		step{"mount -t proc -o nosuid,nodev,noexec proc " + root + "/proc", func() error {
			return unix.Mount("proc", root+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		}},
		step{"pivot_root " + root, func() error { return enter(root) }},
	)
	if spec.Dir != "" {
		steps = append(steps, step{"cd " + spec.Dir, func() error { return unix.Chdir(spec.Dir) }})
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// writable is a build's bind the program writes to.
var writable = &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}

// into is the step that binds b at its place under root (root itself
// for the first, the tree), making the mount point first where it is
// missing: only possible in a directory bound writable before it.
func (b bind) into(root string) step {
	dst := root + b.dst
	what := "mount --bind"
	if b.recursive {
		what = "mount --rbind"
	}
	return step{fmt.Sprintf("%s -o %s %s %s", what, attrString(b.attr), b.src, dst), func() error {
		if err := existingMountPoint(b.fd, dst); err != nil {
			return err
		}
		return bindFD(b.fd, dst, b.recursive, b.attr)
	}}
}

// existingMountPoint makes dst, of the kind fd is, unless it exists: a
// path in the read-only tree must be there already.
func existingMountPoint(fd int, dst string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	dir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	fi, err := os.Lstat(dst)
	switch {
	case err == nil && fi.IsDir() == dir && fi.Mode()&fs.ModeSymlink == 0:
		return nil
	case err == nil:
		return fmt.Errorf("%s is in the way of the bind", dst)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return mountPoint(dst, dir)
}

// becomeUser makes the helper uid and gid (not 0) for good, with no
// supplementary groups: setting the ids from root clears every
// capability, the bounding and ambient sets are emptied first, and
// no_new_privs stops set-user-ID programs and file capabilities. The
// ids change on every thread of the helper (Go's syscall package), the
// no_new_privs on this one, the thread that execs the program.
func becomeUser(id int) error {
	if id <= 0 {
		return fmt.Errorf("a build's jail runs its program as an ordinary user, not as uid %d", id)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return &os.SyscallError{Syscall: "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", Err: err}
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return &os.SyscallError{Syscall: fmt.Sprintf("prctl(PR_CAPBSET_DROP, %d)", c), Err: err}
		}
	}
	if err := syscall.Setgroups(nil); err != nil {
		return &os.SyscallError{Syscall: "setgroups", Err: err}
	}
	if err := syscall.Setresgid(id, id, id); err != nil {
		return &os.SyscallError{Syscall: "setresgid", Err: err}
	}
	if err := syscall.Setresuid(id, id, id); err != nil {
		return &os.SyscallError{Syscall: "setresuid", Err: err}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return &os.SyscallError{Syscall: "capget", Err: err}
	}
	if data[0].Effective|data[0].Permitted|data[1].Effective|data[1].Permitted != 0 {
		return errors.New("capabilities left after becoming an ordinary user")
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_NO_NEW_PRIVS)", Err: err}
	}
	return nil
}
