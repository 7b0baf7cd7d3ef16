package outdir

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"pybox/shared/wire"
)

// partPrefix starts the temporary name of a file being written; no name
// a program gives is let take it (see Dir.open).
const partPrefix = ".pybox-partial-"

// Options are what the user set.
type Options struct {
	// Dotfiles lets names that start with a dot be written.
	Dotfiles bool
	// MaxBytes bounds what the run's directory costs, by the measure of
	// the folder's bound (see cost.go): its files' bytes rounded up to
	// whole blocks, and EntryCost for each file and for the directory.
	// 0 means MaxRunCost (a run's /tmp cannot deliver more).
	MaxBytes int64
	// MaxEntries bounds the entries of the run's directory, itself
	// included; 0 means no bound but the wire's wire.MaxDeliveredFiles.
	MaxEntries int64
}

// Saved is a file written on the host.
type Saved struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Dir takes one run's delivered files. Chunk is called by the client's
// reader, which may still be at it when the caller gives up on the run
// (Abort); mu makes each call whole, and once Finish or Abort has run,
// nothing more is written.
type Dir struct {
	path string // <parent>/<run_id>; made at the first file, or by Folder.Admit
	opts Options

	mu       sync.Mutex
	done     bool // Finish or Abort has run
	reserved bool // the folder's ledger holds room for the run (Folder.Admit)
	root     *os.Root
	failed   string // why nothing more is written (the directory could not be made)
	cost     int64  // what the directory is predicted to cost (Options.MaxBytes)
	entries  int64  // its entries, itself included
	files    map[string]*incoming
	order    []string
	notes    []string
	excess   int // parts of files past wire.MaxDeliveredFiles, dropped
}

// incoming is a file being written.
type incoming struct {
	tmp    string   // its temporary name while it is on disk under it, else ""
	f      *os.File // open until Finish or Abort
	n      int64
	h      hash.Hash
	failed string // why it is not kept
}

// New is the directory <parent>/<runID> for a run's files; nothing is
// made until the first file arrives. It keeps no ledger: a folder with a
// bound admits its runs with Folder.Admit.
func New(parent, runID string, opts Options) *Dir {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = MaxRunCost
	}
	// The directory is counted from the start: it is the first thing made.
	return &Dir{path: filepath.Join(parent, runID), opts: opts, files: map[string]*incoming{},
		cost: runDirCost, entries: 1}
}

// Path is the run's directory.
func (d *Dir) Path() string { return d.path }

// Room is what the run may write there, by the measure of Options.MaxBytes.
func (d *Dir) Room() int64 { return d.opts.MaxBytes }

// Chunk writes part of a delivered file. Parts of a file come in order;
// anything else marks the file as not kept. After Finish or Abort it does
// nothing: a part that comes after the run was given up makes no file.
func (d *Dir) Chunk(c *wire.OutputChunk) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return
	}
	in := d.files[c.Name]
	if in == nil {
		if len(d.files) >= wire.MaxDeliveredFiles {
			d.excess++ // more files than a guest that works sends
			return
		}
		in = d.open(c.Name, len(d.order))
		d.files[c.Name] = in
		d.order = append(d.order, c.Name)
	}
	grow := blocks(in.n+int64(len(c.Data))) - blocks(in.n)
	switch {
	case in.failed != "":
		return
	case c.Offset != in.n:
		in.fail(fmt.Sprintf("a part came at byte %d, after %d bytes", c.Offset, in.n))
		return
	case d.cost+grow > d.opts.MaxBytes:
		in.fail(d.overBytes())
		return
	}
	if _, err := in.f.Write(c.Data); err != nil {
		in.fail(err.Error())
		return
	}
	in.h.Write(c.Data)
	in.n += int64(len(c.Data))
	d.cost += grow
}

// overBytes says why a file is not written when the run's room is spent.
func (d *Dir) overBytes() string {
	return fmt.Sprintf("over the %d bytes one run may write here (as du counts them, and %d for each file)", d.opts.MaxBytes, EntryCost)
}

// open starts the i-th file of the run under its temporary name, or says
// why it is not written.
func (d *Dir) open(name string, i int) *incoming {
	in := &incoming{h: sha256.New()}
	switch {
	case wire.CheckFileName(name) != nil || wire.EscapeName(name) != name:
		in.failed = "its name is not a plain file name"
	case strings.HasPrefix(name, ".") && !d.opts.Dotfiles:
		in.failed = "its name starts with a dot (allow such names to write it)"
	case strings.HasPrefix(strings.ToLower(name), partPrefix):
		// Lower case: on a filesystem that ignores case the name would
		// still be a temporary one's.
		in.failed = "its name is one PyBox gives files while they are written"
	case d.cost+EntryCost > d.opts.MaxBytes:
		in.failed = d.overBytes()
	case d.opts.MaxEntries > 0 && d.entries >= d.opts.MaxEntries:
		in.failed = fmt.Sprintf("over the %d files the output folder has room for", d.opts.MaxEntries-1)
	case !d.made():
		in.failed = d.failed
	}
	if in.failed != "" {
		return in
	}
	tmp := partPrefix + strconv.Itoa(i)
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		in.failed = err.Error()
		return in
	}
	in.tmp, in.f = tmp, f
	d.cost += EntryCost
	d.entries++
	return in
}

// makeDir makes the run's directory now (Folder.Admit does, under the
// folder's lock, so that its ledger knows the change is PyBox's).
func (d *Dir) makeDir() error {
	if !d.made() {
		return errors.New(d.failed)
	}
	return nil
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

// seal puts what was written of in on disk and closes it.
func (in *incoming) seal() {
	if in.f == nil {
		return
	}
	if err := in.f.Sync(); err != nil {
		in.fail(err.Error())
	}
	if err := in.f.Close(); err != nil {
		in.fail(err.Error())
	}
	in.f = nil
}

// discard closes in and removes its temporary file.
func (d *Dir) discard(in *incoming) {
	if in.f != nil {
		in.f.Close()
		in.f = nil
	}
	if in.tmp != "" {
		d.root.Remove(in.tmp)
		in.tmp = ""
	}
}

// keep gives a whole, checked file its own name. A hard link, then the
// temporary name removed, is a rename that never replaces: the run's
// directory is new and only this writes in it, but where the filesystem
// ignores case "A.txt" and "a.txt" are one name, and the second must not
// replace the first.
func (d *Dir) keep(in *incoming, name string) {
	err := d.root.Link(in.tmp, name)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		// A filesystem without hard links (FAT, exFAT) renames instead,
		// once it has nothing under the name.
		_, lerr := d.root.Lstat(name)
		switch {
		case lerr == nil:
			err = fs.ErrExist
		case errors.Is(lerr, fs.ErrNotExist):
			if err = d.root.Rename(in.tmp, name); err == nil {
				in.tmp = ""
			}
		}
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		in.fail("another file of the run has that name here (the folder's filesystem may ignore case)")
	case err != nil:
		in.fail(err.Error())
	case in.tmp != "":
		if err := d.root.Remove(in.tmp); err != nil {
			d.notes = append(d.notes, fmt.Sprintf("left behind: %s: %v (remove it)", filepath.Join(d.path, in.tmp), err))
		}
		in.tmp = ""
	}
}

// Finish keeps each file that came whole with the size and sha256 the
// receipt gives it, under its own name, on disk; the others are removed.
// It returns the files kept, and one note per file not kept. After Abort,
// or a first Finish, it keeps nothing.
func (d *Dir) Finish(delivered []wire.FileDigest) ([]Saved, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return nil, nil
	}
	d.done = true
	want := map[string]wire.FileDigest{}
	for _, f := range delivered {
		want[f.Name] = f
	}
	var saved []Saved
	for _, name := range d.order {
		in := d.files[name]
		in.seal()
		w, listed := want[name]
		sum := hex.EncodeToString(in.h.Sum(nil))
		switch {
		case in.failed != "":
		case !listed:
			in.fail("the receipt does not list it as delivered")
		case w.Bytes != in.n || w.SHA256 != sum:
			in.fail("it does not match the receipt's size and sha256")
		default:
			d.keep(in, name)
		}
		if in.failed != "" {
			d.discard(in)
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
		if len(saved) > 0 {
			if err := d.syncDirs(); err != nil {
				d.notes = append(d.notes, fmt.Sprintf("%s may not survive a crash: %v", d.path, err))
			}
		}
		d.root.Close()
	}
	// An empty directory says nothing: it is removed.
	if err := d.close(len(saved) == 0); err != nil {
		d.notes = append(d.notes, fmt.Sprintf("the output folder's ledger was not updated (%v): the room reserved for this run is held until it expires, %v after the run began", err, reservationLife))
	}
	slices.SortFunc(saved, func(a, b Saved) int { return strings.Compare(a.Name, b.Name) })
	return saved, d.notes
}

// syncDirs puts the names of the run's directory on disk, and its own
// name in the folder above: a file synced is not found after a crash
// unless the directory that names it was synced too.
func (d *Dir) syncDirs() error {
	run, err := d.root.Open(".")
	if err != nil {
		return err
	}
	defer run.Close()
	if err := run.Sync(); err != nil {
		return err
	}
	parent, err := os.Open(filepath.Dir(d.path))
	if err != nil {
		return err
	}
	defer parent.Close()
	return parent.Sync()
}

// Abort removes whatever was written: the run failed before its receipt.
// A Chunk that comes later writes nothing.
func (d *Dir) Abort() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return
	}
	d.done = true
	for _, name := range d.order {
		d.discard(d.files[name])
	}
	if d.root != nil {
		d.root.Close()
	}
	d.close(true) // an error leaves the reservation to expire
}

// close ends the run's part in the folder: its directory removed if
// removeEmpty is set and it is empty, and its reservation, if it has
// one, replaced by what the directory holds. d.mu must be held.
func (d *Dir) close(removeEmpty bool) error {
	if d.reserved {
		return d.settle(removeEmpty)
	}
	if removeEmpty && d.root != nil {
		os.Remove(d.path)
	}
	return nil
}
