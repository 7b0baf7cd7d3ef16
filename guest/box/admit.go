//go:build linux

package box

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"pybox/shared/wire"
)

// Admission: the one place the guest decides whether a run may start.
//
// Runs go on at once, each in a box whose cgroup bounds its memory
// (memory.max). A run is admitted when that bound fits what the guest has
// left once it has counted, at that moment:
//
//   - the bounds of the runs already admitted (not what they use now:
//     each may grow to its bound, and must be able to);
//   - what the warm boxes hold now;
//   - what the guest holds outside the boxes (its kernel, the agent);
//   - a headroom for what a run costs outside its cgroup (the agent's
//     buffers for its output streams and receipt, 9p's, the page cache
//     its reads need), a share for each run and one for the guest.
//
// So no set of admitted runs can, by growing to its bounds, push the
// guest into its OOM killer: a run that would is refused at once, with
// what holds the memory, and nothing of it is made. Warm boxes start only
// in memory that is left (pool.go), and a waiting one is the first the
// kernel's OOM killer would take (waitingOOMScore). The guest's memory
// counts as whole even while the host's balloon holds part of it: the
// host gives it back before it sends a run.

// Headroom kept outside the boxes' bounds.
const (
	headroomGuest  = 64 << 20 // the guest's own growth: 9p, the page cache of image files
	headroomPerRun = 16 << 20 // a run's agent buffers, pipes, receipt and delivery chunks
)

// runNeeds is what admitting one more run takes from what is left.
const runNeeds = memoryMax + headroomPerRun

// ErrNoRoom is why a run is refused when its memory does not fit: the
// runs in progress hold it.
var ErrNoRoom = errors.New("box: no memory for another run")

// NoRoomError says what holds the memory a refused run would need.
type NoRoomError struct {
	Room wire.Room
	Runs int // the runs in progress
}

func (e *NoRoomError) Unwrap() error { return ErrNoRoom }

// NoMemory says that the run was refused for memory (the agent's code
// for it is wire.ErrNoMemory).
func (e *NoRoomError) NoMemory() bool { return true }

func (e *NoRoomError) Error() string {
	r := e.Room
	held := fmt.Sprintf("%d running hold up to %d MiB, warm boxes %d MiB, the guest itself %d MiB and headroom %d MiB of the VM's %d MiB, leaving %d MiB where a run needs %d MiB",
		e.Runs, mib(r.Runs), mib(r.Warm), mib(r.Guest), mib(r.Headroom), mib(r.Total), mib(max(0, r.Left)), mib(runNeeds))
	if e.Runs == 0 {
		return "no memory for a run: " + held + ". Nothing ran: restart the VM with more memory (pybox vm start --memory 1024 or more)"
	}
	return fmt.Sprintf("no memory for another run: %s. Nothing ran: try again when a run has ended, or restart the VM sized for more "+
		"(pybox vm start --runs %d, or more --memory; fewer images means fewer warm boxes)", held, max(r.RunsAtOnce, e.Runs)+1)
}

func mib(b int64) int64 { return b >> 20 }

// admission is the room set aside for one run, from Admit to the end of
// its Run.
type admission struct {
	limit int64 // the bound of its box: memory.max of its cgroup
	rn    *run  // once Run has it
}

// progress is where the run is, for the host's status; cgroups is the
// runs' parent cgroup.
func (a *admission) progress(cgroups string) wire.RunProgress {
	rn, now := a.rn, time.Now()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	p := wire.RunProgress{
		RunID: rn.req.RunID, Image: rn.req.Image, Phase: rn.phase,
		PhaseMS: now.Sub(rn.phaseAt).Milliseconds(), RunMS: now.Sub(rn.at.begun).Milliseconds(),
		BoundMS: rn.req.Bound().Milliseconds(), LimitBytes: a.limit, Client: rn.req.Client,
	}
	if cgroups != "" {
		p.MemoryBytes, _ = (&runCgroup{dir: filepath.Join(cgroups, rn.boxID)}).read("memory.current")
	}
	return p
}

// Admit sets aside room for r, or says why there is none: r's image is not
// in this VM, the guest has no cgroup2, or r's memory does not fit (a
// *NoRoomError). Run then runs r in that room, and gives it back.
func (b *Runner) Admit(r *wire.Run) error {
	if _, ok := b.cfg.Images[r.Image]; !ok {
		// The agent admits only the images this box was given.
		return fmt.Errorf("this box was not given image %q", r.Image)
	}
	if b.paths.cgroups != "" {
		if err := checkCgroup2(); err != nil {
			return err
		}
	}
	mem, err := b.memory()
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.admitted[r.RunID]; dup {
		return fmt.Errorf("run %s is in progress already", r.RunID)
	}
	if room := b.roomLocked(mem); room != nil && room.Left < runNeeds {
		return &NoRoomError{Room: *room, Runs: len(b.admitted)}
	}
	if b.admitted == nil {
		b.admitted = map[string]*admission{}
	}
	b.admitted[r.RunID] = &admission{limit: memoryMax}
	return nil
}

// claim gives rn the room Admit set aside for it, admitting it first if
// nobody did.
func (b *Runner) claim(rn *run) error {
	b.mu.Lock()
	a := b.admitted[rn.req.RunID]
	b.mu.Unlock()
	if a == nil {
		if err := b.Admit(rn.req); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	a = b.admitted[rn.req.RunID]
	if a.rn != nil {
		return fmt.Errorf("run %s is in progress already", rn.req.RunID)
	}
	a.rn = rn
	return nil
}

// release gives back a run's room: its box is gone, or set aside.
func (b *Runner) release(runID string) {
	b.mu.Lock()
	delete(b.admitted, runID)
	b.mu.Unlock()
}

// Cancel gives back the room of a run admitted that will not run.
func (b *Runner) Cancel(runID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.admitted[runID]; a != nil && a.rn == nil {
		delete(b.admitted, runID)
	}
}

// bound sets a run's bound once its box has one of its own (a warm box's
// is a cold box's plus what its preload holds).
func (b *Runner) bound(runID string, limit int64) {
	b.mu.Lock()
	if a := b.admitted[runID]; a != nil {
		a.limit = limit
	}
	b.mu.Unlock()
}

// Room is how the guest's memory is shared now, as admission sees it; nil
// when it cannot be read.
func (b *Runner) Room() *wire.Room {
	mem, err := b.memory()
	if err != nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.roomLocked(mem)
}

func (b *Runner) memory() (*wire.GuestMemory, error) {
	if b.cfg.Memory == nil {
		return nil, nil
	}
	m, err := b.cfg.Memory()
	if err != nil {
		return nil, fmt.Errorf("box: reading the guest's memory for admission: %w", err)
	}
	return m, nil
}

// roomLocked counts the guest's memory as admission does; nil when mem
// is. The caller holds b.mu.
func (b *Runner) roomLocked(mem *wire.GuestMemory) *wire.Room {
	if mem == nil {
		return nil
	}
	b.full = max(b.full, mem.Total)
	r := &wire.Room{Total: b.full, Need: runNeeds, RunsAtOnce: b.cfg.RunsAtOnce}
	for _, a := range b.admitted {
		r.Runs += a.limit
	}
	r.Warm = b.warmHeldLocked()
	// What every box holds (runs, warm boxes, what cleanups left) is
	// counted in the runs' parent cgroup; the guest itself is the rest,
	// with what was left counted as the guest's: nothing bounds it.
	var inBoxes int64
	if b.paths.cgroups != "" {
		inBoxes, _ = (&runCgroup{dir: b.paths.cgroups}).unreclaimable()
		for _, l := range b.left {
			if l.cg != nil && !l.cg.gone() {
				held, _ := l.cg.unreclaimable()
				inBoxes -= held
			}
		}
	}
	r.Guest = max(0, mem.Used-inBoxes)
	r.Headroom = headroomGuest + headroomPerRun*int64(len(b.admitted))
	r.Left = r.Total - r.Guest - r.Warm - r.Runs - r.Headroom
	return r
}
