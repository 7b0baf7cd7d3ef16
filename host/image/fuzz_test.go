package image

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzOpenWheel feeds arbitrary bytes to the wheel reader and installer:
// they must not panic, and whatever they install stays inside the tree.
func FuzzOpenWheel(f *testing.F) {
	b, err := os.ReadFile(makeWheel(f, f.TempDir(), helloWheel()))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("PK\x03\x04"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "hello_pybox-1.0-py3-none-any.whl")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := openWheel(p)
		if err != nil {
			return
		}
		defer w.Close()
		tree := filepath.Join(dir, "tree")
		os.Mkdir(tree, 0o755)
		root, err := os.OpenRoot(tree)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		w.install(root, localScheme("3.11"))
		des, _ := os.ReadDir(dir)
		for _, de := range des {
			if n := de.Name(); n != "tree" && n != filepath.Base(p) {
				t.Errorf("the wheel wrote %s outside the tree", n)
			}
		}
	})
}

// FuzzCheckDest: an accepted --add destination is absolute, clean, and
// not under a path the box mounts over.
func FuzzCheckDest(f *testing.F) {
	for _, s := range []string{"/opt/x", "/tmp/x", "/", "/a/../b", "relative", "/dev", "/opt//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dest string) {
		if CheckDest(dest) != nil {
			return
		}
		if !strings.HasPrefix(dest, "/") || path.Clean(dest) != dest || dest == "/" {
			t.Errorf("accepted %q", dest)
		}
		for _, m := range forbiddenDest {
			if dest == m || strings.HasPrefix(dest, m+"/") {
				t.Errorf("accepted %q under %s", dest, m)
			}
		}
	})
}
