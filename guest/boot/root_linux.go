package boot

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// newRoot is where the initramfs is bound before it is moved over "/".
const newRoot = "/newroot"

// LeaveRootfs makes "/" a bind mount of the initramfs instead of the
// initial rootfs. pivot_root(2) refuses a root that has no parent mount,
// which the initial rootfs never has; after this, a box can pivot_root
// into its image and detach every mount of the agent's, rather than
// falling back to chroot with the agent's mounts underneath. The steps
// are those of switch_root, with the same tree as the target:
// bind / onto /newroot, move it over /, chroot into it.
// Must run before any other mount: the bind is not recursive on purpose.
func LeaveRootfs() error {
	if err := os.Mkdir(newRoot, 0o755); err != nil && !os.IsExist(err) {
		return fmt.Errorf("boot: leave rootfs: %w", err)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"bind / on " + newRoot, func() error { return unix.Mount("/", newRoot, "", unix.MS_BIND, "") }},
		{"chdir " + newRoot, func() error { return unix.Chdir(newRoot) }},
		{"move " + newRoot + " over /", func() error { return unix.Mount(".", "/", "", unix.MS_MOVE, "") }},
		{"chroot", func() error { return unix.Chroot(".") }},
		{"chdir /", func() error { return unix.Chdir("/") }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("boot: leave rootfs: %s: %w", s.name, err)
		}
	}
	return nil
}
