package mcp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pybox/host/outdir"
	"pybox/shared/wire"
)

// Servers of several agents on one output folder share its bound: what
// a run in progress on one has reserved is not offered to the others,
// and a server that finds the rest too small refuses, saying so.
func TestOutputDirSharedByServers(t *testing.T) {
	dir := t.TempDir()
	const perRun = 64 << 10
	os.WriteFile(filepath.Join(dir, "earlier.bin"), make([]byte, 10000), 0o644)
	before, _ := outdir.Measure(dir)
	total := before.Cost() + 2*outdir.EntryCost + perRun + perRun/2 // one run's room and half another's; the ledger's entry and block
	o := Options{Images: []string{"stdlib"}, MaxTimeout: 5, OutputDir: dir, MaxOutputDirBytes: perRun, MaxOutputDirTotal: total}

	holding := newFakeVM()
	asked := make(chan int64, 3)
	release := make(chan struct{})
	holding.deliver = func(r *wire.Run, output func(*wire.OutputChunk)) (*wire.Result, error) {
		asked <- r.Deliver.MaxBytes
		<-release
		return &wire.Result{Receipt: receipt(r.RunID, wire.StatusOK, wire.CleanupRemoved)}, nil
	}
	done := make(chan *decoded)
	first := startSession(t, o, holding, testLimits()).client("")
	go func() { done <- callTool(t, first, map[string]any{"code": "x"}) }()
	a := <-asked

	other := newFakeVM()
	other.deliver = func(r *wire.Run, output func(*wire.OutputChunk)) (*wire.Result, error) {
		asked <- r.Deliver.MaxBytes
		return &wire.Result{Receipt: receipt(r.RunID, wire.StatusOK, wire.CleanupRemoved)}, nil
	}
	second := startSession(t, o, other, testLimits()).client("")
	if d := callTool(t, second, map[string]any{"code": "x"}); d.isError {
		t.Fatalf("the second server refused: %+v", d.doc.Error)
	}
	b := <-asked
	if a != perRun || b >= perRun || a+b > total-before.Cost() {
		t.Errorf("the runs were given %d and %d bytes of room; %d were left of %d", a, b, total-before.Cost(), total)
	}

	// The second run is over and gave back what it did not use; the
	// first still holds its room. A third server, whose bound leaves no
	// more than that room, refuses and says who holds it.
	third := startSession(t, Options{Images: []string{"stdlib"}, MaxTimeout: 5, OutputDir: dir, MaxOutputDirBytes: perRun, MaxOutputDirTotal: total - perRun/2}, other, testLimits()).client("")
	d := callTool(t, third, map[string]any{"code": "x"})
	if !d.isError || d.doc.Error == nil || d.doc.Error.Code != codeOutputFull ||
		!strings.Contains(d.doc.Error.Message, "runs in progress have 65536 more reserved") || len(other.Runs()) != 1 {
		t.Errorf("a third server on a folder the first run holds: %+v", d.doc.Error)
	}
	close(release)
	if d := <-done; d.isError {
		t.Errorf("the first run: %+v", d.doc.Error)
	}
	if names, _ := os.ReadDir(dir); len(names) != 2 {
		t.Errorf("the folder holds %v: runs that wrote nothing leave nothing but the ledger", names)
	}
}

// A folder full by its entries says so, and names no limit to raise: the
// entry cap is PyBox's own.
func TestOutputFullByEntries(t *testing.T) {
	s := &Server{opts: Options{OutputDir: "/home/u/results", MaxOutputDirTotal: 1 << 40}}
	err := s.outputFull(&outdir.FullError{Path: "/home/u/results", Held: outdir.Usage{Bytes: 4096, Entries: 999_000},
		Reserved: outdir.Usage{Bytes: 1 << 20, Entries: 999}, MaxEntries: outdir.DefaultMaxEntries, ByEntries: true})
	want := "the output folder /home/u/results is full: it holds 4096 bytes (as du counts them) in 999000 entries, runs in progress have 999 more reserved, and it may hold 1000000 entries; move or delete folders of earlier runs there (pybox never deletes them)"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}
