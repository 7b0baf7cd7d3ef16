package image

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"pybox/shared/archs"
	"pybox/shared/launcher"
	"pybox/shared/wire"
)

// BuilderVersion is part of every recipe key: bump it when the build
// pipeline changes what it produces, so cached images are rebuilt.
const BuilderVersion = 5

// Debian suites images are built from. DefaultSuite is the current stable
// release; the built-in recipes exist for each of Suites.
const DefaultSuite = "trixie"

// Suites are the suites PyBox builds images from, oldest first.
var Suites = []string{"bookworm", "trixie"}

// CheckSuite checks a suite asked for by name.
func CheckSuite(s string) error {
	if !slices.Contains(Suites, s) {
		return fmt.Errorf("image: suite %q: use %s", s, strings.Join(Suites, " or "))
	}
	return nil
}

// Recipe says how to build an image. A recipe with no From is bootstrapped
// with mmdebstrap (variant essential); one with From starts from that
// image's tree, and from its suite.
type Recipe struct {
	Name    string `json:"name"`
	Summary string `json:"summary,omitempty"`
	From    string `json:"from,omitempty"`
	// Suite is the Debian suite packages come from (DefaultSuite when a
	// root recipe leaves it out; a layered one inherits its base's).
	Suite string   `json:"suite,omitempty"`
	Apt   []string `json:"apt,omitempty"`
	// AptWhy says why Apt holds what it does beyond the obvious.
	AptWhy string `json:"apt_why,omitempty"`
	Strip  Strip  `json:"strip,omitzero"`
	// Check holds Python statements that must run without error in the
	// finished tree (built-in recipes; an image inherits its base's).
	Check []string `json:"check,omitempty"`
	// Warm is Python code whose file reads make the image's warm list
	// (see WarmList); an image without its own inherits its base's.
	Warm string `json:"warm,omitempty"`
	// Preload lists the modules a warm box of the image imports before
	// its program arrives (wire.ImagePreloadFile); an image without its own
	// inherits its base's.
	Preload []string `json:"preload,omitempty"`
	// Main names the packages `pybox image list` shows with their versions.
	Main   []string `json:"main,omitempty"`
	Wheels []Wheel  `json:"wheels,omitempty"`
	// Pip are requirements pip resolves from a package index (see
	// PipIndex), with the lines of Requirements: binary wheels only.
	Pip          []string       `json:"pip,omitempty"`
	Requirements []Requirements `json:"requirements,omitempty"`
	Index        *PipIndex      `json:"index,omitempty"`
	Adds         []Add          `json:"adds,omitempty"`
	// SourceDateEpoch stamps the bootstrap and every file of the image;
	// images built from a base use the base's.
	SourceDateEpoch int64 `json:"source_date_epoch,omitempty"`
}

// Strip lists packages a runtime does not need. Their files are removed
// and a stand-in package provides them, so apt in a later layer stays
// consistent (and still installs one of them when asked for it by name).
// Every package named must be installed: a name that matches nothing
// (gcc-12 on a suite that ships gcc-14) fails the build, rather than
// leave the image to grow unnoticed.
//
// Packages are stripped on every architecture. A package whose name
// says its architecture (binutils-x86-64-linux-gnu on x86_64 is
// binutils-aarch64-linux-gnu on arm64) goes in PerArch, under each
// architecture the recipe is built for:
//
//	"per_arch": {"x86_64": ["binutils-x86-64-linux-gnu"], "arm64": ["binutils-aarch64-linux-gnu"]}
//
// A recipe with PerArch must name every architecture it is built for
// (with an empty list when that one strips nothing of its own): a build
// for one it leaves out fails (see For), for the same reason.
type Strip struct {
	Why      string              `json:"why,omitempty"`
	Packages []string            `json:"packages,omitempty"`
	PerArch  map[string][]string `json:"per_arch,omitempty"`
}

// For is the strip list of a build for arch: Packages and PerArch[arch],
// as a sorted set.
func (s Strip) For(arch string) ([]string, error) {
	own, ok := s.PerArch[arch]
	if len(s.PerArch) > 0 && !ok {
		return nil, fmt.Errorf("the strip list names packages per architecture for %s but not for %s: add an %q list to its per_arch (empty when %s strips nothing of its own)",
			strings.Join(slices.Sorted(maps.Keys(s.PerArch)), ", "), arch, arch, arch)
	}
	return sortedSet(append(slices.Clone(s.Packages), own...)), nil
}

// Wheel is a pure-Python wheel to install; Path is where it is on this
// machine (not part of the key: the content is).
type Wheel struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Path   string `json:"-"`
}

// Add copies a local file or directory into the image at Dest. SHA256
// covers the names, modes and contents of everything copied.
type Add struct {
	Src    string `json:"src"`
	Dest   string `json:"dest"`
	SHA256 string `json:"sha256"`
}

// The built-in recipes, one directory per suite: package names, what a
// runtime can do without and what to check differ between releases.
//
//go:embed recipes/*/*.json
var recipeFiles embed.FS

// BuiltInNames are the built-in images, in build order.
var BuiltInNames = []string{"stdlib", "data"}

// BuiltIn returns the built-in recipe called name for suite (DefaultSuite
// when empty).
func BuiltIn(name, suite string) (*Recipe, bool) {
	if suite == "" {
		suite = DefaultSuite
	}
	if !slices.Contains(BuiltInNames, name) || !slices.Contains(Suites, suite) {
		return nil, false
	}
	b, err := recipeFiles.ReadFile("recipes/" + suite + "/" + name + ".json")
	if err != nil {
		panic("image: built-in recipe missing: " + err.Error())
	}
	var r Recipe
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		panic("image: built-in recipe " + suite + "/" + name + ": " + err.Error())
	}
	if r.Name != name || r.Suite != suite {
		panic("image: built-in recipe " + suite + "/" + name + " names " + r.Name + " for " + r.Suite)
	}
	return &r, true
}

// IsBuiltIn says whether name is a built-in image.
func IsBuiltIn(name string) bool { return slices.Contains(BuiltInNames, name) }

// moduleName is what --preload accepts: a dotted Python module name.
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// CheckModule checks one --preload name.
func CheckModule(m string) error {
	if !moduleName.MatchString(m) || len(m) > 200 {
		return fmt.Errorf("image: preload module %q: give a module name such as pandas or matplotlib.pyplot", m)
	}
	return nil
}

// aptName is what --apt accepts: a Debian package name, optionally pinned
// to a version (pkg=1.2-3). Anything else could be an apt option or a
// pattern, and the name travels through a shell hook.
var aptName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$`)

// CheckAptName checks one --apt argument.
func CheckAptName(p string) error {
	if !aptName.MatchString(p) {
		return fmt.Errorf("image: apt package %q: give a Debian package name such as python3-tabulate (optionally =VERSION)", p)
	}
	return nil
}

// Validate checks a recipe's fields (not the files it names).
func (r *Recipe) Validate() error {
	if err := wire.CheckImageName(r.Name); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if r.From != "" {
		if err := wire.CheckImageName(r.From); err != nil {
			return fmt.Errorf("image: --from: %w", err)
		}
		if r.From == r.Name {
			return fmt.Errorf("image: %s cannot be built from itself: pick another --from", r.Name)
		}
	}
	if r.Suite != "" {
		if err := CheckSuite(r.Suite); err != nil {
			return err
		}
	}
	for _, p := range append(slices.Clone(r.Apt), r.Strip.Packages...) {
		if err := CheckAptName(p); err != nil {
			return err
		}
	}
	for a, ps := range r.Strip.PerArch {
		if err := checkArchName(a); err != nil {
			return fmt.Errorf("image: strip list: %w", err)
		}
		for _, p := range ps {
			if err := CheckAptName(p); err != nil {
				return err
			}
		}
	}
	for _, a := range r.Adds {
		if err := CheckDest(a.Dest); err != nil {
			return err
		}
	}
	for _, m := range r.Preload {
		if err := CheckModule(m); err != nil {
			return err
		}
	}
	for _, s := range r.Pip {
		if err := checkPipLine(s, "--pip"); err != nil {
			return err
		}
	}
	for _, q := range r.Requirements {
		if err := q.check(); err != nil {
			return err
		}
	}
	if r.usesIndex() {
		if r.From == "" {
			return fmt.Errorf("image: %s: packages from an index go in an image built --from another", r.Name)
		}
		if r.Index == nil {
			r.Index = &PipIndex{}
		}
		return r.Index.check()
	}
	return nil
}

// keyInput is everything that decides an image's bytes. Display-only
// fields (summary) are left out.
type keyInput struct {
	Builder    int      `json:"builder"`
	Name       string   `json:"name"`
	Arch       string   `json:"arch,omitempty"` // empty for x86_64, as in the keys of images built before they had an architecture: those stay cache hits
	BaseDigest string   `json:"base_digest,omitempty"`
	Suite      string   `json:"suite"`
	Sources    string   `json:"sources_sha256"`
	Apt        []string `json:"apt"`
	Strip      []string `json:"strip"`
	Check      []string `json:"check"`
	Warm       string   `json:"warm"`
	Preload    []string `json:"preload,omitempty"`
	Main       []string `json:"main"`
	Wheels     []Wheel  `json:"wheels"`
	// What pip installs (left out when nothing, so earlier keys stay).
	Pip          []string       `json:"pip,omitempty"`
	Requirements []Requirements `json:"requirements,omitempty"`
	Index        *PipIndex      `json:"index,omitempty"`
	Adds         []addKey       `json:"adds"`
	Epoch        int64          `json:"source_date_epoch"`
	Launcher     string         `json:"launcher_sha256"` // the warm box's launcher source, compiled into every image
}

// addKey is an Add without where the files came from: the same content
// at the same place makes the same image.
type addKey struct {
	Dest   string `json:"dest"`
	SHA256 string `json:"sha256"`
}

// Key is the recipe's cache key for a build for arch: the sha256 (hex)
// of its canonical JSON with the architecture, the base image's digest
// and the sha256 of the apt sources the build writes (see aptSources).
// The apt and strip lists are sets: their order does not change the key;
// the strip list is arch's (Strip.For), whose error Key returns. Call it
// once Suite is settled.
func (r *Recipe) Key(arch, baseDigest, sourcesSHA256 string) (string, error) {
	strip, err := r.Strip.For(arch)
	if err != nil {
		return "", err
	}
	in := keyInput{
		Builder: BuilderVersion, Name: r.Name, BaseDigest: baseDigest, Suite: r.Suite, Sources: sourcesSHA256,
		Apt: sortedSet(r.Apt), Strip: strip, Check: r.Check, Warm: r.Warm, Preload: r.Preload, Main: r.Main,
		Wheels: r.Wheels, Epoch: r.SourceDateEpoch, Launcher: launcher.SourceSHA256(),
		Pip: r.Pip, Requirements: r.Requirements, Index: r.Index,
	}
	if arch != archs.X86_64 {
		in.Arch = arch
	}
	for _, a := range r.Adds {
		in.Adds = append(in.Adds, addKey{a.Dest, a.SHA256})
	}
	b, err := json.Marshal(in)
	if err != nil {
		panic(err) // plain strings and ints always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func sortedSet(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// forbiddenDest are the image paths the box mounts over: a file added
// there would be hidden at run time.
var forbiddenDest = []string{"/proc", "/sys", "/dev", "/tmp", "/run"}

// CheckDest checks an --add destination: an absolute, clean path inside
// the image, not the root and not under a path the box mounts over.
func CheckDest(dest string) error {
	switch {
	case !strings.HasPrefix(dest, "/"):
		return fmt.Errorf("image: --add destination %q: give an absolute path inside the image, such as /opt/tools", dest)
	case path.Clean(dest) != dest || strings.Contains(dest, "/../") || strings.HasSuffix(dest, "/.."):
		return fmt.Errorf("image: --add destination %q is not a clean path (no '..', '.', '//' or trailing '/')", dest)
	case dest == "/":
		return errors.New("image: --add destination / would replace the whole image: give a directory inside it")
	case strings.ContainsAny(dest, "\x00\n\\"):
		return fmt.Errorf("image: --add destination %q contains a forbidden character", dest)
	}
	for _, f := range forbiddenDest {
		if dest == f || strings.HasPrefix(dest, f+"/") {
			return fmt.Errorf("image: --add destination %q: %s is mounted over in the box, so the file would be hidden; use /opt or /usr/local", dest, f)
		}
	}
	return nil
}
