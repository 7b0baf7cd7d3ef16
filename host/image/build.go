package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"pybox/host/jail"

	"golang.org/x/sys/unix"

	"pybox/shared/archs"
)

// EnvCache overrides the cache directory's parent (default ~/.cache/pybox).
const EnvCache = "PYBOX_CACHE"

// CacheDir returns where built images are cached: $PYBOX_CACHE/images,
// by default ~/.cache/pybox/images.
func CacheDir() (string, error) {
	c := os.Getenv(EnvCache)
	if c == "" {
		u, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("image: no home directory (set %s): %w", EnvCache, err)
		}
		c = filepath.Join(u, ".cache", "pybox")
	}
	abs, err := filepath.Abs(filepath.Join(c, "images"))
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	return abs, nil
}

// Builder builds images into the store of Home, caching them by recipe
// key under Cache.
type Builder struct {
	Home  string
	Cache string // see CacheDir
	// Arch is the architecture the images are built for (see archs.All);
	// HostArch when empty. Another than this machine's runs the tree's
	// programs through qemu-user (see emulation).
	Arch     string
	Mirror   string    // the Debian archive (see CheckMirror); DefaultMirror when empty
	Progress io.Writer // stages and counters; nil is silent
	NoCache  bool      // build even when the cache has the recipe
	// JailHelper is the argv of the build jail's helper, with its
	// environment (see jail.Cmd); jail.Helper() when nil.
	JailHelper    []string
	JailHelperEnv []string

	steps []step // tests replace the build's steps; nil means steps
}

// Result is a finished build.
type Result struct {
	Meta     *Meta
	Path     string // the image file: in the store, or in the cache for a base built there only
	CacheHit bool
	Seconds  float64
	Log      string // the build log (empty on a cache hit)
	// InUse is set when the running VM still has the previous image of
	// this name attached.
	InUse bool
}

// Build builds r (and its built-in base, if that is not built yet) and
// puts it in the store. Only one build runs at a time per cache; a
// second waits. When ctx ends the build stops, removes its work and
// stores nothing.
func (b *Builder) Build(ctx context.Context, r *Recipe) (*Result, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := CheckArch(b.arch()); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b.Cache, 0o755); err != nil {
		return nil, fmt.Errorf("image: cache: %w", err)
	}
	unlock, err := b.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// What the build creates is read by the box's unprivileged user: a
	// strict umask of whoever runs the build must not leak into images.
	defer unix.Umask(unix.Umask(0o022))
	// Under the lock every work directory is a leftover of a killed build.
	if err := removeTree(b.workRoot()); err != nil {
		return nil, err
	}
	return b.build(ctx, r, 0, true)
}

func (b *Builder) jailHelper() ([]string, []string) {
	if b.JailHelper != nil {
		return b.JailHelper, b.JailHelperEnv
	}
	return jail.Helper(), nil
}

func (b *Builder) workRoot() string { return filepath.Join(b.Cache, "work") }
func (b *Builder) debs() string     { return filepath.Join(b.Cache, "debs") }
func (b *Builder) entry(key string) string {
	return filepath.Join(b.Cache, key)
}

func (b *Builder) arch() string {
	if b.Arch != "" {
		return b.Arch
	}
	return archs.Host()
}

func (b *Builder) mirror() string {
	if b.Mirror != "" {
		return b.Mirror
	}
	return DefaultMirror
}

// lock takes the cache's build lock, waiting (and saying so) while
// another build holds it.
func (b *Builder) lock(ctx context.Context) (func(), error) {
	p := filepath.Join(b.Cache, "lock")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	said := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("image: lock %s: %w", p, err)
		}
		if !said && b.Progress != nil {
			fmt.Fprintf(b.Progress, "image: waiting for another image build to finish (it holds %s)\n", p)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// build is Build under the lock; depth bounds building bases first. A
// build with store false leaves its image in the cache only (a base of
// another suite than the store's; see base).
func (b *Builder) build(ctx context.Context, recipe *Recipe, depth int, store bool) (*Result, error) {
	r := *recipe
	if r.usesIndex() && !slices.Contains(r.Apt, pipWheelPackage) {
		r.Apt = append(slices.Clone(r.Apt), pipWheelPackage)
	}
	start := time.Now()
	p := newProgress(b.Progress, r.Name)
	var base *baseImage
	baseDigest := ""
	if r.From != "" {
		var err error
		if base, err = b.base(ctx, &r, depth, p); err != nil {
			return nil, err
		}
		baseDigest = base.Digest
		r.Suite = base.Suite
		if r.SourceDateEpoch == 0 {
			r.SourceDateEpoch = base.Recipe.SourceDateEpoch
		}
	} else if r.Suite == "" {
		r.Suite = DefaultSuite
	}
	sources := aptSources(r.Suite, b.mirror())
	key, err := r.Key(b.arch(), baseDigest, textSHA256(sources))
	if err != nil {
		return nil, fmt.Errorf("image %s for %s: %w", r.Name, b.arch(), err)
	}
	if !b.NoCache {
		if m := b.cached(key); m != nil {
			return b.finish(&r, m, filepath.Join(b.entry(key), ImageFile), true, start, "", p, store)
		}
	}
	if os.Geteuid() != 0 && b.steps == nil {
		return nil, fmt.Errorf("image %s: building needs root (mmdebstrap in root mode, chroot, bind mounts): run it with sudo", r.Name)
	}
	if b.steps == nil {
		if err := checkKeyring(); err != nil {
			return nil, fmt.Errorf("image %s: %w", r.Name, err)
		}
		if err := checkEmulation(b.arch()); err != nil {
			return nil, fmt.Errorf("image %s: %w", r.Name, err)
		}
	}
	bd, err := b.newBuild(&r, base, key, sources, p)
	if err != nil {
		return nil, err
	}
	defer bd.close()
	m, err := bd.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("image %s: build interrupted; nothing was stored (log: %s)", r.Name, bd.logPath)
		}
		return nil, fmt.Errorf("image %s: %w\nnothing was stored; the build log is %s", r.Name, err, bd.logPath)
	}
	m.BuildSeconds = time.Since(start).Seconds()
	img, err := b.putCache(key, bd.image, m)
	if err != nil {
		return nil, err
	}
	return b.finish(&r, m, img, false, start, bd.logPath, p, store)
}

// baseImage is the image a build starts from: its meta and its file.
type baseImage struct {
	*Meta
	Path string
}

// base finds the image r starts from, in the suite r asks for (or the
// stored image's suite when r names none), and verifies it. The store's
// image of that name is the base when its suite is the one asked for. A
// built-in base of another suite is built from its recipe for that suite
// (or found) in the cache only, so the stored one stays; a built-in base
// not in the store at all is built into it first when it is wanted from
// the default suite, as `make images` would. A user's image is never
// rebuilt for another suite.
func (b *Builder) base(ctx context.Context, r *Recipe, depth int, p *progress) (*baseImage, error) {
	arch := b.arch()
	m, err := Inspect(b.Home, r.From, arch)
	if err != nil && !errors.Is(err, ErrNotBuilt) {
		return nil, fmt.Errorf("image %s: its base: %w", r.Name, err)
	}
	if m != nil && m.Suite == "" {
		return nil, fmt.Errorf("image %s: its base %s was built by an older pybox that did not record its Debian suite: rebuild it with `%s`", r.Name, r.From, buildCommand(r.From, arch))
	}
	switch {
	case m != nil && (r.Suite == "" || r.Suite == m.Suite):
		if err := VerifyFile(Path(b.Home, r.From, arch), m.Digest); err != nil {
			return nil, fmt.Errorf("image %s: its base %s: %w: rebuild it with `%s`", r.Name, r.From, err, buildCommand(r.From, arch))
		}
		return &baseImage{Meta: m, Path: Path(b.Home, r.From, arch)}, nil
	case !IsBuiltIn(r.From) && m != nil:
		return nil, fmt.Errorf("image %s: its base %s is built from %s, not %s: build it on a %s base, or leave out --suite", r.Name, r.From, m.Suite, r.Suite, r.Suite)
	case !IsBuiltIn(r.From):
		return nil, fmt.Errorf("image %s: its base: %w", r.Name, err)
	case depth >= len(BuiltInNames):
		return nil, fmt.Errorf("image %s: its base %s: built-in images form a loop", r.Name, r.From)
	}
	suite := r.Suite
	if suite == "" {
		suite = DefaultSuite
	}
	store := m == nil && suite == DefaultSuite
	switch {
	case store:
		p.Say("its base %s is not built: building %s first", r.From, r.From)
	case m == nil:
		p.Say("its base %s is not built: building %s from %s in the cache only", r.From, r.From, suite)
	default:
		p.Say("its base %s is built from %s: building %s from %s in the cache only (the stored %s stays)", r.From, m.Suite, r.From, suite, r.From)
	}
	br, _ := BuiltIn(r.From, suite)
	res, err := b.build(ctx, br, depth+1, store)
	if err != nil {
		return nil, err
	}
	return &baseImage{Meta: res.Meta, Path: res.Path}, nil
}

// cached returns the cache entry's meta when the entry is whole.
func (b *Builder) cached(key string) *Meta {
	dir := b.entry(key)
	m, err := readMeta(filepath.Join(dir, MetaFile))
	if err != nil {
		return nil
	}
	if VerifyFile(filepath.Join(dir, ImageFile), m.Digest) != nil {
		removeTree(dir) // damaged: build again
		return nil
	}
	return m
}

// putCache moves a built image into the cache under its key.
func (b *Builder) putCache(key, image string, m *Meta) (string, error) {
	tmp := filepath.Join(b.Cache, ".tmp-"+key[:16]+"-"+randomSuffix())
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", fmt.Errorf("image: cache: %w", err)
	}
	img := filepath.Join(tmp, ImageFile)
	err := os.Rename(image, img)
	if err == nil {
		err = os.Chmod(img, 0o444)
	}
	if err == nil {
		err = writeMeta(filepath.Join(tmp, MetaFile), m)
	}
	if err == nil {
		err = swapIn(tmp, b.entry(key))
	}
	if err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("image: cache: %w", err)
	}
	return filepath.Join(b.entry(key), ImageFile), nil
}

// finish installs the image into the store (unless store is false) and
// reports.
func (b *Builder) finish(r *Recipe, m *Meta, img string, hit bool, start time.Time, log string, p *progress, store bool) (*Result, error) {
	res := &Result{Meta: m, Path: img, CacheHit: hit, Log: log}
	if store {
		used, err := InUse(b.Home, m.Arch)
		if err != nil {
			used = map[string]bool{}
		}
		if err := install(b.Home, m, img); err != nil {
			return nil, err
		}
		res.Path, res.InUse = Path(b.Home, m.Name, m.Arch), used[r.Name]
	}
	res.Seconds = time.Since(start).Seconds()
	how := fmt.Sprintf("built in %s", time.Duration(m.BuildSeconds*float64(time.Second)).Round(time.Second))
	if hit {
		how = fmt.Sprintf("cache hit (%.1fs; first built %s)", res.Seconds, m.BuiltAt.Local().Format("2006-01-02 15:04"))
	}
	p.Say("%s: %s, sha256 %s, python %s from %s for %s", how, mib(m.Size), m.Digest[:16], m.Python, m.Suite, m.Arch)
	if res.InUse {
		p.Say("the running VM still has the previous %s attached: restart it (`pybox vm stop`, then `pybox vm start`) to use this one", r.Name)
	}
	return res, nil
}

// mainPackages lists the packages `pybox image list` shows: the base's,
// the recipe's main ones and what the user asked for, with the versions
// installed in this tree.
func mainPackages(r *Recipe, base *baseImage, installed []Package) []Package {
	versions := packageMap(installed)
	var out []Package
	seen := map[string]bool{}
	add := func(name string) {
		name, _, _ = strings.Cut(name, "=")
		if v, ok := versions[name]; ok && !seen[name] {
			seen[name] = true
			out = append(out, Package{Name: name, Version: v})
		}
	}
	if base != nil {
		for _, p := range base.Main {
			if !notDebian(p.Name) {
				add(p.Name)
			}
		}
	}
	// Built-in recipes name their main packages; a user's are what they asked for.
	own := r.Main
	if len(own) == 0 {
		own = r.Apt
	}
	for _, n := range own {
		if n != pipWheelPackage || !r.usesIndex() {
			add(n)
		}
	}
	if base != nil {
		for _, p := range base.Main {
			if notDebian(p.Name) {
				out = append(out, p)
			}
		}
	}
	for _, w := range r.Wheels {
		if m := wheelFile.FindStringSubmatch(w.File); m != nil {
			out = append(out, Package{Name: "wheel:" + m[1], Version: m[2]})
		}
	}
	return out
}

// notDebian says whether a main package's name is a wheel's or an index
// package's, which a layered image's base keeps as they are.
func notDebian(name string) bool {
	return strings.HasPrefix(name, "wheel:") || strings.HasPrefix(name, "pip:")
}
