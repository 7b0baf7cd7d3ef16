package image

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// trimRule removes what matches Glob (relative to the tree's root), except
// names in Keep. Why says what it is and why a runtime image does without.
type trimRule struct {
	Glob string
	Keep []string
	Why  string
}

var trimRules = []trimRule{
	{"usr/share/doc/*/*", []string{"copyright"}, "documentation (licences stay)"},
	{"usr/share/man/*", nil, "manual pages"},
	{"usr/share/info/*", nil, "info pages"},
	{"usr/share/lintian/*", nil, "packaging checks"},
	{"usr/share/locale/*", []string{"locale.alias"}, "translations: the box runs LANG=C.UTF-8"},
	{"var/lib/apt/lists/*", nil, "apt package lists"},
	{"var/cache/apt/*", nil, "apt caches"},
	{"var/cache/debconf/*-old", nil, "debconf backups"},
	{"var/lib/dpkg/*-old", nil, "dpkg backups"},
	{"var/cache/ldconfig/aux-cache", nil, "changes every build"},
	{"var/log/*", nil, "build logs"},
	{"etc/apt/sources.list", nil, "this machine's archive address"},
	{"etc/apt/sources.list.d/*", nil, "this machine's archive address"},
	{"etc/apt/apt.conf.d/99mmdebstrap", nil, "build-time apt options"},
	{"etc/resolv.conf", nil, "this machine's resolver; the box has no network"},
	{"etc/hostname", nil, "this machine's name"},
	{"dev/*", nil, "device nodes: the box mounts its own /dev"},
	{"tmp/*", nil, "the box mounts a fresh /tmp"},
	{"var/tmp/*", nil, "temporary files"},
	{"run/*", nil, "the box mounts its own /run"},
	{"root/.cache", nil, "caches of the build's own runs"},
}

// trim applies trimRules to the tree.
func trim(tree string) error {
	for _, r := range trimRules {
		matches, err := filepath.Glob(filepath.Join(tree, r.Glob))
		if err != nil {
			return fmt.Errorf("trim %s: %w", r.Glob, err)
		}
		for _, m := range matches {
			if keep(r.Keep, filepath.Base(m)) {
				continue
			}
			if err := os.RemoveAll(m); err != nil {
				return fmt.Errorf("trim %s (%s): %w", r.Glob, r.Why, err)
			}
		}
	}
	return nil
}

func keep(names []string, n string) bool {
	for _, k := range names {
		if k == n {
			return true
		}
	}
	return false
}

// seal clears setuid and setgid bits (nothing in a box may gain
// privileges, and no_new_privs is not the only guard) and returns the
// tree's size in bytes.
func seal(tree string) (int64, error) {
	var size int64
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		size += fi.Size()
		if m := fi.Mode(); m&(fs.ModeSetuid|fs.ModeSetgid) != 0 && !m.IsDir() {
			return os.Chmod(p, m.Perm())
		}
		return nil
	})
	return size, err
}

// copyAdd copies a local file or directory into the tree at dest. It
// merges into directories that exist and refuses to replace a file. Modes
// are normalised for the box's unprivileged user (every file in an image
// is root's): directories 0755, files 0644, or 0755 when executable.
func copyAdd(root *os.Root, a Add) error {
	dest := strings.TrimPrefix(a.Dest, "/")
	return filepath.WalkDir(a.Src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(a.Src, p)
		target := path.Join(dest, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			if err := root.MkdirAll(target, 0o755); err != nil {
				return err
			}
			return root.Chmod(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := root.MkdirAll(path.Dir(target), 0o755); err != nil {
				return err
			}
			return root.Symlink(t, target)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			mode := fs.FileMode(0o644)
			if fi.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			return copyNew(root, target, src, mode)
		default:
			return fmt.Errorf("%s is a %s, not a file, directory or link", p, d.Type())
		}
	})
}
