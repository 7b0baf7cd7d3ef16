package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pybox/host/paths"
	"pybox/shared/archs"
	"pybox/shared/wire"
)

func testBuilder(t *testing.T) *Builder {
	t.Helper()
	dir := t.TempDir()
	return &Builder{Home: filepath.Join(dir, "home"), Cache: filepath.Join(dir, "cache", "images")}
}

// fakeSteps stand in for mmdebstrap and mkfs.erofs: they make a tree with
// a dpkg status file and "pack" a small valid-looking erofs file. ran
// counts the builds that ran; the step named fail fails midway, after
// writing into the tree and the image.
func fakeSteps(ran *int, fail string) []step {
	yes := func(*build) bool { return true }
	none := func(*build) string { return "" }
	return []step{
		{"tree", yes, func(bd *build, _ context.Context) error {
			*ran++
			if err := os.MkdirAll(filepath.Join(bd.tree, "var/lib/dpkg"), 0o755); err != nil {
				return err
			}
			status := "Package: python3\nStatus: install ok installed\nVersion: 3.11.2-1\n\n"
			return os.WriteFile(filepath.Join(bd.tree, "var/lib/dpkg/status"), []byte(status), 0o644)
		}, none},
		{"pack", yes, func(bd *build, _ context.Context) error {
			b := fakeErofs(2)
			copy(b[3000:], bd.key) // a different recipe makes a different image
			if err := os.WriteFile(bd.image, b, 0o644); err != nil {
				return err
			}
			if fail == "pack" {
				return errors.New("disk full (simulated)")
			}
			return nil
		}, none},
	}
}

func storeNames(t *testing.T, home string) []string {
	t.Helper()
	des, err := os.ReadDir(paths.ImagesDir(home))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func TestBuildStoresAndCaches(t *testing.T) {
	b := testBuilder(t)
	ran := 0
	b.steps = fakeSteps(&ran, "")
	r := &Recipe{Name: "stdlib", Apt: []string{"python3"}, Main: []string{"python3"}, SourceDateEpoch: 1}
	res, err := b.Build(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if res.CacheHit || ran != 1 {
		t.Fatalf("first build: cache hit %v, ran %d", res.CacheHit, ran)
	}
	p, digest, err := Lookup(b.Home, "stdlib", archs.Host())
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyFile(p, digest); err != nil {
		t.Fatalf("the stored image does not match its meta: %v", err)
	}
	m, err := Inspect(b.Home, "stdlib", archs.Host())
	if err != nil {
		t.Fatal(err)
	}
	if m.RecipeHash == "" || len(m.Main) != 1 || m.Main[0].Version != "3.11.2-1" || m.Builder != BuilderVersion {
		t.Errorf("meta = %+v", m)
	}
	if names := storeNames(t, b.Home); len(names) != 1 || names[0] != "stdlib" {
		t.Errorf("store holds %v, want only stdlib", names)
	}

	// The same recipe again: a cache hit, nothing runs, same image.
	start := time.Now()
	res, err = b.Build(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if !res.CacheHit || ran != 1 || res.Meta.Digest != digest {
		t.Errorf("second build: cache hit %v, ran %d, digest %s (was %s)", res.CacheHit, ran, res.Meta.Digest, digest)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a cache hit took %v", d)
	}

	// A changed recipe builds again, and replaces the stored image.
	r2 := *r
	r2.Apt = append(r2.Apt, "python3-gdbm")
	res, err = b.Build(context.Background(), &r2)
	if err != nil {
		t.Fatal(err)
	}
	if res.CacheHit || ran != 2 || res.Meta.Digest == digest {
		t.Errorf("changed recipe: cache hit %v, ran %d", res.CacheHit, ran)
	}
	if _, d2, _ := Lookup(b.Home, "stdlib", archs.Host()); d2 != res.Meta.Digest {
		t.Errorf("the store still has digest %s", d2)
	}
	// --no-cache builds even an unchanged recipe.
	b.NoCache = true
	if res, err = b.Build(context.Background(), &r2); err != nil || res.CacheHit || ran != 3 {
		t.Errorf("--no-cache: %v, hit %v, ran %d", err, res != nil && res.CacheHit, ran)
	}
}

func TestFailedBuildLeavesNothing(t *testing.T) {
	b := testBuilder(t)
	ran := 0
	b.steps = fakeSteps(&ran, "pack")
	r := &Recipe{Name: "stdlib", Apt: []string{"python3"}, SourceDateEpoch: 1}
	_, err := b.Build(context.Background(), r)
	if err == nil {
		t.Fatal("a failing build succeeded")
	}
	for _, want := range []string{"pack", "disk full", "nothing was stored", "build log"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if names := storeNames(t, b.Home); len(names) != 0 {
		t.Errorf("a failed build left %v in the store", names)
	}
	assertNoWork(t, b)

	// A failure does not touch the image already in the store.
	b.steps = fakeSteps(&ran, "")
	good, err := b.Build(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	b.steps = fakeSteps(&ran, "pack")
	r2 := *r
	r2.Apt = []string{"python3", "python3-gdbm"}
	if _, err := b.Build(context.Background(), &r2); err == nil {
		t.Fatal("a failing build succeeded")
	}
	if _, d, err := Lookup(b.Home, "stdlib", archs.Host()); err != nil || d != good.Meta.Digest {
		t.Errorf("after a failed rebuild the store has %s (%v), want the old %s", d, err, good.Meta.Digest)
	}
	if names := storeNames(t, b.Home); len(names) != 1 {
		t.Errorf("store holds %v", names)
	}
}

// TestInterruptedBuildLeavesNothing cancels a build while a step's
// command runs (as Ctrl-C does): the command's whole process group
// stops, and nothing reaches the store or stays in the work directory.
func TestInterruptedBuildLeavesNothing(t *testing.T) {
	b := testBuilder(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	ran := 0
	steps := fakeSteps(&ran, "")
	slow := step{"slow", func(*build) bool { return true }, func(bd *build, ctx context.Context) error {
		return run(ctx, bd.log, command{path: "/bin/sh", args: []string{"-c", `echo $$ > "$1"; sleep 60 & wait`, "sh", pidFile}})
	}, func(*build) string { return "" }}
	b.steps = []step{steps[0], slow, steps[1]}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(pidFile); err == nil {
				time.Sleep(100 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	start := time.Now()
	_, err := b.Build(ctx, &Recipe{Name: "stdlib", Apt: []string{"python3"}, SourceDateEpoch: 1})
	if err == nil || !strings.Contains(err.Error(), "interrupted") || !strings.Contains(err.Error(), "nothing was stored") {
		t.Fatalf("got %v, want an interrupted build", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stopping took %v", d)
	}
	b2, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b2)))
	// The group's last members may take a moment to be reaped by init.
	for i := 0; pid > 0 && syscall.Kill(-pid, 0) == nil; i++ {
		if i == 50 {
			t.Errorf("process group %d is still alive", pid)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if names := storeNames(t, b.Home); len(names) != 0 {
		t.Errorf("an interrupted build left %v in the store", names)
	}
	assertNoWork(t, b)
}

func assertNoWork(t *testing.T, b *Builder) {
	t.Helper()
	des, _ := os.ReadDir(b.workRoot())
	if len(des) != 0 {
		t.Errorf("work directory holds %d entries after the build", len(des))
	}
	des, _ = os.ReadDir(b.Cache)
	for _, de := range des {
		if len(de.Name()) == 64 || strings.HasPrefix(de.Name(), ".tmp-") {
			t.Errorf("cache holds %s after a failed build", de.Name())
		}
	}
}

func TestBuiltInBaseIsBuiltFirst(t *testing.T) {
	b := testBuilder(t)
	ran := 0
	b.steps = fakeSteps(&ran, "")
	r, err := UserRecipe("tools", "", "", []string{"python3-tabulate"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Build(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if ran != 2 {
		t.Errorf("ran %d builds, want stdlib then tools", ran)
	}
	base, err := Inspect(b.Home, "stdlib", archs.Host())
	if err != nil {
		t.Fatal(err)
	}
	if res.Meta.Base == nil || res.Meta.Base.Digest != base.Digest {
		t.Errorf("tools' base is %+v, want stdlib %s", res.Meta.Base, base.Digest)
	}
	// A user image's base must exist: it is never guessed.
	r2, _ := UserRecipe("more", "tools2", "", nil, nil, nil, nil)
	if _, err := b.Build(context.Background(), r2); err == nil || !errors.Is(err, ErrNotBuilt) {
		t.Errorf("a missing user base: %v", err)
	}
}

// stepNamed is one of the real build's steps.
func stepNamed(t *testing.T, name string) step {
	t.Helper()
	for _, s := range steps {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no step %s", name)
	return step{}
}

// A user image is built from its base's suite; asked for another, it
// starts from the built-in base of that suite, built in the cache only.
func TestSuites(t *testing.T) {
	b := testBuilder(t)
	ran := 0
	b.steps = fakeSteps(&ran, "")
	ctx := context.Background()
	stdlib, _ := BuiltIn("stdlib", "")
	st, err := b.Build(ctx, stdlib)
	if err != nil {
		t.Fatal(err)
	}
	if st.Meta.Suite != DefaultSuite {
		t.Errorf("stdlib is from %q, want %s", st.Meta.Suite, DefaultSuite)
	}
	tools, _ := UserRecipe("tools", "stdlib", "", []string{"python3-tabulate"}, nil, nil, nil)
	res, err := b.Build(ctx, tools)
	if err != nil {
		t.Fatal(err)
	}
	if res.Meta.Suite != DefaultSuite || res.Meta.Recipe.Suite != DefaultSuite {
		t.Errorf("tools is from %q (recipe %q), want its base's %s", res.Meta.Suite, res.Meta.Recipe.Suite, DefaultSuite)
	}

	old, _ := UserRecipe("old", "stdlib", "bookworm", []string{"python3-tabulate"}, nil, nil, nil)
	ran = 0
	res, err = b.Build(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if ran != 2 || res.Meta.Suite != "bookworm" || res.Meta.Base == nil || res.Meta.Base.Digest == st.Meta.Digest {
		t.Errorf("old: ran %d, suite %q, base %+v; want a bookworm stdlib built first, and old on it", ran, res.Meta.Suite, res.Meta.Base)
	}
	if m, err := Inspect(b.Home, "stdlib", archs.Host()); err != nil || m.Digest != st.Meta.Digest {
		t.Errorf("the stored stdlib changed: %+v %v", m, err)
	}
	if names := storeNames(t, b.Home); !slices.Equal(names, []string{"old", "stdlib", "tools"}) {
		t.Errorf("store holds %v", names)
	}
	// Again: both are cache hits.
	ran = 0
	if again, err := b.Build(ctx, old); err != nil || !again.CacheHit || ran != 0 || again.Meta.Digest != res.Meta.Digest {
		t.Errorf("old again: %v, ran %d", err, ran)
	}

	// A user's image is not rebuilt for another suite.
	more, _ := UserRecipe("more", "tools", "bookworm", nil, nil, nil, nil)
	if _, err := b.Build(ctx, more); err == nil || !strings.Contains(err.Error(), "built from trixie, not bookworm") {
		t.Errorf("a bookworm image on a trixie user image: %v", err)
	}
}

// A built-in base that is not built is built into the store only when it
// is wanted from the default suite.
func TestSuiteBaseNotBuilt(t *testing.T) {
	b := testBuilder(t)
	ran := 0
	b.steps = fakeSteps(&ran, "")
	old, _ := UserRecipe("old", "stdlib", "bookworm", nil, nil, nil, nil)
	res, err := b.Build(context.Background(), old)
	if err != nil {
		t.Fatal(err)
	}
	if names := storeNames(t, b.Home); !slices.Equal(names, []string{"old"}) || ran != 2 || res.Meta.Suite != "bookworm" {
		t.Errorf("store holds %v after %d builds, suite %q; want only old, from bookworm", names, ran, res.Meta.Suite)
	}
}

// An image built before pybox recorded suites says how to move on.
func TestSuiteUnknownBase(t *testing.T) {
	b := testBuilder(t)
	ran := 0
	b.steps = fakeSteps(&ran, "")
	stdlib, _ := BuiltIn("stdlib", "")
	if _, err := b.Build(context.Background(), stdlib); err != nil {
		t.Fatal(err)
	}
	m, err := Inspect(b.Home, "stdlib", archs.Host())
	if err != nil {
		t.Fatal(err)
	}
	m.Suite = ""
	if err := writeMeta(filepath.Join(Dir(b.Home, "stdlib", archs.Host()), MetaFile), m); err != nil {
		t.Fatal(err)
	}
	tools, _ := UserRecipe("tools", "stdlib", "", nil, nil, nil, nil)
	if _, err := b.Build(context.Background(), tools); err == nil || !strings.Contains(err.Error(), "pybox image build stdlib") {
		t.Errorf("a base without a suite: %v", err)
	}
}

// A strip list that names a package the tree does not have fails the
// build: it was written for another release.
func TestStripListMustMatch(t *testing.T) {
	b := testBuilder(t)
	ran := 0
	fake := fakeSteps(&ran, "")
	b.steps = []step{fake[0], stepNamed(t, "strip"), fake[1]}
	r := &Recipe{Name: "stdlib", Apt: []string{"python3"}, SourceDateEpoch: 1,
		Strip: Strip{Why: "test", Packages: []string{"python3", "gcc-12", "python3.11-dev"}}}
	_, err := b.Build(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "gcc-12, python3.11-dev") || strings.Contains(err.Error(), "python3,") {
		t.Fatalf("got %v, want the build to fail naming gcc-12 and python3.11-dev", err)
	}
	if names := storeNames(t, b.Home); len(names) != 0 {
		t.Errorf("store holds %v", names)
	}
}

// The image says what it holds where the guest reads it.
func TestDescribe(t *testing.T) {
	b := testBuilder(t)
	ran := 0
	fake := fakeSteps(&ran, "")
	var about []byte
	tree := fake[0]
	tree.run = func(bd *build, ctx context.Context) error {
		bd.pyver = "3.13.5" // as the tree's python3 would say
		return fake[0].run(bd, ctx)
	}
	read := step{"read", func(*build) bool { return true }, func(bd *build, _ context.Context) error {
		var err error
		about, err = os.ReadFile(filepath.Join(bd.tree, wire.ImageAboutFile))
		return err
	}, func(*build) string { return "" }}
	b.steps = []step{tree, stepNamed(t, "describe"), read, fake[1]}
	r, _ := BuiltIn("stdlib", "bookworm")
	res, err := b.Build(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := wire.DecodeImageAbout(about)
	if err != nil || a != (wire.ImageAbout{Python: "3.13.5", Suite: "bookworm"}) || res.Meta.Suite != "bookworm" {
		t.Errorf("%s holds %q (%v); meta suite %q", wire.ImageAboutFile, about, err, res.Meta.Suite)
	}
}

// A strip list built for an architecture uses that architecture's names:
// one it does not have fails the build, naming it and the architecture;
// a list that leaves the architecture out fails before anything runs.
func TestStripListPerArch(t *testing.T) {
	b := testBuilder(t)
	b.Arch = archs.Arm64
	ran := 0
	fake := fakeSteps(&ran, "")
	b.steps = []step{fake[0], stepNamed(t, "strip"), fake[1]}
	r := &Recipe{Name: "stdlib", Apt: []string{"python3"}, SourceDateEpoch: 1,
		Strip: Strip{Why: "test", PerArch: map[string][]string{archs.X86_64: {"python3"}, archs.Arm64: {"binutils-aarch64-linux-gnu"}}}}
	_, err := b.Build(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "binutils-aarch64-linux-gnu, not installed in this trixie arm64 tree") || !strings.Contains(err.Error(), "per_arch") {
		t.Fatalf("got %v, want the build to fail naming binutils-aarch64-linux-gnu and arm64", err)
	}
	delete(r.Strip.PerArch, archs.Arm64)
	ran = 0
	_, err = b.Build(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "image stdlib for arm64") || !strings.Contains(err.Error(), "not for arm64") || ran != 0 {
		t.Fatalf("got %v after %d steps, want the build to stop first, saying per_arch has no arm64 list", err, ran)
	}
	if names := storeNames(t, b.Home); len(names) != 0 {
		t.Errorf("store holds %v", names)
	}
}

// Builds for two architectures are two images: both in the store, each
// recording its architecture, a user's image built on the base of its
// own architecture, and neither replacing the other.
func TestBuildArches(t *testing.T) {
	b := testBuilder(t)
	ran := 0
	b.steps = fakeSteps(&ran, "")
	ctx := context.Background()
	stdlib, _ := BuiltIn("stdlib", "")
	res := map[string]*Result{}
	for _, a := range archs.All {
		b.Arch = a
		r, err := b.Build(ctx, stdlib)
		if err != nil {
			t.Fatal(err)
		}
		if r.Meta.Arch != a || r.Path != Path(b.Home, "stdlib", a) {
			t.Errorf("%s: meta arch %q, path %s", a, r.Meta.Arch, r.Path)
		}
		res[a] = r
	}
	if ran != 2 || res[archs.X86_64].Meta.Digest == res[archs.Arm64].Meta.Digest || res[archs.X86_64].Meta.RecipeHash == res[archs.Arm64].Meta.RecipeHash {
		t.Errorf("ran %d builds; digests %s and %s: want two images", ran, res[archs.X86_64].Meta.Digest, res[archs.Arm64].Meta.Digest)
	}
	if names := storeNames(t, b.Home); !slices.Equal(names, []string{"stdlib", "stdlib@arm64"}) {
		t.Errorf("store holds %v", names)
	}
	for _, a := range archs.All {
		if m, err := Inspect(b.Home, "stdlib", a); err != nil || m.Digest != res[a].Meta.Digest {
			t.Errorf("%s: %+v, %v", a, m, err)
		}
	}
	// The arm64 one again is a cache hit, and x86_64's stays.
	b.Arch = archs.Arm64
	if again, err := b.Build(ctx, stdlib); err != nil || !again.CacheHit || again.Meta.Arch != archs.Arm64 {
		t.Errorf("arm64 again: %+v, %v", again, err)
	}
	tools, _ := UserRecipe("tools", "stdlib", "", []string{"python3-tabulate"}, nil, nil, nil)
	tr, err := b.Build(ctx, tools)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Meta.Arch != archs.Arm64 || tr.Meta.Base == nil || tr.Meta.Base.Digest != res[archs.Arm64].Meta.Digest {
		t.Errorf("tools for arm64: arch %q, base %+v; want arm64's stdlib %s", tr.Meta.Arch, tr.Meta.Base, res[archs.Arm64].Meta.Digest)
	}
	// Its base for x86_64 is not asked for, so x86_64 has no tools.
	if _, err := Inspect(b.Home, "tools", archs.X86_64); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "only for arm64") {
		t.Errorf("tools for x86_64: %v", err)
	}
	b.Arch = "sparc"
	if _, err := b.Build(ctx, stdlib); err == nil || !strings.Contains(err.Error(), "use x86_64 or arm64") {
		t.Errorf("a build for sparc: %v", err)
	}
}
