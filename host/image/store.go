package image

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"pybox/host/paths"
	"pybox/shared/archs"
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
	Name        string    `json:"name"`
	Digest      string    `json:"digest"`
	Size        int64     `json:"size"`
	Base        *BaseRef  `json:"base,omitempty"`
	RecipeHash  string    `json:"recipe_hash"`
	Python      string    `json:"python"`
	Suite       string    `json:"suite"` // the Debian suite it was built from ("" for images built before pybox recorded it)
	Arch        string    `json:"arch"`  // the architecture it is built for (archs.All); none in the meta.json of an image built before pybox recorded it, which is x86_64's (readMeta fills it in)
	Main        []Package `json:"main_packages"`
	AptPackages []string  `json:"apt_packages"`
	Wheels      []Wheel   `json:"wheels"`
	// IndexPackages are the distributions pip installed from an index.
	IndexPackages []IndexPackage `json:"index_packages,omitempty"`
	// ThirdParty says the image holds Python code from outside Debian
	// (wheels, packages from an index), its own or a base's: a build on
	// it runs Python in a build jail only, never as root.
	ThirdParty   bool      `json:"third_party,omitempty"`
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

// Dir is the store directory of image name built for arch (see dirName).
func Dir(home, name, arch string) string {
	return filepath.Join(paths.ImagesDir(home), dirName(name, arch))
}

// Path is the image file of image name built for arch in the store.
func Path(home, name, arch string) string { return filepath.Join(Dir(home, name, arch), ImageFile) }

// Inspect reads the meta.json of image name built for arch from the store.
func Inspect(home, name, arch string) (*Meta, error) {
	if err := wire.CheckImageName(name); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if err := checkArchName(arch); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	m, err := readMeta(filepath.Join(Dir(home, name, arch), MetaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notBuilt(home, name, arch)
	}
	if err != nil {
		return nil, fmt.Errorf("image %s: %w (rebuild it with `%s`)", name, err, buildCommand(name, arch))
	}
	if m.Name != name {
		return nil, fmt.Errorf("image %s: its meta.json names %q: rebuild it with `%s`", name, m.Name, buildCommand(name, arch))
	}
	if m.Arch != arch {
		return nil, fmt.Errorf("image %s: its meta.json says it is built for %s, but it is in the store's place for %s images (%s): rebuild it with `%s`",
			name, m.Arch, arch, Dir(home, name, arch), buildCommand(name, arch))
	}
	return m, nil
}

// Lookup returns the path and digest of image name built for arch, for
// the VM start. It does not hash the file: VerifyFile does.
func Lookup(home, name, arch string) (path, digest string, err error) {
	m, err := Inspect(home, name, arch)
	if err != nil {
		return "", "", err
	}
	p := Path(home, name, arch)
	if _, err := os.Stat(p); err != nil {
		return "", "", fmt.Errorf("image %s: %w: rebuild it with `%s`", name, err, buildCommand(name, arch))
	}
	return p, m.Digest, nil
}

// notBuilt is the error for image name not in the store for arch: it
// names the architectures the store has it for, if any.
func notBuilt(home, name, arch string) error {
	if others := builtFor(home, name, arch); len(others) > 0 {
		return fmt.Errorf("%w: image %s is not built for %s, only for %s: %s, or name the one there is with --arch %s",
			ErrNotBuilt, name, arch, strings.Join(others, " and "), buildAdvice(name, arch, others[0]), others[0])
	}
	if arch != archs.Host() {
		return fmt.Errorf("%w: image %s is not built for %s: %s", ErrNotBuilt, name, arch, buildAdvice(name, arch, ""))
	}
	if IsBuiltIn(name) {
		return fmt.Errorf("%w: image %s is not built: run `pybox image build %s` (or `make images`)", ErrNotBuilt, name, name)
	}
	return fmt.Errorf("%w: image %s is not built: see `pybox image list`, or build it with `pybox image build %s --from stdlib ...`", ErrNotBuilt, name, name)
}

// buildAdvice says how to build image name for arch; other is an
// architecture the store has it for ("" when none), whose recipe a
// user's image can be built again from.
func buildAdvice(name, arch, other string) string {
	if IsBuiltIn(name) {
		return fmt.Sprintf("build it with `%s`", buildCommand(name, arch))
	}
	if other == "" {
		return fmt.Sprintf("build it with `%s --from stdlib ...`", buildCommand(name, arch))
	}
	return fmt.Sprintf("build it with `%s` and the flags it was built with (`pybox image inspect %s --arch %s` shows its recipe)",
		buildCommand(name, arch), name, other)
}

// builtFor lists the architectures other than except that the store has
// image name for.
func builtFor(home, name, except string) []string {
	des, err := os.ReadDir(paths.ImagesDir(home))
	if err != nil {
		return nil
	}
	var out []string
	for _, de := range des {
		n, a, ok := parseDirName(de.Name())
		if !ok || n != name || a == except {
			continue
		}
		if _, err := os.Stat(filepath.Join(paths.ImagesDir(home), de.Name(), MetaFile)); err == nil {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
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
	m.defaults()
	return &m, nil
}

// defaults fills in what an image built before pybox recorded it lacks:
// its architecture, which was x86_64.
func (m *Meta) defaults() {
	if m.Arch == "" {
		m.Arch = archs.X86_64
	}
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

// List returns every image in the store, of every architecture, by name
// and then architecture.
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
		name, arch, ok := parseDirName(de.Name())
		if !de.IsDir() || !ok {
			continue // work files of the store (.tmp-*, .old-*)
		}
		m, err := Inspect(home, name, arch)
		if err != nil {
			out = append(out, Entry{Meta: Meta{Name: name, Arch: arch}, Problem: err.Error()})
			continue
		}
		out = append(out, Entry{Meta: *m})
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Arch, b.Arch)) })
	return out, nil
}

// Remove deletes image name built for arch from the store; its builds
// for other architectures stay. It refuses while the running VM has the
// image attached.
func Remove(home, name, arch string) error {
	if err := wire.CheckImageName(name); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := checkArchName(arch); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	// A directory with a broken meta.json can still be removed.
	if fi, err := os.Lstat(Dir(home, name, arch)); err != nil || !fi.IsDir() {
		return notBuilt(home, name, arch)
	}
	used, err := InUse(home, arch)
	if err != nil {
		return err
	}
	if used[name] {
		return fmt.Errorf("image: %s is attached to the running VM: stop it first with `pybox vm stop`", name)
	}
	old := filepath.Join(paths.ImagesDir(home), ".old-"+dirName(name, arch)+"-"+randomSuffix())
	if err := os.Rename(Dir(home, name, arch), old); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	// Gone from the store with the rename; the rest is cleanup.
	return os.RemoveAll(old)
}

// vmState is the part of the supervisor's state.json this package reads.
// It is read defensively: the supervisor owns the file.
type vmState struct {
	SupervisorPid int `json:"supervisor_pid"`
	// Arch is the guest's architecture; a supervisor from before guests
	// had a choice of one leaves it out, and ran x86_64.
	Arch   string `json:"arch"`
	Images []struct {
		Name string `json:"name"`
	} `json:"images"`
}

// InUse returns the names of the images built for arch that the running
// VM has attached, from $PYBOX_HOME/vm/state.json: none when the VM is
// of another architecture. A state file left by a supervisor that is
// gone counts as no VM.
func InUse(home, arch string) (map[string]bool, error) {
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
	if s.Arch == "" {
		s.Arch = archs.X86_64
	}
	if s.Arch != arch {
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

// install puts a built image into the store as m.Name for m.Arch,
// atomically: the new directory is made complete beside the store's,
// then swapped in. The image file is hard-linked from src when it can be
// (the cache and the store share a file system), else copied.
func install(home string, m *Meta, src string) error {
	m.defaults()
	if err := checkArchName(m.Arch); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	imagesDir := paths.ImagesDir(home)
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	tmp := filepath.Join(imagesDir, ".tmp-"+dirName(m.Name, m.Arch)+"-"+randomSuffix())
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
	if err := swapIn(tmp, Dir(home, m.Name, m.Arch)); err != nil {
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
