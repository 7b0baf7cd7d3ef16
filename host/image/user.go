package image

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// UserRecipe makes the recipe of a user image from the flags of `pybox
// image build NAME --from BASE --suite SUITE --apt PKG --wheel FILE --add
// SRC:DEST`. An empty suite inherits the base's. It reads the wheels and
// added files now, so the key covers their content and a wheel that is
// not pure Python is refused before anything is built.
func UserRecipe(name, from, suite string, apt, wheels, adds, preload []string) (*Recipe, error) {
	if IsBuiltIn(name) {
		return nil, fmt.Errorf("image: %s is a built-in image (build it with `pybox image build %s` and no flags but --suite): give your image another name", name, name)
	}
	if from == "" {
		from = "stdlib"
	}
	r := &Recipe{Name: name, From: from, Suite: suite, Apt: apt, Preload: preload}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	for _, w := range wheels {
		wh, err := readWheelFile(w)
		if err != nil {
			return nil, err
		}
		r.Wheels = append(r.Wheels, wh)
	}
	seen := map[string]bool{}
	for _, s := range adds {
		a, err := ParseAdd(s)
		if err != nil {
			return nil, err
		}
		if seen[a.Dest] {
			return nil, fmt.Errorf("image: --add destination %s given twice", a.Dest)
		}
		seen[a.Dest] = true
		r.Adds = append(r.Adds, a)
	}
	return r, nil
}

func readWheelFile(p string) (Wheel, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return Wheel{}, fmt.Errorf("image: --wheel %s: %w", p, err)
	}
	if _, err := openWheel(abs); err != nil {
		return Wheel{}, err
	}
	sum, err := fileSHA256(abs)
	if err != nil {
		return Wheel{}, fmt.Errorf("image: --wheel %s: %w", p, err)
	}
	return Wheel{File: filepath.Base(abs), SHA256: sum, Path: abs}, nil
}

// ParseAdd parses SRC:DEST: SRC is a file or directory on this machine,
// DEST an absolute path in the image. It hashes what SRC holds.
func ParseAdd(s string) (Add, error) {
	i := strings.Index(s, ":/")
	if i <= 0 {
		return Add{}, fmt.Errorf("image: --add %q: give SRC:DEST, such as ./notes:/opt/notes", s)
	}
	src, dest := s[:i], s[i+1:]
	if err := CheckDest(dest); err != nil {
		return Add{}, err
	}
	abs, err := filepath.Abs(src)
	if err == nil {
		// SRC may be a link to what the user means; what it points to is copied.
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return Add{}, fmt.Errorf("image: --add %s: %w", src, err)
	}
	sum, err := treeSHA256(abs)
	if err != nil {
		return Add{}, err
	}
	return Add{Src: abs, Dest: dest, SHA256: sum}, nil
}

// treeSHA256 hashes a file or directory tree: each entry's path, type,
// permission bits and content (or link target), in walk order (sorted).
// Entries that are not files, directories or symbolic links are refused:
// an image has no use for a local fifo or device.
func treeSHA256(root string) (string, error) {
	h := sha256.New()
	fi, err := os.Stat(root)
	if err != nil {
		return "", fmt.Errorf("image: --add: %w", err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return "", fmt.Errorf("image: --add %s: not a file or directory", root)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := info.Mode()
		fmt.Fprintf(h, "%s\x00%s\x00%o\x00", rel, m.Type(), m.Perm())
		switch {
		case m.IsDir():
		case m&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			io.WriteString(h, t)
		case m.IsRegular():
			sum, err := fileSHA256(p)
			if err != nil {
				return err
			}
			io.WriteString(h, sum)
		default:
			return fmt.Errorf("%s is a %s, not a file, directory or link", p, m.Type())
		}
		h.Write([]byte{'\n'})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("image: --add %s: %w", root, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return readerSHA256(f)
}

func textSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func readerSHA256(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
