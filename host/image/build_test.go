package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pybox/host/paths"
)

func testBuilder(t *testing.T) *Builder {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "debian.sources")
	if err := os.WriteFile(src, []byte("Types: deb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Builder{Home: filepath.Join(dir, "home"), Cache: filepath.Join(dir, "cache", "images"), Sources: src}
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
	p, digest, err := Lookup(b.Home, "stdlib")
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyFile(p, digest); err != nil {
		t.Fatalf("the stored image does not match its meta: %v", err)
	}
	m, err := Inspect(b.Home, "stdlib")
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
	if _, d2, _ := Lookup(b.Home, "stdlib"); d2 != res.Meta.Digest {
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
	if _, d, err := Lookup(b.Home, "stdlib"); err != nil || d != good.Meta.Digest {
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
	r, err := UserRecipe("tools", "", []string{"python3-tabulate"}, nil, nil)
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
	base, err := Inspect(b.Home, "stdlib")
	if err != nil {
		t.Fatal(err)
	}
	if res.Meta.Base == nil || res.Meta.Base.Digest != base.Digest {
		t.Errorf("tools' base is %+v, want stdlib %s", res.Meta.Base, base.Digest)
	}
	// A user image's base must exist: it is never guessed.
	r2, _ := UserRecipe("more", "tools2", nil, nil, nil)
	if _, err := b.Build(context.Background(), r2); err == nil || !errors.Is(err, ErrNotBuilt) {
		t.Errorf("a missing user base: %v", err)
	}
}
