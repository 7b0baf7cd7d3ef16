package e2e

// The outdir part of `make bench`: what the output folder's admission
// costs a call (the host-side step before a run that measures the folder
// and reserves the run's room) with 100,000 files of earlier runs in the
// folder: the old way, a walk of the whole folder on every call, beside
// the ledger. In-process; no VM.

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pybox/host/outdir"
	"pybox/shared/wire"
)

// oldUsed is outdir.Used as it was before the ledger: the bytes of the
// regular files in the folder, at any depth, from a walk on every call.
func oldUsed(parent string) (int64, error) {
	var total int64
	err := filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return nil // gone since it was listed
			}
			total += fi.Size()
		}
		return nil
	})
	return total, err
}

// benchOutdirFiles fills dir with runs runs of perRun one-byte files.
func benchOutdirFiles(b *testing.B, dir string, runs, perRun int) {
	for r := range runs {
		run := filepath.Join(dir, fmt.Sprintf("mcp-earlier-%03d", r))
		if err := os.Mkdir(run, 0o755); err != nil {
			b.Fatal(err)
		}
		for i := range perRun {
			if err := os.WriteFile(filepath.Join(run, fmt.Sprintf("f%04d.txt", i)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// usOf is how long f took, in µs.
func usOf(b *testing.B, f func() error) float64 {
	t0 := time.Now()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	return float64(time.Since(t0).Nanoseconds()) / 1e3
}

func benchOutdir(b *testing.B, r *benchReport, k benchKnobs) {
	dir := b.TempDir()
	benchOutdirFiles(b, dir, 100, 1000)
	folder := outdir.Folder{Path: dir, MaxCost: 1 << 40, MaxEntries: outdir.DefaultMaxEntries}
	admit := func() error {
		d, err := folder.Admit(wire.NewRunID("mcp-"), outdir.Options{})
		if err == nil {
			d.Abort() // the run's end, not timed: the room given back
		}
		return err
	}
	if err := admit(); err != nil { // the first admission makes the ledger
		b.Fatal(err)
	}
	// Turns: each sample of each way after the other's, so that both see
	// the same machine.
	var old, ledger, stale []float64
	for range max(5, k.Runs) {
		old = append(old, usOf(b, func() error { _, err := oldUsed(dir); return err }))
		ledger = append(ledger, usOf(b, admit))
		// The folder changed by hand (a file made and removed at its
		// top): the ledger is not trusted, and admission walks.
		os.WriteFile(filepath.Join(dir, "by-hand"), nil, 0o644)
		os.Remove(filepath.Join(dir, "by-hand"))
		stale = append(stale, usOf(b, admit))
	}
	// The ratios are to the ledger's median: how many times its time
	// the other ways take.
	const files = "100 runs of 1,000 one-byte files in the folder, warm dentry cache; ratio to the ledger's median"
	f := r.add(newFigure("pybox", "output folder admission, ledger: lock, read, reserve, make the run's directory, write", "µs", ledger, files))
	f.Ratio = 1
	o := r.add(newFigure("pybox", "output folder admission, the old way: a walk summing file sizes (outdir.Used)", "µs", old, files))
	o.Ratio = ratioOf(o, f)
	s := r.add(newFigure("pybox", "output folder admission, ledger not trusted (the folder changed by hand): one walk counting blocks and entries", "µs", stale, files))
	s.Ratio = ratioOf(s, f)
	b.Logf("output folder admission, medians: the old walk %.0f µs, the ledger %.0f µs (%.0f×), a walk when the ledger is not trusted %.0f µs",
		o.Median, f.Median, o.Ratio, s.Median)
}

// ratioOf is f's median over base's, to two places.
func ratioOf(f, base *figure) float64 {
	if base.Median == 0 {
		return 0
	}
	return math.Round(f.Median/base.Median*100) / 100
}
