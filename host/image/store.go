package image

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"pybox/host/paths"
	"pybox/shared/wire"
)

// Files of an image in the store and in the cache.
const (
	ImageFile = "image.erofs"
	MetaFile  = "meta.json"
)

// ErrNotBuilt is wrapped by Lookup when the store has no such image.
var ErrNotBuilt = errors.New("image: not built")

// Meta is meta.json: what an image is and how it was made.
type Meta struct {
	Name         string    `json:"name"`
	Digest       string    `json:"digest"`
	Size         int64     `json:"size"`
	Base         *BaseRef  `json:"base,omitempty"`
	RecipeHash   string    `json:"recipe_hash"`
	Python       string    `json:"python"`
	Suite        string    `json:"suite"` // the Debian suite it was built from ("" for images built before pybox recorded it)
	Main         []Package `json:"main_packages"`
	AptPackages  []string  `json:"apt_packages"`
	Wheels       []Wheel   `json:"wheels"`
	BuiltAt      time.Time `json:"built_at"`
	BuildSeconds float64   `json:"build_seconds"`
	TreeBytes    int64     `json:"tree_bytes"`
	Builder      int       `json:"builder_version"`
	Recipe       Recipe    `json:"recipe"`
	// Checks are every check the image passed, its base's included.
	Checks []string `json:"checks"`
	// Stripped are the packages removed from this image and its bases.
	Stripped []string `json:"stripped"`
	// WarmFiles and WarmBytes size the image's WarmList.
	WarmFiles int `json:"warm_files"`
	// Preload is what a warm box of the image imports ahead of its program.
	Preload   []string `json:"preload"`
	WarmBytes int64    `json:"warm_bytes"`
	// Packages is every installed Debian package.
	Packages []Package `json:"packages"`
}

// BaseRef names the image an image was built from.
type BaseRef struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// Package is an installed Debian package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Dir is the store directory of image name.
func Dir(home, name string) string { return filepath.Join(paths.ImagesDir(home), name) }

// Path is the image file of image name in the store.
func Path(home, name string) string { return filepath.Join(Dir(home, name), ImageFile) }

// Inspect reads image name's meta.json from the store.
func Inspect(home, name string) (*Meta, error) {
	if err := wire.CheckImageName(name); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	m, err := readMeta(filepath.Join(Dir(home, name), MetaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notBuilt(name)
	}
	if err != nil {
		return nil, fmt.Errorf("image %s: %w (rebuild it with `pybox image build %s`)", name, err, name)
	}
	if m.Name != name {
		return nil, fmt.Errorf("image %s: its meta.json names %q: rebuild it with `pybox image build %s`", name, m.Name, name)
	}
	return m, nil
}

// Lookup returns the path and digest of image name, for the VM start.
// It does not hash the file: VerifyFile does.
func Lookup(home, name string) (path, digest string, err error) {
	m, err := Inspect(home, name)
	if err != nil {
		return "", "", err
	}
	p := Path(home, name)
	if _, err := os.Stat(p); err != nil {
		return "", "", fmt.Errorf("image %s: %w: rebuild it with `pybox image build %s`", name, err, name)
	}
	return p, m.Digest, nil
}

func notBuilt(name string) error {
	if IsBuiltIn(name) {
		return fmt.Errorf("%w: image %s is not built: run `pybox image build %s` (or `make images`)", ErrNotBuilt, name, name)
	}
	return fmt.Errorf("%w: image %s is not built: see `pybox image list`, or build it with `pybox image build %s --from stdlib ...`", ErrNotBuilt, name, name)
}

func readMeta(p string) (*Meta, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &m, nil
}

func writeMeta(p string, m *Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileSync(p, append(b, '\n'), 0o644)
}

// Entry is one image in the store; Problem says why its meta.json could
// not be read (then only Meta.Name is set).
type Entry struct {
	Meta
	Problem string `json:"problem,omitempty"`
}

// List returns every image in the store, by name.
func List(home string) ([]Entry, error) {
	des, err := os.ReadDir(paths.ImagesDir(home))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	var out []Entry
	for _, de := range des {
		if !de.IsDir() || wire.CheckImageName(de.Name()) != nil {
			continue // work files of the store (.tmp-*, .old-*)
		}
		m, err := Inspect(home, de.Name())
		if err != nil {
			out = append(out, Entry{Meta: Meta{Name: de.Name()}, Problem: err.Error()})
			continue
		}
		out = append(out, Entry{Meta: *m})
	}
	return out, nil
}

// Remove deletes image name from the store. It refuses while the running
// VM has the image attached.
func Remove(home, name string) error {
	if err := wire.CheckImageName(name); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	// A directory with a broken meta.json can still be removed.
	if fi, err := os.Lstat(Dir(home, name)); err != nil || !fi.IsDir() {
		return notBuilt(name)
	}
	used, err := InUse(home)
	if err != nil {
		return err
	}
	if used[name] {
		return fmt.Errorf("image: %s is attached to the running VM: stop it first with `pybox vm stop`", name)
	}
	old := filepath.Join(paths.ImagesDir(home), ".old-"+name+"-"+randomSuffix())
	if err := os.Rename(Dir(home, name), old); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	// Gone from the store with the rename; the rest is cleanup.
	return os.RemoveAll(old)
}

// vmState is the part of the supervisor's state.json this package reads.
// It is read defensively: the supervisor owns the file.
type vmState struct {
	SupervisorPid int `json:"supervisor_pid"`
	Images        []struct {
		Name string `json:"name"`
	} `json:"images"`
}

// InUse returns the names of the images the running VM has attached,
// from $PYBOX_HOME/vm/state.json. A state file left by a supervisor that
// is gone counts as no VM.
func InUse(home string) (map[string]bool, error) {
	p := paths.ForVM(home).State()
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image: cannot tell which images the VM uses: %w", err)
	}
	var s vmState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("image: cannot tell which images the VM uses (%s: %v): check `pybox vm status`", p, err)
	}
	used := map[string]bool{}
	if s.SupervisorPid > 0 && !processAlive(s.SupervisorPid) {
		return used, nil
	}
	for _, im := range s.Images {
		used[im.Name] = true
	}
	return used, nil
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// install puts a built image into the store as name, atomically: the
// new directory is made complete beside the store's, then swapped in.
// The image file is hard-linked from src when it can be (the cache and
// the store share a file system), else copied.
func install(home string, m *Meta, src string) error {
	imagesDir := paths.ImagesDir(home)
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	tmp := filepath.Join(imagesDir, ".tmp-"+m.Name+"-"+randomSuffix())
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := linkOrCopy(src, filepath.Join(tmp, ImageFile)); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := writeMeta(filepath.Join(tmp, MetaFile), m); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := swapIn(tmp, Dir(home, m.Name)); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	ok = true
	return syncDir(imagesDir)
}

// swapIn moves the complete directory tmp to dst. When dst exists the two
// are exchanged in one step (renameat2 RENAME_EXCHANGE), so a reader sees
// the old image or the new one, never none; the old is then deleted.
func swapIn(tmp, dst string) error {
	err := os.Rename(tmp, dst)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		return err
	}
	if err := exchange(tmp, dst); err != nil {
		// A file system without RENAME_EXCHANGE: move the old aside first.
		old := tmp + ".old"
		if err := os.Rename(dst, old); err != nil {
			return err
		}
		if err := os.Rename(tmp, dst); err != nil {
			return err
		}
		return os.RemoveAll(old)
	}
	return os.RemoveAll(tmp) // tmp now holds the old image
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func writeFileSync(p string, b []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func randomSuffix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
