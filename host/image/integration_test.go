package image

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pybox/shared/archs"
	"pybox/shared/needs"
	"pybox/shared/wire"
)

// TestBuildRealImages builds for real: stdlib (a cache hit when `make
// images` ran with the same $PYBOX_CACHE) and a small custom image on it
// with one pure-Python Debian package and one wheel this test makes. A
// file with this run's time goes in too, so the custom image is really
// built every run; the second build of it must be a cache hit. It needs
// root, mmdebstrap, erofs-utils and the apt archive: CI has them.
func TestBuildRealImages(t *testing.T) {
	needs.Root(t, "building images (mmdebstrap --mode=root, chroot)")
	for _, tool := range []string{"mmdebstrap", "mkfs.erofs", "fsck.erofs"} {
		if _, err := exec.LookPath(tool); err != nil {
			needs.Unavailable(t, tool+" is not installed (try: make deps)")
		}
	}
	cache, err := CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	b := &Builder{Home: home, Cache: cache, Progress: t.Output()}
	testJailHelper(t, b)
	ctx := context.Background()

	stdlib, _ := BuiltIn("stdlib", "")
	res, err := b.Build(ctx, stdlib)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stdlib: cache hit %v in %.1fs, %s", res.CacheHit, res.Seconds, mib(res.Meta.Size))

	dir := t.TempDir()
	wheel := makeWheel(t, dir, helloWheel())
	marker := filepath.Join(dir, "marker.txt")
	stamp := "built by TestBuildRealImages at " + time.Now().Format(time.RFC3339Nano)
	if err := os.WriteFile(marker, []byte(stamp), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := UserRecipe("itest", "stdlib", "", []string{"python3-tabulate"}, []string{wheel}, []string{marker + ":/opt/itest/marker.txt"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := b.Build(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(b.entry(first.Meta.RecipeHash)) }) // each run's key is new
	if first.CacheHit {
		t.Fatal("a recipe with a new file was a cache hit")
	}
	t.Logf("itest: built in %.1fs, %s", first.Seconds, mib(first.Meta.Size))
	m := first.Meta
	if m.Base == nil || m.Base.Digest != res.Meta.Digest {
		t.Errorf("base = %+v, want stdlib %s", m.Base, res.Meta.Digest)
	}
	if !hasPackage(m.Main, "python3-tabulate") || !hasPackage(m.Main, "wheel:hello_pybox") || !hasPackage(m.Packages, "python3-tabulate") {
		t.Errorf("main packages %v", m.Main)
	}
	if hasPackage(res.Meta.Packages, "python3-tabulate") {
		t.Error("stdlib has tabulate: images are not isolated")
	}

	tree := filepath.Join(t.TempDir(), "tree")
	if out, err := exec.Command("fsck.erofs", "--extract="+tree, Path(home, "itest", archs.Host())).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs: %v\n%s", err, out)
	}
	code := "import tabulate, hello_pybox; print(hello_pybox.greet()); print(tabulate.tabulate([[1, 2]], tablefmt='plain'))"
	out := inChroot(t, tree, "/usr/bin/python3", "-I", "-c", code)
	if !strings.Contains(out, "hello from a wheel") || !strings.Contains(out, "1  2") {
		t.Errorf("python3 in the image printed %q", out)
	}
	if out := inChroot(t, tree, "/usr/local/bin/hello-pybox"); !strings.Contains(out, "hello from a wheel") {
		t.Errorf("the wheel's console script printed %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(tree, "opt/itest/marker.txt")); err != nil || string(b) != stamp {
		t.Errorf("the added file: %q, %v", b, err)
	}
	if m.Suite != DefaultSuite || m.Python == "" || m.Python != res.Meta.Python {
		t.Errorf("itest: suite %q, python %q; want %s and stdlib's python %s", m.Suite, m.Python, DefaultSuite, res.Meta.Python)
	}
	about, err := os.ReadFile(filepath.Join(tree, wire.ImageAboutFile))
	if a, derr := wire.DecodeImageAbout(about); err != nil || derr != nil || a.Python != m.Python || a.Suite != m.Suite {
		t.Errorf("%s: %q (%v, %v); want python %s, suite %s", wire.ImageAboutFile, about, err, derr, m.Python, m.Suite)
	}
	minor := m.Python[:strings.LastIndexByte(m.Python, '.')] // 3.13
	tag := "cpython-" + strings.ReplaceAll(minor, ".", "")   // cpython-313
	// tabulate is a module in Debian 12 and a package in Debian 13.
	tabulate := "usr/lib/python3/dist-packages/tabulate/__pycache__/__init__." + tag + ".pyc"
	if _, err := os.Stat(filepath.Join(tree, "usr/lib/python3/dist-packages/tabulate.py")); err == nil {
		tabulate = "usr/lib/python3/dist-packages/__pycache__/tabulate." + tag + ".pyc"
	}
	for _, pyc := range []string{
		tabulate,
		"usr/local/lib/python" + minor + "/dist-packages/hello_pybox/__pycache__/__init__." + tag + ".pyc",
		"usr/lib/python" + minor + "/__pycache__/os." + tag + ".pyc",
	} {
		checkUncheckedHash(t, filepath.Join(tree, pyc))
	}
	for _, gone := range []string{"etc/apt/sources.list.d/0000debian.sources", "var/lib/apt/lists/lock", "usr/bin/perldoc"} {
		if _, err := os.Lstat(filepath.Join(tree, gone)); err == nil {
			t.Errorf("%s is in the image", gone)
		}
	}

	again, err := b.Build(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if !again.CacheHit || again.Meta.Digest != m.Digest {
		t.Errorf("second build: cache hit %v, digest %s (first %s)", again.CacheHit, again.Meta.Digest, m.Digest)
	}
	if again.Seconds > 5 {
		t.Errorf("the cache hit took %.1fs", again.Seconds)
	}
	t.Logf("itest again: cache hit in %.2fs", again.Seconds)
}

func hasPackage(ps []Package, name string) bool {
	return slices.ContainsFunc(ps, func(p Package) bool { return p.Name == name })
}

func inChroot(t *testing.T, tree string, args ...string) string {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{tree}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/tmp", "PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%v in the image: %v\n%s", args, err, out)
	}
	return string(out)
}

// checkUncheckedHash checks a .pyc's flags word (PEP 552): 1 is
// "hash-based, do not check the source", what a read-only image needs.
func checkUncheckedHash(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Errorf("no byte code: %v", err)
		return
	}
	if len(b) < 16 || b[4] != 1 || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		t.Errorf("%s is not an unchecked-hash .pyc (flags % x)", p, b[4:8])
	}
}
