package image

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pybox/host/paths"
	"pybox/shared/archs"
)

// storeFake puts a fake image called name into home's store.
func storeFake(t *testing.T, home, name string) *Meta {
	t.Helper()
	p, digest := writeImage(t, fakeErofs(2))
	m := &Meta{Name: name, Digest: digest, Size: 2 * 4096, Python: "3.11.2"}
	if err := install(home, m, p); err != nil {
		t.Fatal(err)
	}
	return m
}

func writeState(t *testing.T, home string, pid int, names ...string) {
	t.Helper()
	type im struct {
		Name string `json:"name"`
	}
	s := struct {
		Pid    int  `json:"supervisor_pid"`
		Images []im `json:"images"`
	}{Pid: pid}
	for _, n := range names {
		s.Images = append(s.Images, im{n})
	}
	b, _ := json.Marshal(s)
	d := paths.ForVM(home)
	os.MkdirAll(d.Dir, 0o700)
	if err := os.WriteFile(d.State(), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func deadPid(t *testing.T) int {
	t.Helper()
	c := exec.Command("/bin/true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

func TestStore(t *testing.T) {
	home := t.TempDir()
	if es, err := List(home); err != nil || len(es) != 0 {
		t.Fatalf("empty store: %v, %v", es, err)
	}
	m := storeFake(t, home, "stdlib")
	got, err := Inspect(home, "stdlib", archs.X86_64)
	if err != nil || got.Digest != m.Digest {
		t.Fatalf("inspect: %+v, %v", got, err)
	}
	if _, err := Inspect(home, "data", archs.X86_64); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "pybox image build data") {
		t.Errorf("a missing built-in: %v", err)
	}
	if _, err := Inspect(home, "../images/stdlib", archs.X86_64); err == nil {
		t.Error("a path was accepted as a name")
	}
	// A broken entry is listed with its problem, not hidden.
	os.MkdirAll(Dir(home, "broken", archs.X86_64), 0o755)
	os.WriteFile(filepath.Join(Dir(home, "broken", archs.X86_64), MetaFile), []byte("{"), 0o644)
	es, err := List(home)
	if err != nil || len(es) != 2 || es[0].Name != "broken" || es[0].Problem == "" || es[1].Name != "stdlib" {
		t.Errorf("list: %+v, %v", es, err)
	}
	if err := Remove(home, "broken", archs.X86_64); err != nil {
		t.Errorf("removing a broken image: %v", err)
	}
	if err := Remove(home, "broken", archs.X86_64); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("removing it twice: %v", err)
	}
}

func TestRemoveRefusedWhileAttached(t *testing.T) {
	home := t.TempDir()
	storeFake(t, home, "stdlib")
	storeFake(t, home, "data")
	writeState(t, home, os.Getpid(), "stdlib")
	err := Remove(home, "stdlib", archs.X86_64)
	if err == nil || !strings.Contains(err.Error(), "pybox vm stop") {
		t.Errorf("removing an attached image: %v", err)
	}
	if _, err := Inspect(home, "stdlib", archs.X86_64); err != nil {
		t.Errorf("the attached image went away: %v", err)
	}
	if err := Remove(home, "data", archs.X86_64); err != nil {
		t.Errorf("removing an image the VM does not use: %v", err)
	}
	// A state file whose supervisor is gone is no VM.
	writeState(t, home, deadPid(t), "stdlib")
	if err := Remove(home, "stdlib", archs.X86_64); err != nil {
		t.Errorf("removing after the VM is gone: %v", err)
	}
	if names := storeNames(t, home); len(names) != 0 {
		t.Errorf("store holds %v", names)
	}
	// A state file that cannot be read refuses rather than guesses.
	storeFake(t, home, "stdlib")
	os.WriteFile(paths.ForVM(home).State(), []byte("not json"), 0o600)
	if err := Remove(home, "stdlib", archs.X86_64); err == nil {
		t.Error("removed with an unreadable state.json")
	}
}

func TestResolve(t *testing.T) {
	home := t.TempDir()
	if _, err := Resolve(home, archs.X86_64, nil); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "make images") {
		t.Errorf("no images: %v", err)
	}
	s := storeFake(t, home, "stdlib")
	atts, err := Resolve(home, archs.X86_64, nil)
	if err != nil || len(atts) != 1 || atts[0].Name != "stdlib" || atts[0].Digest != s.Digest || atts[0].Path != Path(home, "stdlib", archs.X86_64) {
		t.Fatalf("defaults: %+v, %v", atts, err)
	}
	storeFake(t, home, "data")
	storeFake(t, home, "tools")
	if atts, err = Resolve(home, archs.X86_64, nil); err != nil || len(atts) != 2 {
		t.Errorf("defaults are the built-in images: %+v, %v", atts, err)
	}
	if atts, err = Resolve(home, archs.X86_64, []string{"tools", "stdlib"}); err != nil || len(atts) != 2 || atts[0].Name != "tools" {
		t.Errorf("named: %+v, %v", atts, err)
	}
	if _, err := Resolve(home, archs.X86_64, []string{"stdlib", "stdlib"}); err == nil {
		t.Error("a name given twice was accepted")
	}
	if _, err := Resolve(home, archs.X86_64, []string{"nope"}); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("a missing image: %v", err)
	}
	// A truncated image stops the start and says what to rebuild.
	p := Path(home, "data", archs.X86_64)
	b, _ := os.ReadFile(p)
	os.Remove(p) // the store's file is read-only and may be a link to the cache
	os.WriteFile(p, b[:len(b)/2], 0o444)
	_, err = Resolve(home, archs.X86_64, []string{"stdlib", "data"})
	if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), "pybox image build data") {
		t.Errorf("a truncated image: %v", err)
	}
}

// An image an older pybox built still attaches, with a note that says
// how to get the current build; the current builder's get none.
func TestResolveNotesOlderImages(t *testing.T) {
	home := t.TempDir()
	storeFake(t, home, "stdlib") // builder 0: older than any
	storeFake(t, home, "tools")
	m := storeFake(t, home, "data")
	m.Builder = BuilderVersion
	if err := writeMeta(filepath.Join(Dir(home, "data", archs.X86_64), MetaFile), m); err != nil {
		t.Fatal(err)
	}
	atts, err := Resolve(home, archs.X86_64, []string{"stdlib", "tools", "data"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"pybox image import --force images/stdlib.pybox-image", "pybox image inspect tools", ""} {
		if got := atts[i].Note; (want == "") != (got == "") || !strings.Contains(got, want) || (want != "" && !strings.Contains(got, "built by an older pybox")) {
			t.Errorf("%s: note %q, want one saying %q", atts[i].Name, got, want)
		}
	}
}

// storeFakeArch puts a fake image called name, built for arch, into
// home's store.
func storeFakeArch(t *testing.T, home, name, arch string) *Meta {
	t.Helper()
	b := fakeErofs(2)
	copy(b[3000:], arch) // each architecture's is another image
	p, digest := writeImage(t, b)
	m := &Meta{Name: name, Digest: digest, Size: 2 * 4096, Python: "3.13.5", Suite: "trixie", Arch: arch, Builder: BuilderVersion,
		RecipeHash: strings.Repeat("cd", 32), Recipe: Recipe{Name: name, Suite: "trixie"}}
	if err := install(home, m, p); err != nil {
		t.Fatal(err)
	}
	return m
}

// An arm64 stdlib and an x86_64 stdlib are two images: each is found,
// listed and removed by its architecture, and a VM of one architecture
// never gets the other's.
func TestStoreKeepsArchesApart(t *testing.T) {
	home := t.TempDir()
	x := storeFakeArch(t, home, "stdlib", archs.X86_64)
	a := storeFakeArch(t, home, "stdlib", archs.Arm64)
	if x.Digest == a.Digest {
		t.Fatal("the fakes are the same image")
	}
	if names := storeNames(t, home); !slices.Equal(names, []string{"stdlib", "stdlib@arm64"}) {
		t.Errorf("store holds %v", names)
	}
	for _, m := range []*Meta{x, a} {
		got, err := Inspect(home, "stdlib", m.Arch)
		if err != nil || got.Digest != m.Digest || got.Arch != m.Arch {
			t.Errorf("%s: %+v, %v", m.Arch, got, err)
		}
		if p, d, err := Lookup(home, "stdlib", m.Arch); err != nil || d != m.Digest || p != Path(home, "stdlib", m.Arch) {
			t.Errorf("%s: lookup %s %s %v", m.Arch, p, d, err)
		}
	}
	es, err := List(home)
	if err != nil || len(es) != 2 || es[0].Arch != archs.Arm64 || es[1].Arch != archs.X86_64 || es[0].Problem != "" {
		t.Errorf("list: %+v, %v", es, err)
	}

	atts, err := Resolve(home, archs.Arm64, nil)
	if err != nil || len(atts) != 1 || atts[0].Digest != a.Digest || atts[0].Path != Path(home, "stdlib", archs.Arm64) {
		t.Errorf("arm64 defaults: %+v, %v", atts, err)
	}
	if atts, err = Resolve(home, archs.X86_64, []string{"stdlib"}); err != nil || len(atts) != 1 || atts[0].Digest != x.Digest {
		t.Errorf("x86_64: %+v, %v", atts, err)
	}

	// The running VM's images are its architecture's only.
	writeState(t, home, os.Getpid(), "stdlib")
	if err := Remove(home, "stdlib", archs.X86_64); err == nil || !strings.Contains(err.Error(), "pybox vm stop") {
		t.Errorf("removing the x86_64 VM's stdlib: %v", err)
	}
	if err := Remove(home, "stdlib", archs.Arm64); err != nil {
		t.Errorf("removing the arm64 stdlib while an x86_64 VM runs: %v", err)
	}
	if _, err := Inspect(home, "stdlib", archs.X86_64); err != nil {
		t.Errorf("removing arm64's took x86_64's: %v", err)
	}
	storeFakeArch(t, home, "stdlib", archs.Arm64)
	writeArchState(t, home, archs.Arm64, "stdlib")
	if used, err := InUse(home, archs.Arm64); err != nil || !used["stdlib"] {
		t.Errorf("an arm64 VM's images: %v, %v", used, err)
	}
	if used, err := InUse(home, archs.X86_64); err != nil || used["stdlib"] {
		t.Errorf("an arm64 VM uses x86_64's stdlib: %v, %v", used, err)
	}
}

// writeArchState writes a state.json of a running VM of arch.
func writeArchState(t *testing.T, home, arch string, names ...string) {
	t.Helper()
	type im struct {
		Name string `json:"name"`
	}
	s := struct {
		Pid    int    `json:"supervisor_pid"`
		Arch   string `json:"arch"`
		Images []im   `json:"images"`
	}{Pid: os.Getpid(), Arch: arch}
	for _, n := range names {
		s.Images = append(s.Images, im{n})
	}
	b, _ := json.Marshal(s)
	if err := os.WriteFile(paths.ForVM(home).State(), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// An image the store has only for another architecture than the VM's is
// refused, saying which it has and how to build the one the VM needs.
func TestResolveWrongArch(t *testing.T) {
	home := t.TempDir()
	storeFakeArch(t, home, "stdlib", archs.X86_64)
	storeFakeArch(t, home, "tools", archs.X86_64)
	_, err := Resolve(home, archs.Arm64, []string{"stdlib"})
	want := "image stdlib is built for x86_64, this VM is arm64: build it with `pybox image build stdlib --arch arm64`"
	if archs.Host() == archs.Arm64 {
		want = "image stdlib is built for x86_64, this VM is arm64: build it with `pybox image build stdlib`"
	}
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant %q", err, want)
	}
	_, err = Resolve(home, archs.Arm64, []string{"tools"})
	if err == nil || !strings.Contains(err.Error(), "image tools is built for x86_64, this VM is arm64") || !strings.Contains(err.Error(), "pybox image inspect tools --arch x86_64") {
		t.Errorf("a user image for another architecture: %v", err)
	}
	// With no names: the built-in images built for the VM's
	// architecture, and none here.
	_, err = Resolve(home, archs.Arm64, nil)
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "no image is built for arm64 (the store has stdlib for x86_64)") || !strings.Contains(err.Error(), "make images ARCH=arm64") {
		t.Errorf("arm64 defaults from an x86_64 store: %v", err)
	}
	if _, err := Resolve(home, "sparc", nil); err == nil || !strings.Contains(err.Error(), "use x86_64 or arm64") {
		t.Errorf("a sparc VM: %v", err)
	}
	// The command line's lookups say where the image is.
	_, err = Inspect(home, "stdlib", archs.Arm64)
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "image stdlib is not built for arm64, only for x86_64") || !strings.Contains(err.Error(), "--arch x86_64") {
		t.Errorf("inspect for arm64: %v", err)
	}
}

// An image built before images recorded their architecture is x86_64's:
// its meta.json has no arch, and it keeps working where it is.
func TestOldMetaIsX86(t *testing.T) {
	home := t.TempDir()
	m := storeFake(t, home, "stdlib")
	raw, err := os.ReadFile(filepath.Join(Dir(home, "stdlib", archs.X86_64), MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	json.Unmarshal(raw, &fields)
	delete(fields, "arch")
	raw, _ = json.Marshal(fields)
	if err := os.WriteFile(filepath.Join(Dir(home, "stdlib", archs.X86_64), MetaFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Inspect(home, "stdlib", archs.X86_64)
	if err != nil || got.Arch != archs.X86_64 || got.Digest != m.Digest {
		t.Fatalf("an old image: %+v, %v", got, err)
	}
	if Dir(home, "stdlib", archs.X86_64) != filepath.Join(paths.ImagesDir(home), "stdlib") {
		t.Errorf("x86_64's images moved: %s", Dir(home, "stdlib", archs.X86_64))
	}
	if atts, err := Resolve(home, archs.X86_64, nil); err != nil || len(atts) != 1 || atts[0].Digest != m.Digest {
		t.Errorf("resolving an old image: %+v, %v", atts, err)
	}
	if es, err := List(home); err != nil || len(es) != 1 || es[0].Arch != archs.X86_64 {
		t.Errorf("list: %+v, %v", es, err)
	}
	// A meta.json that names another architecture than its place's is
	// refused rather than attached to the wrong VM.
	fields["arch"] = archs.Arm64
	raw, _ = json.Marshal(fields)
	os.WriteFile(filepath.Join(Dir(home, "stdlib", archs.X86_64), MetaFile), raw, 0o644)
	if _, err := Inspect(home, "stdlib", archs.X86_64); err == nil || !strings.Contains(err.Error(), "says it is built for arm64") {
		t.Errorf("an arm64 meta.json in x86_64's place: %v", err)
	}
}
