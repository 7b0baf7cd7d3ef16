package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyAdd(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "pkg/sub"), 0o755)
	os.WriteFile(filepath.Join(src, "pkg/run.sh"), []byte("#!/bin/sh\n"), 0o4755)
	os.WriteFile(filepath.Join(src, "pkg/sub/data.txt"), []byte("data"), 0o600)
	os.Symlink("sub/data.txt", filepath.Join(src, "pkg/link"))
	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "opt"), 0o755)
	os.WriteFile(filepath.Join(tree, "opt/taken"), []byte("dpkg's"), 0o644)
	root, err := os.OpenRoot(tree)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	a, err := ParseAdd(filepath.Join(src, "pkg") + ":/opt/pkg")
	if err != nil {
		t.Fatal(err)
	}
	if err := copyAdd(root, a); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(tree, "opt/pkg/sub/data.txt")); err != nil || string(b) != "data" {
		t.Errorf("data.txt: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(tree, "opt/pkg/run.sh")); err != nil || fi.Mode().Perm() != 0o755 || fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("run.sh: %v, %v (want 0755, no setuid)", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(tree, "opt/pkg/sub/data.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("data.txt mode: %v, %v", fi.Mode(), err)
	}
	if l, err := os.Readlink(filepath.Join(tree, "opt/pkg/link")); err != nil || l != "sub/data.txt" {
		t.Errorf("link: %q, %v", l, err)
	}
	// A file already in the image is not replaced.
	f := filepath.Join(t.TempDir(), "taken")
	os.WriteFile(f, []byte("mine"), 0o644)
	a, _ = ParseAdd(f + ":/opt/taken")
	if err := copyAdd(root, a); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("replacing a file: %v", err)
	}
}

func TestTrim(t *testing.T) {
	tree := t.TempDir()
	for _, f := range []string{
		"usr/share/doc/pkg/copyright", "usr/share/doc/pkg/changelog.gz", "usr/share/locale/locale.alias",
		"usr/share/locale/de/LC_MESSAGES/x.mo", "var/lib/apt/lists/lock", "etc/apt/sources.list.d/0000debian.sources",
		"usr/lib/python3/keep.py", "tmp/x",
	} {
		os.MkdirAll(filepath.Join(tree, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(tree, f), []byte("x"), 0o644)
	}
	if err := trim(tree); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]bool{
		"usr/share/doc/pkg/copyright": true, "usr/share/doc/pkg/changelog.gz": false, "usr/share/locale/locale.alias": true,
		"usr/share/locale/de": false, "var/lib/apt/lists/lock": false, "etc/apt/sources.list.d/0000debian.sources": false,
		"usr/lib/python3/keep.py": true, "tmp/x": false, "tmp": true,
	} {
		_, err := os.Lstat(filepath.Join(tree, f))
		if (err == nil) != want {
			t.Errorf("%s: present %v, want %v", f, err == nil, want)
		}
	}
}
