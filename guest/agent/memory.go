package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"

	"pybox/shared/wire"
)

// readMemory reads the guest's memory from the kernel's count
// (proc/meminfo in files). Cache is what the kernel may drop: the page
// cache less what lives in memory only (Shmem: the initramfs and tmpfs
// files, which count as Used).
func readMemory(files fs.FS) (*wire.GuestMemory, error) {
	b, err := fs.ReadFile(files, "proc/meminfo")
	if err != nil {
		return nil, err
	}
	kb := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			kb[name] = n
		}
	}
	for _, k := range []string{"MemTotal", "MemFree", "Cached", "Buffers", "Shmem"} {
		if _, ok := kb[k]; !ok {
			return nil, fmt.Errorf("agent: /proc/meminfo has no %s", k)
		}
	}
	m := &wire.GuestMemory{
		Total: kb["MemTotal"] << 10,
		Free:  kb["MemFree"] << 10,
		Cache: max(0, kb["Cached"]+kb["Buffers"]-kb["Shmem"]) << 10,
	}
	m.Used = max(0, m.Total-m.Free-m.Cache)
	return m, nil
}

// Idle is what a guest that gives freed memory back to the host does
// around runs: while runs come, nothing (giving back memory that the next
// run takes again made data calls about a quarter slower under TCG); once
// none has run for IdleAfter, it gives back what is free.
type Idle struct {
	// Busy stops giving memory back; it is called as a run starts.
	Busy func() error
	// GiveBack gives what is free back to the host; it is called once
	// the guest has been idle for IdleAfter.
	GiveBack func() error
	// After is how long the guest must be idle; zero means IdleAfter.
	After time.Duration
}

// IdleAfter is how long a guest runs nothing before it gives back its
// free memory.
const IdleAfter = 15 * time.Second

// idler runs Idle's calls at the right times.
type idler struct {
	idle Idle
	logf func(string, ...any)

	mu    sync.Mutex
	timer *time.Timer
	given bool // memory is being given back (GiveBack ran, Busy not since)
}

func newIdler(idle *Idle, logf func(string, ...any)) *idler {
	if idle == nil {
		return nil
	}
	if idle.After == 0 {
		idle.After = IdleAfter
	}
	d := &idler{idle: *idle, logf: logf}
	d.ended() // the guest is idle from its boot on
	return d
}

// started is called as a run starts.
func (d *idler) started() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.given {
		d.given = false
		if err := d.idle.Busy(); err != nil {
			d.logf("agent: memory: %v", err)
		}
	}
}

// ended is called as a run ends: the idle time counts from now.
func (d *idler) ended() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(d.idle.After, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.timer != t {
			return // a run started (or ended) since
		}
		d.timer, d.given = nil, true
		if err := d.idle.GiveBack(); err != nil {
			d.logf("agent: memory: %v", err)
		}
	})
	d.timer = t
}
