package image

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"pybox/shared/needs"
)

// What a killed build left mounted in its tree is found deepest first
// (a name with a space too, which the mount table escapes), and a
// removal detaches it all before it deletes the tree.
func TestRemoveTreeDetachesMounts(t *testing.T) {
	needs.Root(t, "mounting in a build tree")
	dir, err := filepath.EvalSymlinks(t.TempDir()) // mount points are real paths
	if err != nil {
		t.Fatal(err)
	}
	outer := filepath.Join(dir, "a b")
	inner := filepath.Join(outer, "c")
	for _, mp := range []string{outer, inner} {
		if err := os.Mkdir(mp, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(mp, unix.MNT_DETACH) })
	}
	got, err := mountsUnder(dir)
	if want := []string{inner, outer}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("mountsUnder = %q, %v; want %q", got, err, want)
	}
	if err := removeTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the tree is still there: %v", err)
	}
}
