package outdir

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

const (
	// ledgerName is the folder's ledger and lock (see the package doc).
	ledgerName    = ".pybox-ledger"
	ledgerVersion = 1
	// maxLedgerBytes bounds what is read of a ledger: a few runs in
	// progress take a few hundred bytes; anything larger is not ours.
	maxLedgerBytes = 1 << 20
	// reservationLife is how long a reservation holds room at most: far
	// beyond the longest run (30 s, its allowances and 20 s of delivery),
	// so that only an owner that is gone, or a process ID reused, leaves
	// one to expire.
	reservationLife = 10 * time.Minute
)

// stamp is the folder's own stat when PyBox last changed it.
type stamp struct {
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Nlink uint64 `json:"nlink"`
	Mtime int64  `json:"mtime_ns"`
	Ctime int64  `json:"ctime_ns"`
}

// reservation is the room a run in progress may fill.
type reservation struct {
	Run     string `json:"run"` // its directory's name
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Until   int64  `json:"until"` // Unix seconds
	Cost    int64  `json:"cost"`
	Entries int64  `json:"entries"`
}

// ledger is the folder's running total: Usage is what it holds, the
// reserved runs' directories and the ledger itself left out (its blocks
// change as it is written: self is what it takes as it is read).
type ledger struct {
	Version int   `json:"version"`
	Folder  stamp `json:"folder"`
	Usage
	Reserved []reservation `json:"reserved"`

	self Usage
}

// thisHost names the host in reservations: a process ID means something
// only on the host that gave it (a folder may be shared over NFS).
var thisHost = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

// readLedger reads f. A ledger that is empty, torn, of another version or
// not PyBox's is not ok: it cannot be trusted, and the folder is measured.
func readLedger(f *os.File) (l *ledger, ok bool, err error) {
	self, err := fileUsage(f)
	if err != nil {
		return nil, false, err
	}
	b, err := io.ReadAll(io.NewSectionReader(f, 0, maxLedgerBytes+1))
	if err != nil {
		return nil, false, err
	}
	l = &ledger{}
	if len(b) > maxLedgerBytes || json.Unmarshal(b, l) != nil || !l.sane() {
		l, ok = &ledger{Version: ledgerVersion}, false
	} else {
		ok = true
	}
	l.self = self
	return l, ok, nil
}

func (l *ledger) sane() bool {
	if l.Version != ledgerVersion || l.Bytes < 0 || l.Entries < 0 {
		return false
	}
	for _, r := range l.Reserved {
		if r.Cost < 0 || r.Entries < 0 || !plainName(r.Run) {
			return false
		}
	}
	return true
}

// write puts l in f in place: renaming a new ledger in would change the
// folder's stat, which must change only with the folder's entries. A
// write torn by a crash leaves a ledger that does not parse, and so is
// measured anew.
func (l *ledger) write(f *os.File) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(b)))
}

// plainName reports whether a reservation's run names an entry of the
// folder itself: a ledger is a file anyone who can write the folder may
// change, and nothing outside the folder is measured on its word.
func plainName(run string) bool {
	return run != "" && run != "." && run != ".." && !strings.ContainsRune(run, '/')
}

// held is what the folder holds, runs in progress left out, as du
// counts it.
func (l *ledger) held() Usage {
	u := l.Usage
	u.add(l.self)
	return u
}

// reserved is what runs in progress may still write: the cost, and the
// entries.
func (l *ledger) reserved() Usage {
	var u Usage
	for _, r := range l.Reserved {
		u.add(Usage{Bytes: r.Cost, Entries: r.Entries})
	}
	return u
}

// used is what the folder holds and what runs in progress have reserved.
func (l *ledger) used() (cost, entries int64) {
	h, r := l.held(), l.reserved()
	return h.Cost() + r.Bytes, h.Entries + r.Entries
}

// find is the index of run's reservation made by this process, or -1.
func (l *ledger) find(run string) int {
	for i, r := range l.Reserved {
		if r.Run == run && r.Host == thisHost() && r.PID == os.Getpid() {
			return i
		}
	}
	return -1
}

// dead reports whether r's owner is gone: past its expiry, or, on this
// host, a process that no longer exists.
func (r *reservation) dead(now time.Time) bool {
	return now.Unix() > r.Until || r.Host == thisHost() && !alive(r.PID)
}
