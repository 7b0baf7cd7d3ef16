package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"pybox/shared/wire"
)

// build is one image being built in its work directory.
type build struct {
	b        *Builder
	r        *Recipe
	base     *baseImage
	key      string
	sources  string // the deb822 sources file mmdebstrap reads (aptSources)
	p        *progress
	work     string
	tree     string
	image    string
	log      *os.File
	logPath  string
	pyver    string // e.g. 3.11.2, once python3 is in the tree
	stripped []string
	size     int64 // tree bytes, after trimming

	warmFiles int // in WarmList
	warmBytes int64

	// thirdParty: the tree holds (or will) Python code from outside
	// Debian, so its Python runs in a build jail only (see python3).
	thirdParty bool
	indexed    []IndexPackage // what pip installed
	imports    [][2]string    // their top-level modules: distribution, module

	arch      string   // the architecture built for (Builder.Arch)
	stripList []string // the recipe's strip list for arch (Strip.For)
}

// step is one stage of a build, in the order of steps.
type step struct {
	name   string
	when   func(*build) bool
	run    func(*build, context.Context) error
	detail func(*build) string
}

func always(*build) bool     { return true }
func layered(bd *build) bool { return bd.r.From != "" }

var steps = []step{
	{"base", layered, (*build).extractBase,
		func(bd *build) string { return "unpack " + bd.r.From + " " + bd.base.Digest[:12] }},
	{"bootstrap", func(bd *build) bool { return bd.r.From == "" }, (*build).bootstrap,
		func(bd *build) string {
			return "mmdebstrap " + bd.r.Suite + " " + debianArch(bd.arch) + " essential + " + strings.Join(bd.r.Apt, " ")
		}},
	{"apt", func(bd *build) bool { return bd.r.From != "" && len(bd.r.Apt) > 0 }, (*build).aptLayer,
		func(bd *build) string { return strings.Join(bd.r.Apt, " ") }},
	{"strip", func(bd *build) bool { return len(bd.stripList) > 0 }, (*build).strip,
		func(bd *build) string {
			return strconv.Itoa(len(bd.stripList)) + " packages a runtime does not need"
		}},
	{"wheels", func(bd *build) bool { return len(bd.r.Wheels) > 0 }, (*build).installWheels,
		func(bd *build) string { return strconv.Itoa(len(bd.r.Wheels)) + " pure-Python wheels, no network" }},
	{"pip", func(bd *build) bool { return bd.r.usesIndex() }, (*build).pipInstall,
		func(bd *build) string {
			return "pip resolves " + strconv.Itoa(len(bd.r.Pip)+len(bd.r.Requirements)) + " requirement(s) for the image's Python, binary wheels only, in a jail"
		}},
	{"add", func(bd *build) bool { return len(bd.r.Adds) > 0 }, (*build).copyAdds,
		func(bd *build) string { return strconv.Itoa(len(bd.r.Adds)) + " local files or directories" }},
	{"compile", always, (*build).compile,
		func(*build) string { return "byte-compile, unchecked-hash .pyc (the image is read-only)" }},
	{"launcher", always, (*build).launcher,
		func(*build) string { return "the warm box's launcher, compiled against the image's Python" }},
	{"fontcache", always, (*build).fontCache,
		func(*build) string { return "matplotlib's font cache into " + mplConfigDir }},
	{"check", always, (*build).check,
		func(bd *build) string { return strconv.Itoa(len(bd.checks())) + " checks" }},
	{"describe", always, (*build).describe,
		func(*build) string { return "Python version and suite into " + wire.ImageAboutFile + ", for receipts" }},
	{"warm", always, (*build).warm,
		func(*build) string { return "list the files a first run reads, for warming at VM start" }},
	{"trim", always, (*build).trim,
		func(*build) string { return "docs, apt lists and caches, logs, setuid bits" }},
	{"pack", always, (*build).pack,
		func(*build) string { return "mkfs.erofs lz4hc" }},
}

// mplConfigDir holds matplotlib's prebuilt font cache in the image; the
// box copies its files into MPLCONFIGDIR=/tmp/.config/matplotlib.
const mplConfigDir = "/usr/share/pybox/mplconfig"

func (b *Builder) newBuild(r *Recipe, base *baseImage, key, sources string, p *progress) (*build, error) {
	work := filepath.Join(b.workRoot(), key[:16])
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	// mmdebstrap reads a file whose name ends in .sources as deb822.
	sourcesPath := filepath.Join(work, "debian.sources")
	if err := os.WriteFile(sourcesPath, []byte(sources), 0o644); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	logs := filepath.Join(b.Cache, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	arch := b.arch()
	strip, err := r.Strip.For(arch)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(logs, dirName(r.Name, arch)+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	fmt.Fprintf(log, "pybox image build %s --arch %s, key %s, %s\napt sources:\n%s", r.Name, arch, key, time.Now().Format(time.RFC3339), sources)
	return &build{
		b: b, r: r, arch: arch, stripList: strip, base: base, key: key, sources: sourcesPath, p: p, work: work, log: log, logPath: logPath,
		tree: filepath.Join(work, "tree"), image: filepath.Join(work, ImageFile),
		thirdParty: (base != nil && base.ThirdParty) || len(r.Wheels) > 0 || r.usesIndex(),
	}, nil
}

// close removes the work directory (mounts first) whatever happened.
func (bd *build) close() {
	if err := removeTree(bd.work); err != nil {
		bd.p.Say("%v", err)
	}
	bd.log.Close()
}

// run runs the steps, then describes the result.
func (bd *build) run(ctx context.Context) (*Meta, error) {
	all := bd.b.steps
	if all == nil {
		all = steps
	}
	var todo []step
	for _, s := range all {
		if s.when(bd) {
			todo = append(todo, s)
		}
	}
	for i, s := range todo {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		bd.p.Stage(i+1, len(todo), s.name, s.detail(bd))
		fmt.Fprintf(bd.log, "\n=== %s\n", s.name)
		t := time.Now()
		if err := s.run(bd, ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(bd.log, "=== %s done in %s\n", s.name, time.Since(t).Round(time.Millisecond))
	}
	return bd.meta()
}

func (bd *build) epoch() string { return strconv.FormatInt(bd.r.SourceDateEpoch, 10) }

// hostEnv is the environment of mmdebstrap: this process's (it may carry
// a proxy) plus the build's own.
func (bd *build) hostEnv(extra ...string) []string {
	env := append(os.Environ(), "SOURCE_DATE_EPOCH="+bd.epoch(), "PYBOX_DEBS="+bd.b.debs())
	return append(env, extra...)
}

// chrootEnv is the environment of programs run inside the tree: nothing
// from this machine, and no byte-code writes except compileall's own.
func (bd *build) chrootEnv(extra ...string) []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/nonexistent",
		"PYTHONDONTWRITEBYTECODE=1", "SOURCE_DATE_EPOCH=" + bd.epoch(), "DEBIAN_FRONTEND=noninteractive",
	}
	return append(env, extra...)
}

// inTree runs a program inside the tree.
func (bd *build) inTree(ctx context.Context, onLine func(string), env []string, path string, args ...string) error {
	return run(ctx, bd.log, command{path: path, args: args, env: env, chroot: bd.tree, onLine: onLine})
}

// extractBase unpacks the base image into the tree.
func (bd *build) extractBase(ctx context.Context) error {
	return run(ctx, bd.log, command{path: "fsck.erofs", args: []string{"--extract=" + bd.tree, bd.base.Path}})
}

// bootstrap makes the tree with mmdebstrap: the essential set and the
// recipe's packages.
func (bd *build) bootstrap(ctx context.Context) error {
	return bd.mmdebstrap(ctx, bootstrapArgs(bd.tree, bd.sources, debianArch(bd.arch), bd.r.Apt))
}

// aptLayer installs the recipe's packages into the base's tree. Debian's
// maintainer scripts run as root, Python among them (py3compile), with
// /usr/local/bin first on their PATH: on a base that holds code from
// outside Debian (which lives under /usr/local: site directory, scripts,
// a wheel's data files), all of /usr/local is set aside meanwhile, so
// that none of it runs.
func (bd *build) aptLayer(ctx context.Context) error {
	if bd.base != nil && bd.base.ThirdParty {
		restore, err := bd.setAside("usr/local/*")
		defer restore()
		if err != nil {
			return err
		}
	}
	return bd.mmdebstrap(ctx, layerArgs(bd.tree, bd.sources, debianArch(bd.arch)),
		"PYBOX_APT="+strings.Join(bd.r.Apt, " "), "PYBOX_STRIPPED="+strings.Join(bd.base.Stripped, " "))
}

func (bd *build) mmdebstrap(ctx context.Context, args []string, env ...string) error {
	if err := os.MkdirAll(bd.b.debs(), 0o755); err != nil {
		return err
	}
	c := &aptCounter{onChange: func(s string) { bd.p.Status("%s", s) }}
	err := run(ctx, bd.log, command{path: "mmdebstrap", args: args, env: bd.hostEnv(env...), onLine: c.line})
	if err != nil && len(c.notFound) > 0 {
		return fmt.Errorf("apt has no package %s: check the name with `apt-cache policy NAME`", strings.Join(c.notFound, ", "))
	}
	if err != nil && len(c.noKey) > 0 {
		return fmt.Errorf("apt cannot check the %s archive's signature (no key %s): update debian-archive-keyring (apt-get install debian-archive-keyring; Debian 12's holds Debian 13's keys since its point release 12.1)",
			bd.r.Suite, strings.Join(c.noKey, ", "))
	}
	if err == nil {
		bd.p.Status("%d packages set up", c.setUp)
	}
	return err
}

// strip purges the recipe's strip list for the build's architecture with
// dpkg and installs a stand-in package that provides them (see Strip). A
// name that is not installed fails the build: the list was written for
// another release, or another architecture.
func (bd *build) strip(ctx context.Context) error {
	installed, err := installedPackages(bd.tree)
	if err != nil {
		return err
	}
	versions := packageMap(installed)
	var gone []Package
	var names, missing []string
	for _, n := range bd.stripList {
		if v, ok := versions[n]; ok {
			gone = append(gone, Package{Name: n, Version: v})
			names = append(names, n)
		} else {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the strip list names %s, not installed in this %s %s tree: the list does not match what %s installs on %s; take the names out or correct them, "+
			"putting a name that differs between architectures in the strip list's per_arch (`apt-cache depends` shows what pulls what)",
			strings.Join(missing, ", "), bd.r.Suite, bd.arch, bd.r.Suite, bd.arch)
	}
	bd.p.Status("purging %d packages", len(gone))
	purge := append([]string{"--purge", "--force-depends"}, names...)
	if err := bd.inTree(ctx, nil, bd.chrootEnv(), "/usr/bin/dpkg", purge...); err != nil {
		return err
	}
	pkg := "pybox-stripped-" + strings.ReplaceAll(bd.r.Name, "_", "-")
	dir := filepath.Join(bd.tree, "tmp", pkg)
	if err := os.MkdirAll(filepath.Join(dir, "DEBIAN"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "DEBIAN", "control"), strippedControl(pkg, gone), 0o644); err != nil {
		return err
	}
	in := "/tmp/" + pkg
	for _, args := range [][]string{
		{"/usr/bin/dpkg-deb", "--build", "--root-owner-group", in, in + ".deb"},
		{"/usr/bin/dpkg", "--install", in + ".deb"},
		{"/usr/bin/dpkg", "--audit"},
	} {
		if err := bd.inTree(ctx, nil, bd.chrootEnv(), args[0], args[1:]...); err != nil {
			return err
		}
	}
	bd.stripped = names
	bd.p.Status("%d packages purged, provided by %s", len(gone), pkg)
	return nil
}

// installWheels unpacks the recipe's wheels into /usr/local.
func (bd *build) installWheels(ctx context.Context) error {
	minor, err := bd.pyMinor(ctx)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(bd.tree)
	if err != nil {
		return err
	}
	defer root.Close()
	for i, w := range bd.r.Wheels {
		if sum, err := fileSHA256(w.Path); err != nil || sum != w.SHA256 {
			return fmt.Errorf("wheel %s changed or went away since the build started: run the build again", w.Path)
		}
		wh, err := openWheel(w.Path)
		if err != nil {
			return err
		}
		err = wh.install(root, localScheme(minor))
		wh.Close()
		if err != nil {
			return err
		}
		bd.p.Status("%d/%d wheels installed", i+1, len(bd.r.Wheels))
	}
	return nil
}

// copyAdds copies the recipe's local files into the tree.
func (bd *build) copyAdds(ctx context.Context) error {
	root, err := os.OpenRoot(bd.tree)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, a := range bd.r.Adds {
		if sum, err := treeSHA256(a.Src); err != nil || sum != a.SHA256 {
			return fmt.Errorf("%s changed or went away since the build started: run the build again", a.Src)
		}
		if err := copyAdd(root, a); err != nil {
			return fmt.Errorf("--add %s:%s: %w", a.Src, a.Dest, err)
		}
	}
	return nil
}

// setAside moves the tree's directories matching glob out of the tree
// until restore puts them back.
func (bd *build) setAside(glob string) (restore func(), err error) {
	type moved struct{ from, to string }
	var done []moved
	restore = func() {
		for _, m := range done {
			os.Remove(m.from) // an empty directory dpkg made again meanwhile
			if err := os.Rename(m.to, m.from); err != nil {
				bd.p.Say("%v", err)
			}
		}
	}
	dirs, err := filepath.Glob(filepath.Join(bd.tree, glob))
	if err != nil {
		return restore, err
	}
	for i, d := range dirs {
		to := filepath.Join(bd.work, "aside-"+strconv.Itoa(i))
		if err := os.Rename(d, to); err != nil {
			return restore, err
		}
		done = append(done, moved{d, to})
	}
	return restore, nil
}
