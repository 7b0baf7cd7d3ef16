// Package outdir writes the files a run delivers (its whole /tmp/output,
// streamed from the guest) onto the host, into a new directory named for
// the run under a folder the user chose: `pybox run --out DIR` and
// `pybox mcp --output-dir DIR`.
//
// The names are the program's, so they are held to the rules a careful
// user would set: a plain file name, nothing that needs escaping, never
// outside the run's directory (it is written through an os.Root), never
// over a file that exists (the directory is new, and every file is
// created with O_EXCL), names that start with a dot only when asked for,
// and a bound on the bytes of one run. A file is kept only if it came
// whole and matches the sha256 the receipt gives it.
package outdir

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"pybox/shared/wire"
)

// Options are what the user set.
type Options struct {
	// Dotfiles lets names that start with a dot be written.
	Dotfiles bool
	// MaxBytes bounds what one run writes; 0 means wire.DefaultTmpBytes
	// (a run's /tmp cannot hold more).
	MaxBytes int64
}

// Saved is a file written on the host.
type Saved struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Dir takes one run's delivered files. Its methods are called from one
// goroutine at a time (the client's reader, then the caller).
type Dir struct {
	path    string // <parent>/<run_id>; made at the first file
	opts    Options
	root    *os.Root
	failed  string // why nothing more is written (the directory could not be made)
	written int64
	files   map[string]*incoming
	order   []string
	notes   []string
	excess  int // parts of files past wire.MaxDeliveredFiles, dropped
}

// incoming is a file being written.
type incoming struct {
	f      *os.File
	n      int64
	h      hash.Hash
	failed string // why it is not kept
}

// New is the directory <parent>/<runID> for a run's files; nothing is
// made until the first file arrives.
func New(parent, runID string, opts Options) *Dir {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = wire.DefaultTmpBytes
	}
	return &Dir{path: filepath.Join(parent, runID), opts: opts, files: map[string]*incoming{}}
}

// Path is the run's directory.
func (d *Dir) Path() string { return d.path }

// Chunk writes part of a delivered file. Parts of a file come in order;
// anything else marks the file as not kept.
func (d *Dir) Chunk(c *wire.OutputChunk) {
	in := d.files[c.Name]
	if in == nil {
		if len(d.files) >= wire.MaxDeliveredFiles {
			d.excess++ // more files than a guest that works sends
			return
		}
		in = d.open(c.Name)
		d.files[c.Name] = in
		d.order = append(d.order, c.Name)
	}
	switch {
	case in.failed != "":
		return
	case c.Offset != in.n:
		in.fail(fmt.Sprintf("a part came at byte %d, after %d bytes", c.Offset, in.n))
		return
	case d.written+int64(len(c.Data)) > d.opts.MaxBytes:
		in.fail(fmt.Sprintf("over the %d bytes one run may write here", d.opts.MaxBytes))
		return
	}
	if _, err := in.f.Write(c.Data); err != nil {
		in.fail(err.Error())
		return
	}
	in.h.Write(c.Data)
	in.n += int64(len(c.Data))
	d.written += int64(len(c.Data))
}

// open starts a file, or says why it is not written.
func (d *Dir) open(name string) *incoming {
	in := &incoming{h: sha256.New()}
	switch {
	case wire.CheckFileName(name) != nil || wire.EscapeName(name) != name:
		in.failed = "its name is not a plain file name"
	case strings.HasPrefix(name, ".") && !d.opts.Dotfiles:
		in.failed = "its name starts with a dot (allow such names to write it)"
	case !d.made():
		in.failed = d.failed
	}
	if in.failed != "" {
		return in
	}
	f, err := d.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		in.failed = err.Error()
		return in
	}
	in.f = f
	return in
}

// made makes the run's directory once; it must be new.
func (d *Dir) made() bool {
	if d.root != nil || d.failed != "" {
		return d.failed == ""
	}
	if err := os.MkdirAll(filepath.Dir(d.path), 0o755); err != nil {
		d.failed = err.Error()
		return false
	}
	if err := os.Mkdir(d.path, 0o755); err != nil {
		d.failed = fmt.Sprintf("the run's directory: %v", err)
		return false
	}
	root, err := os.OpenRoot(d.path)
	if err != nil {
		d.failed = err.Error()
		return false
	}
	d.root = root
	return true
}

func (in *incoming) fail(why string) {
	if in.failed == "" {
		in.failed = why
	}
}

// Finish closes what was written and keeps each file that came whole
// with the size and sha256 the receipt gives it; the others are removed.
// It returns the files kept, and one note per file not kept.
func (d *Dir) Finish(delivered []wire.FileDigest) ([]Saved, []string) {
	want := map[string]wire.FileDigest{}
	for _, f := range delivered {
		want[f.Name] = f
	}
	var saved []Saved
	for _, name := range d.order {
		in := d.files[name]
		if in.f != nil {
			if err := in.f.Close(); err != nil {
				in.fail(err.Error())
			}
		}
		w, listed := want[name]
		sum := hex.EncodeToString(in.h.Sum(nil))
		switch {
		case in.failed != "":
		case !listed:
			in.fail("the receipt does not list it as delivered")
		case w.Bytes != in.n || w.SHA256 != sum:
			in.fail("it does not match the receipt's size and sha256")
		}
		if in.failed != "" {
			if in.f != nil {
				d.root.Remove(name)
			}
			d.notes = append(d.notes, fmt.Sprintf("not written: %s: %s", wire.EscapeName(name), in.failed))
			continue
		}
		saved = append(saved, Saved{Name: name, Path: filepath.Join(d.path, name), Bytes: in.n, SHA256: sum})
	}
	for _, f := range delivered {
		if d.files[f.Name] == nil {
			d.notes = append(d.notes, fmt.Sprintf("not written: %s: the receipt lists it, but it never came", wire.EscapeName(f.Name)))
		}
	}
	if d.excess > 0 {
		d.notes = append(d.notes, fmt.Sprintf("not written: %d parts of files past the first %d, more than a run delivers", d.excess, wire.MaxDeliveredFiles))
	}
	if d.root != nil {
		d.root.Close()
		if len(saved) == 0 {
			os.Remove(d.path) // an empty directory says nothing
		}
	}
	slices.SortFunc(saved, func(a, b Saved) int { return strings.Compare(a.Name, b.Name) })
	return saved, d.notes
}

// Abort removes whatever was written: the run failed before its receipt.
func (d *Dir) Abort() {
	for name, in := range d.files {
		if in.f != nil {
			in.f.Close()
			d.root.Remove(name)
		}
	}
	if d.root != nil {
		d.root.Close()
		os.Remove(d.path)
	}
}
