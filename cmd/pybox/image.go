package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"pybox/host/image"
	"pybox/host/mcp"
	"pybox/host/vm"
	"pybox/shared/archs"
)

func init() {
	register(&command{name: "image", summary: "build, list, inspect and remove images", run: imageMain})
}

// imageCommands are the `pybox image` subcommands.
var imageCommands = map[string]*command{
	"build":   {name: "build", summary: "build a built-in image, or your own on top of one", run: imageBuild},
	"list":    {name: "list", summary: "list the images in the store", run: imageListCmd},
	"inspect": {name: "inspect", summary: "print what an image is and how it was made (JSON)", run: imageInspect},
	"rm":      {name: "rm", summary: "remove images from the store", run: imageRemove},
	"export":  {name: "export", summary: "write an image to one file, to copy to another machine", run: imageExport},
	"import":  {name: "import", summary: "put an exported image into the store (no root needed)", run: imageImport},
}

func imageMain(args []string) int { return subcommand("image", imageCommands, imageUsage, args) }

func imageUsage(w *os.File) {
	fmt.Fprint(w, `usage: pybox image COMMAND [flags]

Images are read-only filesystems (erofs) that Python runs from inside the VM:
stdlib (python3 and its standard library) and data (plus numpy, pandas and
matplotlib) are built in; you can build your own on top of them. They live
in $PYBOX_HOME/images; builds are cached in $PYBOX_CACHE/images. Export
moves one to another machine as one file; import needs no root.

Each image is built for one architecture, x86_64 or arm64 (--arch; this
machine's, `+archs.Host()+`, by default): the store keeps an image of each
apart, and a VM attaches those of its own.

commands:
`)
	printCommands(w, imageCommands)
	fmt.Fprint(w, "\nRun `pybox image COMMAND --help` for a command's flags.\n")
}

// repeated collects a repeatable string flag.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func imageBuild(args []string) int {
	fs := flags("image build", "NAME [--arch ARCH] [--suite SUITE] [--from BASE] [--apt PKG]... [--pip SPEC]... [--requirements FILE]... [--wheel FILE.whl]... [--add SRC:DEST]... [--preload MODULES]", `
Build an image and put it in the store. A built-in name (stdlib, data)
builds that image from its recipe, from Debian 13 (trixie: Python 3.13,
numpy 2, pandas 2, matplotlib 3.10) unless --suite bookworm asks for Debian
12's (Python 3.11, numpy 1.24, pandas 1.5, matplotlib 3.6). Any other name
builds your own image on top of --from: Debian packages with --apt,
packages from a Python package index with --pip and --requirements,
pure-Python wheel files with --wheel (installed with no network), local
files with --add; --preload names the modules its warm boxes import ahead
of the program (the build checks that they import). It is built from its
base's suite; with --suite it starts from the built-in base of that suite
(built in the cache, the stored one stays). For example:

  pybox image build tools --from data --apt python3-tabulate
  pybox image build data311 --from data --suite bookworm
  pybox image build frames --from data --pip polars --pip 'duckdb>=1.1'

--pip and --requirements: pip resolves them for the image's own Python,
platform and architecture (its environment markers too), from PyPI or
--index-url, --extra-index-url and --find-links; binary wheels only (a
package with source distributions only is refused, and named: no compiler
runs in an image build). pip runs as an unprivileged user in a jail that
has the network but none of your files; every module installed is then
byte-compiled and imported in a jail without network, never as root.
The image records each distribution, its wheel, sha256 and index
(pybox image inspect). The same flags again are a cache hit, even if the
index has new releases since: --no-cache resolves again.

Building needs root (mmdebstrap, chroot) and takes minutes; the same recipe
again is a cache hit and takes a second. Progress goes to stderr. A failed
or interrupted build (Ctrl-C) stores nothing and says why.

--arch builds for another architecture than this machine's (arm64 on an
x86-64 machine, for an arm64 VM): its programs run through qemu-user
(packages qemu-user-static, binfmt-support and arch-test; `+"`make deps`"+`
installs them), several times slower. A user image's base must be built
for the same architecture.`)
	from := fs.String("from", "", "the image to start from: stdlib (default), data, or one you built")
	suite := fs.String("suite", "", "the Debian suite: trixie (the default for built-in images) or bookworm; your own images inherit their base's")
	arch := archFlag(fs, "the architecture to build for")
	var apt, wheels, adds repeated
	fs.Var(&apt, "apt", "install a Debian package, e.g. python3-tabulate (repeatable)")
	fs.Var(&wheels, "wheel", "install a pure-Python wheel file, …-none-any.whl (repeatable)")
	fs.Var(&adds, "add", "copy a local file or directory into the image: SRC:DEST with DEST absolute, e.g. ./lib:/opt/lib (repeatable)")
	var pips, reqs, extra, links repeated
	fs.Var(&pips, "pip", "install a package from a Python package index, a requirement such as polars or 'duckdb>=1.1' (repeatable)")
	fs.Var(&reqs, "requirements", "install the requirements in this file, as pip reads them (repeatable)")
	indexURL := fs.String("index-url", "", "the package index pip uses instead of PyPI, e.g. https://pypi.example.com/simple/")
	fs.Var(&extra, "extra-index-url", "another package index pip uses besides it (repeatable)")
	fs.Var(&links, "find-links", "a directory of wheels (or a URL of a page of links) pip looks in too (repeatable)")
	noIndex := fs.Bool("no-index", false, "no package index: only --find-links")
	requireHashes := fs.Bool("require-hashes", false, "every requirement must be pinned with its --hash (in a --requirements file), as pip's --require-hashes")
	preload := fs.String("preload", "", "modules a warm box imports before its program arrives, comma-separated (default: the base's list)")
	noCache := fs.Bool("no-cache", false, "build even when the cache holds this recipe")
	mirror := fs.String("mirror", image.DefaultMirror, "the Debian archive packages come from (its security archive is this address + \"-security\")")
	pos, code, err := parse(fs, args)
	if err != nil {
		return code
	}
	if len(pos) != 1 {
		return usageError(fs, "image build takes one NAME")
	}
	name := pos[0]
	if *suite != "" {
		if err := image.CheckSuite(*suite); err != nil {
			return usageError(fs, "%v", err)
		}
	}
	if err := image.CheckMirror(*mirror); err != nil {
		return usageError(fs, "%v", err)
	}
	if err := image.CheckArch(*arch); err != nil {
		return usageError(fs, "%v", err)
	}
	var r *image.Recipe
	if image.IsBuiltIn(name) {
		if *from != "" || len(apt)+len(wheels)+len(adds)+len(pips)+len(reqs) > 0 || *preload != "" {
			return usageError(fs, "%s is a built-in image: build it with no flags but --suite and --arch, or give your own image another name", name)
		}
		r, _ = image.BuiltIn(name, *suite)
	} else if r, err = image.UserRecipe(name, *from, *suite, apt, wheels, adds, mcp.ParseNames(*preload)); err != nil {
		return fail("%v", err)
	} else if err = r.AddPip(image.PipInput{Specs: pips, RequirementFiles: reqs, Index: image.PipIndex{
		URL: *indexURL, Extra: extra, FindLinks: links, NoIndex: *noIndex, RequireHashes: *requireHashes}}); err != nil {
		return fail("%v", err)
	}
	b, err := newBuilder(*arch, *mirror, *noCache)
	if err != nil {
		return fail("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := b.Build(ctx, r)
	if err != nil {
		return fail("%v", err)
	}
	how := "built"
	if res.CacheHit {
		how = "cache hit"
	}
	showf(os.Stdout, "%s %s %s, Python %s from %s for %s (%s, %s)\n", res.Meta.Name, res.Meta.Digest, mibs(res.Meta.Size), res.Meta.Python, res.Meta.Suite,
		res.Meta.Arch, how, time.Duration(res.Seconds*float64(time.Second)).Round(100*time.Millisecond))
	return exitOK
}

// archFlag is the --arch flag of the image commands: this machine's
// architecture unless given.
func archFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("arch", archs.Host(), what+": "+strings.Join(archs.All, " or "))
}

func newBuilder(arch, mirror string, noCache bool) (*image.Builder, error) {
	h, err := home()
	if err != nil {
		return nil, err
	}
	c, err := image.CacheDir()
	if err != nil {
		return nil, err
	}
	return &image.Builder{Home: h, Cache: c, Arch: arch, Mirror: mirror, Progress: os.Stderr, NoCache: noCache}, nil
}

// imageListCmd is `pybox image list` (imageList, in vm.go, formats a VM's images).
func imageListCmd(args []string) int {
	fs := flags("image list", "[--json]", `
List the images in the store, of every architecture: name, architecture,
digest (short), size, Python version, Debian suite, main packages, and when
each was built.`)
	asJSON := fs.Bool("json", false, "print each image's meta.json as a JSON array")
	if pos, code, err := parse(fs, args); err != nil {
		return code
	} else if len(pos) > 0 {
		return usageError(fs, "image list takes no arguments")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	entries, err := image.List(h)
	if err != nil {
		return fail("%v", err)
	}
	if *asJSON {
		printJSON(entries)
		return exitOK
	}
	if len(entries) == 0 {
		fmt.Fprintln(os.Stderr, "no images: build the built-in ones with `make images` or `pybox image build stdlib`")
		return exitOK
	}
	for _, p := range printImages(os.Stdout, entries) {
		showf(os.Stderr, "pybox: %s\n", p)
	}
	return exitOK
}

// printImages writes the table of `pybox image list`; it returns the
// problems of the images whose meta.json could not be read. Every cell
// comes from a meta.json and goes through showf, so a tab in one cannot
// shift the columns.
func printImages(w io.Writer, entries []image.Entry) []string {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tARCH\tDIGEST\tSIZE\tPYTHON\tSUITE\tPACKAGES\tBUILT")
	var problems []string
	for _, e := range entries {
		if e.Problem != "" {
			showf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\n", e.Name, e.Arch)
			problems = append(problems, e.Problem)
			continue
		}
		suite := e.Suite
		if suite == "" {
			suite = "?" // built before pybox recorded it
		}
		showf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Arch, e.Digest[:min(12, len(e.Digest))], mibs(e.Size), e.Python, suite,
			packagesColumn(e.Main), e.BuiltAt.Local().Format("2006-01-02 15:04"))
	}
	tw.Flush()
	return problems
}

// packagesColumn shows main packages as "numpy 1.24.2, pandas 1.5.3";
// python3 has its own column.
func packagesColumn(ps []image.Package) string {
	var out []string
	for _, p := range ps {
		if p.Name == "python3" {
			continue
		}
		name := strings.TrimPrefix(p.Name, "python3-")
		if w, ok := strings.CutPrefix(name, "wheel:"); ok {
			name = w + " (wheel)"
		} else if w, ok := strings.CutPrefix(name, "pip:"); ok {
			name = w + " (pip)"
		}
		out = append(out, name+" "+image.UpstreamVersion(p.Version))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

func imageInspect(args []string) int {
	fs := flags("image inspect", "NAME [--arch ARCH] [--verify]", `
Print an image's meta.json: digest, size, architecture, base, recipe and its
hash, Python version, Debian suite, packages, wheels, checks, and when it was
built.`)
	verify := fs.Bool("verify", false, "also check the image file against its digest (reads it whole)")
	arch := archFlag(fs, "the architecture of the image")
	pos, code, err := parse(fs, args)
	if err != nil {
		return code
	}
	if len(pos) != 1 {
		return usageError(fs, "image inspect takes one NAME")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	m, err := image.Inspect(h, pos[0], *arch)
	if err != nil {
		return fail("%v", err)
	}
	if *verify {
		p := image.Path(h, m.Name, m.Arch)
		if err := image.VerifyFile(p, m.Digest); err != nil {
			return fail("%v: rebuild it with `pybox image build %s --arch %s`", err, m.Name, m.Arch)
		}
		say(p + ": digest verified")
	}
	printJSON(m)
	return exitOK
}

func imageRemove(args []string) int {
	fs := flags("image rm", "NAME... [--arch ARCH]", `
Remove images from the store (their cached builds stay in $PYBOX_CACHE):
their builds for one architecture; those for another stay. An image the
running VM has attached is not removed: stop the VM first.`)
	arch := archFlag(fs, "the architecture of the images to remove")
	pos, code, err := parse(fs, args)
	if err != nil {
		return code
	}
	if len(pos) == 0 {
		return usageError(fs, "image rm takes at least one NAME")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	status := exitOK
	for _, name := range pos {
		if err := image.Remove(h, name, *arch); err != nil {
			status = fail("%v", err)
			continue
		}
		say("removed image " + name + " (" + *arch + ")")
	}
	return status
}

// storeImages resolves `pybox vm start --images` through the image store
// for a VM of architecture arch (x86_64 or arm64), checking each file's
// superblock and sha256; no names means the built-in images that are
// built for arch. A name the store has only for another architecture is
// an error that says so and how to build it for arch.
func storeImages(home, arch string, names []string) ([]vm.Image, error) {
	atts, err := image.Resolve(home, arch, names)
	if len(names) == 0 && errors.Is(err, image.ErrNotBuilt) {
		// The VM still boots (and `pybox vm status` works); every run
		// is refused with a no_image error until an image is attached.
		how := "`make images`"
		if arch != archs.Host() {
			how = "`make images ARCH=" + arch + "`"
		}
		fmt.Fprintf(os.Stderr, "pybox: no image is built for %s, so runs will be refused: build them with %s\n", arch, how)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]vm.Image, len(atts))
	for i, a := range atts {
		out[i] = vm.Image{Name: a.Name, Path: a.Path, Digest: a.Digest}
		if a.Note != "" {
			say("note: " + a.Note)
		}
	}
	return out, nil
}

func imageExport(args []string) int {
	fs := flags("image export", "NAME FILE [--arch ARCH]", `
Write image NAME of the store to FILE as one file that `+"`pybox image import`"+`
reads on any machine: a plain tar of the image's meta.json and its erofs
file. The image is checked against its digest on the way, so a damaged
image is not exported. The same image always gives the same file. FILE
is replaced once it is whole; it usually ends in `+image.ExportExt+`. Its
meta.json says its architecture, which the import keeps.`)
	arch := archFlag(fs, "the architecture of the image")
	pos, code, err := parse(fs, args)
	if err != nil {
		return code
	}
	if len(pos) != 2 {
		return usageError(fs, "image export takes NAME and FILE")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	m, err := image.ExportFile(h, pos[0], *arch, pos[1])
	if err != nil {
		return fail("%v", err)
	}
	showf(os.Stdout, "exported %s sha256 %s (%s) to %s\n", m.Name, m.Digest, mibs(m.Size), pos[1])
	return exitOK
}

func imageImport(args []string) int {
	fs := flags("image import", "FILE... [--name NAME] [--force]", `
Put images exported with `+"`pybox image export`"+` into the store. Everything in
a FILE is checked before the store changes: its format, the image's size,
its erofs superblock and its sha256 against the digest in its meta.json;
a damaged file is refused. An image of any architecture imports, beside
those of the same name for other architectures (an image exported before
images recorded theirs is x86_64's). The same image again changes nothing
(and says so). A different image of the same name and architecture is
replaced only with --force;
the running VM keeps the image it has until it is restarted. Needs no
root and no mmdebstrap: it writes only to $PYBOX_HOME/images.`)
	name := fs.String("name", "", "store the image under this name instead of the one in FILE (one FILE only)")
	force := fs.Bool("force", false, "replace a different image of the same name")
	pos, code, err := parse(fs, args)
	if err != nil {
		return code
	}
	switch {
	case len(pos) == 0:
		return usageError(fs, "image import takes at least one FILE")
	case len(pos) > 1 && *name != "":
		return usageError(fs, "--name names the image of one FILE")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	status := exitOK
	for _, file := range pos {
		res, err := image.ImportFile(h, file, image.ImportOptions{Name: *name, Force: *force})
		if err != nil {
			status = fail("%v", err)
			continue
		}
		reportImport(res)
	}
	return status
}

func reportImport(res *image.Imported) {
	for _, n := range res.Notes {
		say(n)
	}
	m := res.Meta
	switch {
	case res.Already:
		showf(os.Stdout, "image %s sha256 %s is in the store already: nothing changed\n", m.Name, m.Digest)
	case res.Replaced != "":
		showf(os.Stdout, "imported %s sha256 %s (%s, %s), replacing sha256 %s\n", m.Name, m.Digest, mibs(m.Size), m.Arch, res.Replaced)
	default:
		showf(os.Stdout, "imported %s sha256 %s (%s, %s)\n", m.Name, m.Digest, mibs(m.Size), m.Arch)
	}
	if res.InUse {
		say(fmt.Sprintf("the running VM still has the previous %s attached: restart it (`pybox vm stop`, then `pybox vm start`) to use this one", m.Name))
	}
}

func mibs(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
