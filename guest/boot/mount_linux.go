package boot

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one filesystem PID 1 mounts before it reads the first frame.
type Mount struct {
	Source string
	Target string
	FSType string
	Flags  uintptr
	Data   string
	// Optional mounts are logged and skipped when the kernel refuses
	// them; the agent can serve without them.
	Optional bool
}

const (
	nosuidNodev       = unix.MS_NOSUID | unix.MS_NODEV
	nosuidNodevNoexec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
)

// Mounts are the guest's filesystems, in order: each target lies on a
// filesystem mounted before it.
var Mounts = []Mount{
	{Source: "proc", Target: "/proc", FSType: "proc", Flags: nosuidNodevNoexec},
	{Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: nosuidNodevNoexec},
	// The device nodes for the channel and the image disks appear here
	// by themselves: the guest has no udev.
	{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs", Flags: unix.MS_NOSUID},
	{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC,
		Data: "newinstance,ptmxmode=0666,mode=0620", Optional: true},
	{Source: "shm", Target: "/dev/shm", FSType: "tmpfs", Flags: nosuidNodev,
		Data: "mode=1777,size=16m", Optional: true},
	// /run holds the per-run staging mounts (/run/boxes/<run_id>/tmp),
	// which are tmpfs mounts with their own caps.
	{Source: "run", Target: "/run", FSType: "tmpfs", Flags: nosuidNodev, Data: "mode=0755,size=16m"},
	{Source: "tmp", Target: "/tmp", FSType: "tmpfs", Flags: nosuidNodev, Data: "mode=1777,size=64m"},
	// nsdelegate makes a box's cgroup namespace a delegation boundary: a
	// process inside cannot write the limits of its own cgroup.
	{Source: "cgroup2", Target: "/sys/fs/cgroup", FSType: "cgroup2", Flags: nosuidNodevNoexec,
		Data: "nsdelegate"},
}

var flagNames = []struct {
	flag uintptr
	name string
}{
	{unix.MS_RDONLY, "ro"},
	{unix.MS_NOSUID, "nosuid"},
	{unix.MS_NODEV, "nodev"},
	{unix.MS_NOEXEC, "noexec"},
}

// String reads like the mount(8) command that does the same.
func (m Mount) String() string {
	var opts []string
	for _, f := range flagNames {
		if m.Flags&f.flag != 0 {
			opts = append(opts, f.name)
		}
	}
	if m.Data != "" {
		opts = append(opts, m.Data)
	}
	s := "mount -t " + m.FSType
	if len(opts) > 0 {
		s += " -o " + strings.Join(opts, ",")
	}
	return s + " " + m.Source + " " + m.Target
}

// Do creates the mount point and mounts. A target that is already a mount
// point (EBUSY: the kernel mounted it, or an earlier boot step did) counts
// as done.
func (m Mount) Do() error {
	if err := os.MkdirAll(m.Target, 0o755); err != nil {
		return fmt.Errorf("%s: %w", m, err)
	}
	err := unix.Mount(m.Source, m.Target, m.FSType, m.Flags, m.Data)
	if err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("%s: %w", m, &os.SyscallError{Syscall: "mount", Err: err})
	}
	return nil
}

// MountAll mounts the table in order. It stops at the first required
// mount that fails; optional ones are logged and skipped.
func MountAll(mounts []Mount, logf func(string, ...any)) error {
	for _, m := range mounts {
		if err := m.Do(); err != nil {
			if !m.Optional {
				return fmt.Errorf("boot: %w (is the kernel built with kernelconfig/?)", err)
			}
			logf("boot: skipped optional mount: %v", err)
		}
	}
	return nil
}
