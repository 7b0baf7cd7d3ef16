package image

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pybox/host/paths"
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
	got, err := Inspect(home, "stdlib")
	if err != nil || got.Digest != m.Digest {
		t.Fatalf("inspect: %+v, %v", got, err)
	}
	if _, err := Inspect(home, "data"); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "pybox image build data") {
		t.Errorf("a missing built-in: %v", err)
	}
	if _, err := Inspect(home, "../images/stdlib"); err == nil {
		t.Error("a path was accepted as a name")
	}
	// A broken entry is listed with its problem, not hidden.
	os.MkdirAll(Dir(home, "broken"), 0o755)
	os.WriteFile(filepath.Join(Dir(home, "broken"), MetaFile), []byte("{"), 0o644)
	es, err := List(home)
	if err != nil || len(es) != 2 || es[0].Name != "broken" || es[0].Problem == "" || es[1].Name != "stdlib" {
		t.Errorf("list: %+v, %v", es, err)
	}
	if err := Remove(home, "broken"); err != nil {
		t.Errorf("removing a broken image: %v", err)
	}
	if err := Remove(home, "broken"); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("removing it twice: %v", err)
	}
}

func TestRemoveRefusedWhileAttached(t *testing.T) {
	home := t.TempDir()
	storeFake(t, home, "stdlib")
	storeFake(t, home, "data")
	writeState(t, home, os.Getpid(), "stdlib")
	err := Remove(home, "stdlib")
	if err == nil || !strings.Contains(err.Error(), "pybox vm stop") {
		t.Errorf("removing an attached image: %v", err)
	}
	if _, err := Inspect(home, "stdlib"); err != nil {
		t.Errorf("the attached image went away: %v", err)
	}
	if err := Remove(home, "data"); err != nil {
		t.Errorf("removing an image the VM does not use: %v", err)
	}
	// A state file whose supervisor is gone is no VM.
	writeState(t, home, deadPid(t), "stdlib")
	if err := Remove(home, "stdlib"); err != nil {
		t.Errorf("removing after the VM is gone: %v", err)
	}
	if names := storeNames(t, home); len(names) != 0 {
		t.Errorf("store holds %v", names)
	}
	// A state file that cannot be read refuses rather than guesses.
	storeFake(t, home, "stdlib")
	os.WriteFile(paths.ForVM(home).State(), []byte("not json"), 0o600)
	if err := Remove(home, "stdlib"); err == nil {
		t.Error("removed with an unreadable state.json")
	}
}

func TestResolve(t *testing.T) {
	home := t.TempDir()
	if _, err := Resolve(home, nil); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "make images") {
		t.Errorf("no images: %v", err)
	}
	s := storeFake(t, home, "stdlib")
	atts, err := Resolve(home, nil)
	if err != nil || len(atts) != 1 || atts[0].Name != "stdlib" || atts[0].Digest != s.Digest || atts[0].Path != Path(home, "stdlib") {
		t.Fatalf("defaults: %+v, %v", atts, err)
	}
	storeFake(t, home, "data")
	storeFake(t, home, "tools")
	if atts, err = Resolve(home, nil); err != nil || len(atts) != 2 {
		t.Errorf("defaults are the built-in images: %+v, %v", atts, err)
	}
	if atts, err = Resolve(home, []string{"tools", "stdlib"}); err != nil || len(atts) != 2 || atts[0].Name != "tools" {
		t.Errorf("named: %+v, %v", atts, err)
	}
	if _, err := Resolve(home, []string{"stdlib", "stdlib"}); err == nil {
		t.Error("a name given twice was accepted")
	}
	if _, err := Resolve(home, []string{"nope"}); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("a missing image: %v", err)
	}
	// A truncated image stops the start and says what to rebuild.
	p := Path(home, "data")
	b, _ := os.ReadFile(p)
	os.Remove(p) // the store's file is read-only and may be a link to the cache
	os.WriteFile(p, b[:len(b)/2], 0o444)
	_, err = Resolve(home, []string{"stdlib", "data"})
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
	if err := writeMeta(filepath.Join(Dir(home, "data"), MetaFile), m); err != nil {
		t.Fatal(err)
	}
	atts, err := Resolve(home, []string{"stdlib", "tools", "data"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"pybox image import --force images/stdlib.pybox-image", "pybox image inspect tools", ""} {
		if got := atts[i].Note; (want == "") != (got == "") || !strings.Contains(got, want) || (want != "" && !strings.Contains(got, "built by an older pybox")) {
			t.Errorf("%s: note %q, want one saying %q", atts[i].Name, got, want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/end\04`: `/end\04`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
