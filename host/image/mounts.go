package image

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"pybox/shared/mountinfo"
)

// A build tree has mounts in it while mmdebstrap runs (/proc, /sys, /dev
// nodes, and our bind mount of the .deb cache). A build that is killed can
// leave them. Deleting such a tree would reach into the host's /dev or
// the cache, so every removal first detaches what is mounted below the
// tree and refuses to go on if anything is left.

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	points, err := mountinfo.Read("/proc/self/mountinfo")
	out := mountinfo.Under(points, real)
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, err
}

// unmountUnder detaches every mount at or below dir.
func unmountUnder(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, mp := range mps {
		detach(mp)
	}
	left, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("still mounted: %s", strings.Join(left, ", "))
	}
	return nil
}

// removeTree unmounts what is below dir, then deletes it.
func removeTree(dir string) error {
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		return nil
	}
	if err := unmountUnder(dir); err != nil {
		return fmt.Errorf("image: not removing %s: %w (unmount them, then delete it)", dir, err)
	}
	return os.RemoveAll(dir)
}
