package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"pybox/shared/wire"
)

// The tree's own python3 does the Python work of a build: it reports its
// version, byte-compiles, builds matplotlib's font cache and runs the
// checks, always chrooted into the tree with a clean environment.

// python returns the tree's Python version, asking it once.
func (bd *build) python(ctx context.Context) (string, error) {
	if bd.pyver != "" {
		return bd.pyver, nil
	}
	var out string
	err := bd.python3(ctx, func(l string) { out = strings.TrimSpace(l) }, bd.chrootEnv(), nil,
		"-I", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])")
	if err != nil {
		return "", fmt.Errorf("the tree's python3 does not run: %w", err)
	}
	if strings.Count(out, ".") != 2 {
		return "", fmt.Errorf("the tree's python3 printed %q for its version", out)
	}
	bd.pyver = out
	return out, nil
}

// pyMinor is "3.11" for Python 3.11.2.
func (bd *build) pyMinor(ctx context.Context) (string, error) {
	v, err := bd.python(ctx)
	if err != nil {
		return "", err
	}
	return v[:strings.LastIndexByte(v, '.')], nil
}

// compile byte-compiles every module with unchecked-hash .pyc files:
// the image is read-only, so Python must never want to rewrite one, and
// the file times (all SOURCE_DATE_EPOCH in erofs) must not matter. The
// .pyc files dpkg's python hooks wrote are timestamp-based: -f replaces
// them all. Debian's modules are compiled as root; the site directory of
// wheels and packages from an index, in a build jail (compiling reads
// what an index sent; no code of it runs, but nothing of it is trusted),
// and then the root run has -S, so that no .pth file there runs as root.
func (bd *build) compile(ctx context.Context) error {
	minor, err := bd.pyMinor(ctx)
	if err != nil {
		return err
	}
	site := "/usr/local/lib/python" + minor + "/dist-packages"
	args := []string{"-I", "-m", "compileall", "-q", "-f", "--invalidation-mode", "unchecked-hash"}
	if bd.thirdParty {
		args = append([]string{"-S"}, args...)
	}
	var debian []string
	for _, d := range []string{"/usr/lib/python" + minor, "/usr/lib/python3/dist-packages", site} {
		if fi, err := os.Stat(filepath.Join(bd.tree, d)); err == nil && fi.IsDir() && (d != site || !bd.thirdParty) {
			debian = append(debian, d)
		}
	}
	var bad []string
	onLine := func(l string) {
		if strings.HasPrefix(l, "*** Error compiling") {
			bad = append(bad, strings.TrimPrefix(l, "*** Error compiling "))
		}
	}
	err = bd.inTree(ctx, onLine, bd.chrootEnv(), "/usr/bin/python3", append(args, debian...)...)
	if fi, e := os.Stat(filepath.Join(bd.tree, site)); bd.thirdParty && e == nil && fi.IsDir() && ctx.Err() == nil {
		err = errors.Join(err, bd.python3(ctx, onLine, bd.chrootEnv(), []string{site}, append(args[1:], site)...))
	}
	if err != nil && len(bad) > 0 && ctx.Err() == nil {
		// Like pip: a module that does not compile fails when imported, not now.
		bd.p.Say("warning: %d files did not byte-compile (they will fail to import): %s", len(bad), strings.Join(bad[:min(len(bad), 5)], ", "))
		return nil
	}
	return err
}

func (bd *build) hasMatplotlib() bool {
	minor := "3"
	if bd.pyver != "" {
		minor = bd.pyver[:strings.LastIndexByte(bd.pyver, '.')]
	}
	for _, d := range []string{"usr/lib/python3/dist-packages/matplotlib", "usr/local/lib/python" + minor + "/dist-packages/matplotlib"} {
		if fi, err := os.Stat(filepath.Join(bd.tree, d)); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

// fontCache builds matplotlib's font list into mplConfigDir, so that the
// first import in a box does not spend seconds building it.
func (bd *build) fontCache(ctx context.Context) error {
	if !bd.hasMatplotlib() {
		bd.p.Status("no matplotlib in this image: nothing to do")
		return nil
	}
	dir := filepath.Join(bd.tree, mplConfigDir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// matplotlib lists the fonts it finds in the order of a set of file
	// names, which changes with the hash seed: a fixed seed keeps the
	// list, and so the image's digest, the same every build. That needs
	// the environment read (no -I); it is chrootEnv's alone, and -s -P
	// keep the rest of what -I does.
	env := bd.chrootEnv("MPLCONFIGDIR="+mplConfigDir, "MPLBACKEND=Agg", "PYTHONHASHSEED=0")
	code := "import matplotlib; from matplotlib import font_manager; print(len(font_manager.fontManager.ttflist), 'fonts')"
	if err := bd.python3(ctx, func(l string) { bd.p.Status("%s", l) }, env, []string{mplConfigDir}, "-s", "-P", "-c", code); err != nil {
		return err
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "fontlist-*.json")); len(m) == 0 {
		return errors.New("matplotlib wrote no fontlist-*.json")
	}
	return nil
}

// checks are the base's checks and the recipe's own.
func (bd *build) checks() []string {
	var c []string
	if bd.base != nil {
		c = append(c, bd.base.Checks...)
	}
	for _, s := range bd.r.Check {
		if !slices.Contains(c, s) {
			c = append(c, s)
		}
	}
	return c
}

// check runs each check in the tree as a box would run code: python3 -I
// with the box's environment and the prebuilt matplotlib configuration
// copied into its MPLCONFIGDIR.
func (bd *build) check(ctx context.Context) error {
	if _, err := bd.python(ctx); err != nil {
		return err
	}
	mpl := "/tmp/.config/matplotlib"
	if err := copyDirFiles(filepath.Join(bd.tree, mplConfigDir), filepath.Join(bd.tree, mpl)); err != nil {
		return err
	}
	before, err := dirState(filepath.Join(bd.tree, mpl))
	if err != nil {
		return err
	}
	env := bd.chrootEnv("HOME=/tmp", "MPLCONFIGDIR="+mpl, "MPLBACKEND=Agg", "OPENBLAS_NUM_THREADS=1")
	for i, c := range bd.checks() {
		bd.p.Status("%d/%d: %s", i+1, len(bd.checks()), shorten(c, 60))
		if err := bd.python3(ctx, nil, env, []string{"/tmp/.config"}, "-I", "-c", c); err != nil {
			return fmt.Errorf("check %q failed: %w", c, err)
		}
	}
	if err := bd.checkImports(ctx, env); err != nil {
		return err
	}
	if !bd.hasMatplotlib() {
		return nil
	}
	// matplotlib rewrites its font list when it cannot use the one it
	// finds; then every first import in a box would pay for it.
	after, err := dirState(filepath.Join(bd.tree, mpl))
	if err != nil {
		return err
	}
	for name, st := range after {
		if strings.HasPrefix(name, "fontlist-") && before[name] != st {
			return fmt.Errorf("matplotlib rebuilt %s: the prebuilt font cache in %s was not used", name, mplConfigDir)
		}
	}
	return nil
}

// describe writes what the image holds where the guest reads it when it
// mounts the image (wire.ImageAboutFile): its Python and its suite, for
// hello and every receipt. A layered image replaces its base's.
func (bd *build) describe(ctx context.Context) error {
	v, err := bd.python(ctx)
	if err != nil {
		return err
	}
	about := wire.ImageAbout{Python: v, Suite: bd.r.Suite}
	if err := about.Check(); err != nil {
		return err
	}
	b, err := json.Marshal(about)
	if err != nil {
		return err
	}
	dst := filepath.Join(bd.tree, wire.ImageAboutFile)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	bd.p.Status("python %s, %s", about.Python, about.Suite)
	return os.WriteFile(dst, append(b, '\n'), 0o644)
}

// dirState maps each file in dir to its size and modification time.
func dirState(dir string) (map[string]string, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, de := range des {
		fi, err := de.Info()
		if err != nil {
			return nil, err
		}
		out[de.Name()] = fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	}
	return out, nil
}

func copyDirFiles(src, dst string) error {
	des, err := os.ReadDir(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, de.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
