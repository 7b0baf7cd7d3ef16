package vm

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"pybox/host/paths"
)

// CheckDataPlaces refuses a data folder that holds PyBox's home (home,
// $PYBOX_HOME) or its image store, or lies inside either: the copy of
// every data folder is kept under home, so such a folder would be copied
// into itself until a limit stopped it, and the VM would read PyBox's
// own state and images as data. Paths are compared as real paths, so
// that a symbolic link leads around nothing.
func CheckDataPlaces(shares []DataShare, home string) error {
	places := []place{
		{"PyBox's home", home, "which the VM would then read into itself", "where the VM keeps its own state and the copies of its data folders"},
		{"PyBox's image store", paths.ImagesDir(home), "whose images the VM would then read as data", "which holds the VM's images"},
	}
	for _, d := range shares {
		folder, err := realPath(d.Folder)
		if err != nil {
			return fmt.Errorf("vm: --data %s=%s: %w", d.Name, d.Folder, err)
		}
		for _, p := range places {
			real, err := realPath(p.path)
			if err != nil {
				return fmt.Errorf("vm: %s %s: %w", p.what, p.path, err)
			}
			if err := p.check(d, folder, real); err != nil {
				return err
			}
		}
	}
	return nil
}

// place is somewhere of PyBox's own that no data folder may hold or lie
// in, with why not, for each.
type place struct {
	what, path       string
	contains, inside string
}

// check refuses data folder d, whose real path is folder, when it holds
// the place (whose real path is real) or lies inside it.
func (p place) check(d DataShare, folder, real string) error {
	switch {
	case within(real, folder):
		return fmt.Errorf("vm: --data %s=%s: it contains %s %s, %s; name a folder outside it", d.Name, d.Folder, p.what, real, p.contains)
	case within(folder, real):
		return fmt.Errorf("vm: --data %s=%s: it lies inside %s %s, %s; name a folder outside it", d.Name, d.Folder, p.what, real, p.inside)
	}
	return nil
}

// within says whether path is dir or lies under it; both are clean
// absolute paths.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// realPath is p made absolute with every symbolic link resolved. A part
// that does not exist yet (an image store not made so far) is kept as
// it is, under the real path of what does exist.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if !errors.Is(err, fs.ErrNotExist) {
		return real, err
	}
	parent := filepath.Dir(abs)
	if parent == abs {
		return abs, nil
	}
	up, err := realPath(parent)
	if err != nil {
		return "", err
	}
	return filepath.Join(up, filepath.Base(abs)), nil
}
