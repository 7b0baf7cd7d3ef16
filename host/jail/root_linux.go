package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// base is where the jail's root is built, in the helper's own mount
// namespace, before it becomes the root: a directory every system has.
const base = "/tmp"

// basicDevices are the device nodes every program may expect.
var basicDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// systemDirs are the host's directories of programs and libraries: bound
// read-only where they are directories, linked where they are links (as
// /lib -> usr/lib on a merged /usr).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// systemFiles are single files of /etc the dynamic loader reads.
var systemFiles = []string{"/etc/ld.so.cache"}

// step is one thing the helper does to build the jail; what reads like
// the command that would do it, so an error names exactly the step.
type step struct {
	what string
	do   func() error
}

func (s step) String() string { return s.what }

// buildRoot makes the jail's root and enters it. Every host path is
// opened first, before the tmpfs covers base (which may hold some of
// them: a data folder under /tmp). Then, in order: stop mounts
// propagating to the host; a small tmpfs becomes the new root; the
// system's programs and libraries, the device nodes, the guest files and
// the data folders are bound into it, each read-only; pivot_root leaves the
// host's tree behind, detached; the root itself turns read-only, so the
// program can create nothing anywhere.
func buildRoot(spec *Spec) error {
	var binds []bind
	defer func() {
		for _, b := range binds {
			unix.Close(b.fd)
		}
	}()
	entries, linked := contents(spec)
	for _, e := range entries {
		fd, err := e.open()
		if err != nil {
			return err
		}
		binds = append(binds, bind{src: e.host, dst: e.jail, fd: fd, recursive: e.kind == tree || e.kind == folder, attr: mountAttr[e.kind]})
	}
	var links []step
	for _, d := range linked {
		links = append(links, symlinkStep(d))
	}

	steps := []step{
		{"mount --make-rprivate /", func() error { return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "") }},
		{"mount -t tmpfs -o size=1m,nr_inodes=4096,mode=0755,nosuid,nodev jail " + base, func() error {
			return unix.Mount("jail", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
		}},
	}
	steps = append(steps, links...)
	for _, b := range binds {
		steps = append(steps, b.step())
	}
	steps = append(steps,
		step{"pivot_root " + base, func() error { return enter(base) }},
		step{"mount -o remount,ro,nosuid,nodev /", func() error {
			return unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
		}},
	)
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// bind is a host file or directory, open, to be bound at dst in the jail
// with attr; recursive takes the mounts under it along (each with attr
// too).
type bind struct {
	src, dst  string
	fd        int
	recursive bool
	attr      *unix.MountAttr
}

func (b bind) step() step {
	what := "mount --bind"
	if b.recursive {
		what = "mount --rbind"
	}
	return step{fmt.Sprintf("%s -o %s %s %s%s", what, attrString(b.attr), b.src, base, b.dst), func() error {
		var st unix.Stat_t
		if err := unix.Fstat(b.fd, &st); err != nil {
			return err
		}
		if err := mountPoint(base+b.dst, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return err
		}
		return bindFD(b.fd, base+b.dst, b.recursive, b.attr)
	}}
}

// symlinkStep links d in the jail as the host links it (/lib -> usr/lib
// on a merged /usr).
func symlinkStep(d string) step {
	target, err := os.Readlink(d)
	return step{"ln -s " + target + " " + base + d, func() error {
		if err != nil {
			return err
		}
		return os.Symlink(target, base+d)
	}}
}

// mountAttr is how each kind of entry is bound.
var mountAttr = map[kind]*unix.MountAttr{tree: readOnly, file: readOnly, program: readOnly, device: devices, folder: folderAttr}

// Attributes of the bind mounts.
var (
	readOnly = &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	// A data folder: not even a program of the folder runs from it.
	folderAttr = &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	// A device node: read-only is its inode, not its data, so a write
	// to /dev/null still works and a chmod of it does not.
	devices = &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}
)

// bindFD makes a copy of the mount tree at fd, sets attr on all of it
// before anyone can see it, and attaches it at dst, which must exist (a
// directory or a file, as fd is). The attributes are set on the detached
// copy, at every level of it, so no mount under a data folder stays
// writable, and there is no moment at which the copy is writable where
// the program will find it.
func bindFD(fd int, dst string, recursive bool, attr *unix.MountAttr) error {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	setFlags := uint(unix.AT_EMPTY_PATH)
	if recursive {
		flags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(fd, "", flags)
	if err != nil {
		return &os.SyscallError{Syscall: "open_tree", Err: err}
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", setFlags, attr); err != nil {
		return &os.SyscallError{Syscall: "mount_setattr", Err: err}
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return &os.SyscallError{Syscall: "move_mount", Err: err}
	}
	return nil
}

// mountPoint makes the empty directory or file that a bind covers, with
// its parents.
func mountPoint(dst string, dir bool) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if dir {
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return nil
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// enter makes dir the root and detaches the host's tree from the
// jail: pivot_root(".", ".") stacks the old root under the new one,
// and the lazy unmount takes it away for good.
func enter(dir string) error {
	if err := unix.Chdir(dir); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return &os.SyscallError{Syscall: "pivot_root", Err: err}
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return &os.SyscallError{Syscall: "umount2(old root, MNT_DETACH)", Err: err}
	}
	return unix.Chdir("/")
}

// under says whether path lies in one of dirs.
func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

func attrString(a *unix.MountAttr) string {
	var s []string
	for _, f := range []struct {
		bit  uint64
		name string
	}{{unix.MOUNT_ATTR_RDONLY, "ro"}, {unix.MOUNT_ATTR_NOSUID, "nosuid"}, {unix.MOUNT_ATTR_NODEV, "nodev"}, {unix.MOUNT_ATTR_NOEXEC, "noexec"}} {
		if a.Attr_set&f.bit != 0 {
			s = append(s, f.name)
		}
	}
	return strings.Join(s, ",")
}
