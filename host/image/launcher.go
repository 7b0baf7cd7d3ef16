package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"pybox/shared/launcher"
)

// The warm box's launcher (shared/launcher) is C that reads the
// interpreter's own state, so it is compiled against the headers of the
// very Python the image holds. The image's tree has no compiler, and
// should not get one: a toolchain tree of the same suite and architecture
// (gcc, libc6-dev, libpythonX.Y-dev; another architecture's runs through
// qemu-user as the image's tree does) is made beside it, once per suite,
// architecture and Python package version, and kept in the cache; the
// compiled launcher is cached by those and its source. Layered images
// find the same launcher in the cache as their base.

// launcherPythons are the Python versions whose internals the launcher
// knows. An image of another Python builds, says so, and runs its
// programs in cold boxes.
var launcherPythons = []string{"3.11", "3.12", "3.13"}

// launcherFlags are the compiler's flags: position-independent, every
// symbol hidden but the one it interposes, no path of the build in it.
var launcherFlags = []string{"-shared", "-fPIC", "-O2", "-g0", "-fvisibility=hidden", "-Wall", "-Wextra",
	"-ffile-prefix-map=/tmp/pybox-launch=.", "-Wl,--build-id=none"}

// launcherStep puts the compiled launcher at launcher.Path in the tree.
func (bd *build) launcher(ctx context.Context) error {
	minor, err := bd.pyMinor(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(launcherPythons, minor) {
		bd.p.Say("warning: no warm launcher for Python %s (it knows %s): this image's programs run in cold boxes", minor, strings.Join(launcherPythons, ", "))
		return nil
	}
	installed, err := installedPackages(bd.tree)
	if err != nil {
		return err
	}
	pkg := "python" + minor + "-minimal"
	version := packageMap(installed)[pkg]
	if version == "" {
		return fmt.Errorf("the tree has python3 %s but no package %s", minor, pkg)
	}
	so, err := bd.compiledLauncher(ctx, minor, version)
	if err != nil {
		return err
	}
	dst := filepath.Join(bd.tree, launcher.Path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(so)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return err
	}
	// The interpreter loads it: a python3 that is not a warm box (no
	// socket on fd 3) runs as it always does.
	var got string
	env := bd.chrootEnv(launcher.Env)
	if err := bd.python3(ctx, func(l string) { got = strings.TrimSpace(l) }, env, nil, "-I", "-c", "import os; print(os.environ.get('LD_PRELOAD', 'gone'))"); err != nil {
		return fmt.Errorf("python3 does not start with the launcher loaded: %w", err)
	}
	if got != "gone" {
		return fmt.Errorf("python3 with the launcher loaded printed %q, not \"gone\"", got)
	}
	bd.p.Status("%s for Python %s (%s)", launcher.Path, minor, version)
	return nil
}

// compiledLauncher returns the cached launcher for this Python, compiling
// it first if needed.
func (bd *build) compiledLauncher(ctx context.Context, minor, version string) (string, error) {
	dir := filepath.Join(bd.b.Cache, "launcher")
	// Debian's name of the architecture: amd64 for x86_64, as the
	// toolchains made before images had a choice of one are named.
	id := bd.r.Suite + "-" + debianArch(bd.arch) + "-" + safeName(version)
	key := textSHA256(strings.Join(append([]string{launcher.SourceSHA256(), id}, launcherFlags...), "\n"))[:16]
	so := filepath.Join(dir, id+"-"+key+".so")
	if _, err := os.Stat(so); err == nil {
		bd.p.Status("cached %s", filepath.Base(so))
		return so, nil
	}
	tc, err := bd.toolchain(ctx, dir, id, minor, version)
	if err != nil {
		return "", err
	}
	src := filepath.Join(tc, "tmp/pybox-launch/pybox-launch.c")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(src, []byte(launcher.Source), 0o644); err != nil {
		return "", err
	}
	bd.p.Status("compiling the launcher for Python %s", minor)
	args := append(slices.Clone(launcherFlags), "-I/usr/include/python"+minor, "-o", "/tmp/pybox-launch/pybox-launch.so", "/tmp/pybox-launch/pybox-launch.c")
	if err := run(ctx, bd.log, command{path: "/usr/bin/gcc", args: args, env: bd.chrootEnv(), chroot: tc}); err != nil {
		return "", fmt.Errorf("compiling %s against Python %s: %w", filepath.Base(src), version, err)
	}
	b, err := os.ReadFile(filepath.Join(tc, "tmp/pybox-launch/pybox-launch.so"))
	if err != nil {
		return "", err
	}
	// Launchers of an older source for this Python are no use any more.
	old, _ := filepath.Glob(filepath.Join(dir, id+"-*.so"))
	for _, o := range old {
		os.Remove(o)
	}
	tmp := so + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return "", err
	}
	return so, os.Rename(tmp, so)
}

// toolchain returns a tree of the image's suite with gcc and the headers
// of exactly its Python, making it once.
func (bd *build) toolchain(ctx context.Context, dir, id, minor, version string) (string, error) {
	tc := filepath.Join(dir, "toolchain-"+id)
	ready := filepath.Join(dir, "toolchain-"+id+".ready")
	if _, err := os.Stat(ready); err == nil {
		return tc, nil
	}
	// Toolchains of other Python versions are no use any more.
	if old, _ := filepath.Glob(filepath.Join(dir, "toolchain-"+bd.r.Suite+"-"+debianArch(bd.arch)+"-*")); len(old) > 0 {
		for _, o := range old {
			if err := removeTree(o); err != nil {
				return "", err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dev := "libpython" + minor + "-dev"
	bd.p.Status("a %s %s toolchain for the launcher (gcc, %s)", bd.r.Suite, bd.arch, dev)
	args := bootstrapArgs(tc, bd.sources, debianArch(bd.arch), []string{"gcc", "libc6-dev", dev})
	if err := bd.mmdebstrap(ctx, args); err != nil {
		removeTree(tc)
		return "", fmt.Errorf("the launcher's toolchain: %w", err)
	}
	installed, err := installedPackages(tc)
	if err != nil {
		return "", err
	}
	if got := packageMap(installed)[dev]; got != version {
		removeTree(tc)
		return "", fmt.Errorf("the archive gave the launcher's toolchain %s %s, but the image has Python %s: the archive changed during the build; run it again", dev, got, version)
	}
	return tc, os.WriteFile(ready, nil, 0o644)
}

// safeName makes a Debian version a file name: "3.13.5-2+deb13u1" stays,
// a ':' or '/' does not.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ':' || r == '/' || r == '~' {
			return '_'
		}
		return r
	}, s)
}
