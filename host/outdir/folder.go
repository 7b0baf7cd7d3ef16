package outdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"pybox/shared/wire"
)

// Folder is an output folder shared by runs, and its bounds.
type Folder struct {
	Path string
	// MaxCost bounds what the folder holds, earlier runs included, by
	// Usage.Cost; 0: no bound.
	MaxCost int64
	// MaxEntries bounds its entries (DefaultMaxEntries for pybox mcp);
	// 0: no bound.
	MaxEntries int64
}

// minRoom is the least room a run is admitted with: its directory and
// one empty file.
const minRoom = runDirCost + EntryCost

// FullError is a folder with no room for one more run: its directory was
// not made.
type FullError struct {
	Path     string
	Held     Usage // what the folder holds, as du counts it
	Reserved Usage // Bytes: the cost runs in progress may still write; Entries: theirs
	// MaxCost and MaxEntries are the folder's bounds; ByEntries says it
	// is the entry cap that is hit.
	MaxCost, MaxEntries int64
	ByEntries           bool
}

func (e *FullError) Error() string {
	limit := fmt.Sprintf("it may hold %d", e.MaxCost)
	if e.ByEntries {
		limit = fmt.Sprintf("it may hold %d entries", e.MaxEntries)
	}
	return fmt.Sprintf("outdir: the output folder %s is full: %s, and %s; move or delete folders of earlier runs there", e.Path, e.Holds(), limit)
}

// Holds says what fills the folder, in the measure of the bound that is
// hit: bytes as du counts them and what they cost with their entries, or
// entries; and what runs in progress have reserved of it.
func (e *FullError) Holds() string {
	s := fmt.Sprintf("it holds %d bytes (as du counts them) in %d entries", e.Held.Bytes, e.Held.Entries)
	reserved := e.Reserved.Bytes
	if e.ByEntries {
		reserved = e.Reserved.Entries
	} else {
		s += fmt.Sprintf(", which count as %d bytes (%d for each entry)", e.Held.Cost(), EntryCost)
	}
	if reserved > 0 {
		s += fmt.Sprintf(", runs in progress have %d more reserved", reserved)
	}
	return s
}

// Admit makes the run's directory in the folder and reserves its room,
// under the folder's lock. The room is opts.MaxBytes (0 for MaxRunCost),
// lowered to what the folder's bounds leave; a folder with too little
// left is a *FullError, and then nothing is made. The Dir's Finish or
// Abort gives the reservation back.
//
// A folder with no bounds (pybox run --out) records the run only when it
// keeps a ledger already; any other folder gets New's Dir, which makes
// nothing of PyBox's there.
func (f Folder) Admit(runID string, opts Options) (*Dir, error) {
	d := New(f.Path, runID, opts)
	bounded := f.MaxCost > 0 || f.MaxEntries > 0
	if bounded {
		if err := os.MkdirAll(f.Path, 0o755); err != nil {
			return nil, err
		}
	}
	lf, err := lockLedger(f.Path, bounded)
	if !bounded && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission)) {
		// No ledger here, or one this user cannot keep: the run's
		// directory changes the folder's stat, so a server's ledger is
		// measured anew.
		return d, nil
	}
	if err != nil {
		return nil, err
	}
	defer unlock(lf)
	if err := f.admit(lf, d, bounded); err != nil {
		return nil, err
	}
	return d, nil
}

// admit is Admit with the lock held.
func (f Folder) admit(lf *os.File, d *Dir, bounded bool) error {
	l, trusted, err := load(lf, f.Path)
	if err != nil {
		return err
	}
	if bounded {
		if err := f.fit(l, trusted, &d.opts); err != nil {
			l.write(lf) // keep the measure taken, if any; the error says more
			return err
		}
	}
	if _, err := l.change(f.Path, d.makeDir); err != nil {
		return err
	}
	l.Reserved = append(l.Reserved, d.reservation())
	if err := l.write(lf); err != nil {
		d.root.Close()
		os.Remove(d.path)
		return fmt.Errorf("writing %s: %w", lf.Name(), err)
	}
	d.reserved = true
	return nil
}

// fit lowers o's bounds to the room the folder has left. It measures the
// folder when the ledger cannot be trusted, and once more before it says
// the folder is full: files deleted by hand inside runs' directories
// leave the folder's stat as it was, and room made so must be found.
func (f Folder) fit(l *ledger, trusted bool, o *Options) error {
	if !trusted {
		if err := l.remeasure(f.Path); err != nil {
			return err
		}
	}
	err := f.room(l, o)
	var full *FullError
	if trusted && errors.As(err, &full) {
		if err := l.remeasure(f.Path); err != nil {
			return err
		}
		err = f.room(l, o)
	}
	return err
}

// room lowers o's bounds to what l leaves of the folder's, or says it is
// full.
func (f Folder) room(l *ledger, o *Options) error {
	cost, entries := l.used()
	full := &FullError{Path: f.Path, Held: l.held(), Reserved: l.reserved(), MaxCost: f.MaxCost, MaxEntries: f.MaxEntries}
	if f.MaxCost > 0 {
		left := f.MaxCost - cost
		if left < minRoom {
			return full
		}
		o.MaxBytes = min(o.MaxBytes, left)
	}
	if f.MaxEntries > 0 {
		left := f.MaxEntries - entries
		if left < 2 { // the run's directory and one file
			full.ByEntries = true
			return full
		}
		o.MaxEntries = min(wire.MaxDeliveredFiles+1, left)
	}
	return nil
}

// load reads the ledger lf of folder dir, and drops the reservations of
// owners that are gone. A ledger that cannot be read is an empty one,
// not trusted.
func load(lf *os.File, dir string) (l *ledger, trusted bool, err error) {
	l, ok, err := readLedger(lf)
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", lf.Name(), err)
	}
	cur, err := stampOf(dir)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		return l, false, nil
	}
	trusted = l.Folder == cur
	return l, trusted, l.dropDead(dir, trusted)
}

// dropDead drops the reservations whose owner is gone; when the ledger is
// trusted, what each one's directory holds is measured and counted as
// held (a walk would count it anyway).
func (l *ledger) dropDead(dir string, trusted bool) error {
	now := time.Now()
	var kept []reservation
	for _, r := range l.Reserved {
		if !r.dead(now) {
			kept = append(kept, r)
			continue
		}
		if trusted {
			u, err := Measure(filepath.Join(dir, r.Run))
			if err != nil {
				return err
			}
			l.add(u)
		}
	}
	l.Reserved = kept
	return nil
}

// remeasure walks the folder: one stat per entry. The directories of
// runs in progress are left out, their reservations count for them, and
// so is the ledger, which counts itself as it is read.
func (l *ledger) remeasure(dir string) error {
	st, err := stampOf(dir) // before the walk: a change during it is a change after
	if err != nil {
		return err
	}
	live := map[string]bool{ledgerName: true}
	for _, r := range l.Reserved {
		live[r.Run] = true
	}
	u, err := measureFolder(dir, func(name string) bool { return live[name] })
	if err != nil {
		return fmt.Errorf("measuring %s: %w", dir, err)
	}
	l.Usage, l.Folder = u, st
	return nil
}

// change makes a change of PyBox's own to the folder's entries (a run's
// directory made or removed), and keeps the ledger trusted only if
// nothing else had changed the folder since it was last trusted.
func (l *ledger) change(dir string, do func() error) (trusted bool, err error) {
	before, err := stampOf(dir)
	if err != nil {
		return false, err
	}
	if err := do(); err != nil {
		return false, err
	}
	if before != l.Folder {
		return false, nil
	}
	after, err := stampOf(dir)
	if err != nil {
		return false, err
	}
	l.Folder = after
	return true, nil
}

// reservation is the room d's run holds in the folder's ledger.
func (d *Dir) reservation() reservation {
	entries := d.opts.MaxEntries
	if entries <= 0 {
		entries = wire.MaxDeliveredFiles + 1
	}
	return reservation{Run: filepath.Base(d.path), Host: thisHost(), PID: os.Getpid(),
		Until: time.Now().Add(reservationLife).Unix(), Cost: max(d.opts.MaxBytes, runDirCost), Entries: entries}
}

// settle puts what the run's directory holds in the place of its
// reservation, once the run is over: the directory is removed first if
// removeEmpty is set and it is empty. d.mu must be held.
func (d *Dir) settle(removeEmpty bool) error {
	remove := func() error {
		if removeEmpty {
			os.Remove(d.path) // fails, as it should, on a directory that is not empty
		}
		return nil
	}
	parent := filepath.Dir(d.path)
	lf, err := lockLedger(parent, false)
	if err != nil {
		remove()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // the ledger was deleted: the next admission measures the folder
		}
		return err
	}
	defer unlock(lf)
	l, _, err := load(lf, parent)
	if err != nil {
		remove()
		return err
	}
	trusted, err := l.change(parent, remove)
	if err != nil {
		return err
	}
	i := l.find(filepath.Base(d.path))
	switch {
	case i < 0:
		// Taken for dead meanwhile: what was measured of the directory
		// then may be part of it. The next admission measures.
		l.Folder = stamp{}
	case trusted:
		u, err := Measure(d.path)
		if err != nil {
			l.Folder = stamp{}
			break
		}
		l.add(u)
	}
	if i >= 0 {
		l.Reserved = slices.Delete(l.Reserved, i, i+1)
	}
	return l.write(lf)
}
