//go:build linux

package box

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pybox/guest/reap"
	"pybox/shared/wire"
)

// Config is what the agent tells the box about the VM.
type Config struct {
	Images map[string]wire.ImageInfo // by name; the root of image X is /images/X
	Data   []string                  // the data folders mounted, at <data>/<name>
	Agent  wire.AgentInfo
	// Accel is what runs the VM's CPU, as the host said (boot.ParseAccel):
	// "kvm", "tcg", "vz", or "" when the host did not say.
	Accel string
	// Logf, if set, gets one line per run that made a box: where its
	// time went, phase by phase.
	Logf func(format string, args ...any)
	// Warm keeps warm boxes ready for each image (pool.go).
	Warm bool
	// RunsAtOnce is how many runs the host sized the VM for: each image
	// keeps that many warm boxes (at least two, so that back-to-back
	// calls find one ready while the next warms).
	RunsAtOnce int
	// Memory reads the guest's memory (/proc/meminfo), for admission;
	// nil admits by nothing but the box slots (tests).
	Memory func() (*wire.GuestMemory, error)
}

// Runner is the guest's runner of boxes: it runs programs, each in a
// fresh sealed box, several at once as memory allows (admit.go), and
// keeps the warm boxes ready (pool.go). The life of one run is run.go's.
// Its methods are safe for concurrent use.
type Runner struct {
	cfg     Config
	paths   paths
	wait    func(pid int) (unix.WaitStatus, *unix.Rusage)
	agentNS map[string]uint64

	mu       sync.Mutex
	admitted map[string]*admission // the runs admitted and not yet ended, by run id; made by the first Admit
	full     int64                 // the guest's memory with nothing ballooned away (the most it has had)
	left     []leftover            // what failed cleanups left, kept out of use (aside.go)
	asideMu  sync.Mutex            // one SetAside at a time
	slots    [maxSlots]bool
	warm     pool // the warm boxes (pool.go)
}

// paths are where a box's parts live; tests move them.
type paths struct {
	exe     string // the binary started as box-init
	images  string // the image mounts, <images>/<name>
	data    string // the data folders' mounts, <data>/<name>
	staging string // the staging tmpfs mounts, <staging>/<run_id>/tmp
	cgroups string // the runs' parent cgroup; "" only in tests without cgroup2
}

var guestPaths = paths{
	exe:     "/proc/self/exe",
	images:  "/images",
	data:    "/run/data",
	staging: "/run/boxes",
	cgroups: "/sys/fs/cgroup/runs",
}

// New returns a Runner for the images the guest mounted. The agent must
// have started the reaper (reap.Start): the box collects its processes
// with reap.Wait.
func New(cfg Config) *Runner {
	b := &Runner{cfg: cfg, paths: guestPaths, wait: reap.Wait, agentNS: agentNamespaces()}
	b.warm.init(cfg.Warm, max(2, cfg.RunsAtOnce))
	return b
}

func (b *Runner) logf(format string, args ...any) {
	if b.cfg.Logf != nil {
		b.cfg.Logf(format, args...)
	}
}

// takeSlot reserves the host ids of a box (see hostIDs); -1 when every
// slot is in use. The caller holds b.mu.
func (b *Runner) takeSlotLocked() int {
	for i, used := range b.slots {
		if !used {
			b.slots[i] = true
			return i
		}
	}
	return -1
}

func (b *Runner) takeSlot() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.takeSlotLocked()
}

func (b *Runner) freeSlot(n int) {
	if n < 0 {
		return
	}
	b.mu.Lock()
	b.slots[n] = false
	b.mu.Unlock()
}

// agentNamespaces reads the inode of each of the agent's namespaces, for
// box-init to check that its own differ.
func agentNamespaces() map[string]uint64 {
	ns := map[string]uint64{}
	for _, name := range namespaces {
		if fi, err := os.Stat("/proc/self/ns/" + name); err == nil {
			ns[name] = fi.Sys().(*syscall.Stat_t).Ino
		}
	}
	return ns
}

// Run runs r in a fresh box and returns its result. It always returns a
// receipt, whose cleanup status says whether the box is confirmed gone.
// Cancelling ctx kills the box; the receipt then says cancelled. Runs
// go on at once, each in its own box; r runs in the room Admit set aside
// for it (a run not admitted first is admitted here, and refused in its
// receipt when it does not fit).
//
// r must have passed wire.Run.Check: the agent checks every run once,
// before it reaches the box (agent.handleRun), and the box takes it as
// given (its input files' names, its data folders, its bounds) rather
// than check the same rules a second time.
//
// A run that asks for delivery (r.Deliver) has the files of its
// /tmp/output streamed through emit, in chunks, before it returns.
//
// A run that opens the network (r.Net) has a proxy in its box (netns.go),
// and each connection its program makes to it goes to conns, which says
// whether it took the connection; one taken is conns' to close, by the
// end of the run or after. conns is called from one goroutine, never
// after Run returns, and must not block for long: the next connection
// waits for it. A run that opens the network with conns nil is refused;
// conns is not called for a run that does not.
func (b *Runner) Run(ctx context.Context, r *wire.Run, emit func(*wire.OutputChunk) error, conns func(net.Conn) bool) *wire.Result {
	rn := b.newRun(r)
	rn.emit, rn.conns = emit, conns
	if err := b.claim(rn); err != nil {
		rn.out.refusal = err.Error()
		return rn.result()
	}
	// execute closes a net run's proxy once the box is dead; this is
	// for the paths that leave it early (a panic among them).
	defer func() { rn.proxy.close() }()
	rn.execute(ctx)
	rn.enter(phaseCleanup)
	rn.rec.Cleanup = rn.cleanup()
	rn.at.cleaned = time.Now()
	if !rn.at.spawned.IsZero() {
		how := "cold"
		if rn.warm != nil {
			how = "warm"
		}
		b.logf("box: run %s (%s): %s", r.RunID, how, rn.at.phases(rn.startedAt(), rn.exitedAt))
	}
	// Its room is free again: warm boxes that waited for room, or for
	// the slot of a run that found none ready, start warming now.
	b.release(r.RunID)
	b.replenishAll()
	return rn.result()
}

// Runs says where each run in progress is, oldest first.
func (b *Runner) Runs() []wire.RunProgress {
	b.mu.Lock()
	var runs []admission
	for _, a := range b.admitted {
		if a.rn != nil {
			runs = append(runs, *a)
		}
	}
	b.mu.Unlock()
	slices.SortFunc(runs, func(x, y admission) int { return x.rn.at.begun.Compare(y.rn.at.begun) })
	out := make([]wire.RunProgress, 0, len(runs))
	for _, a := range runs {
		out = append(out, a.progress(b.paths.cgroups))
	}
	return out
}

// Abort is the watchdog's last resort for a run past its bound: whatever
// phase the run is stuck in, it kills every process of the box, detaches
// its /tmp and removes what it can, then says what it could confirm. It
// works from the run's id alone (the run's goroutine owns its state),
// and that goroutine's own cleanup later finds what is already gone.
func (b *Runner) Abort(runID string) wire.Cleanup {
	b.mu.Lock()
	var rn *run
	if a := b.admitted[runID]; a != nil {
		rn = a.rn
	}
	b.mu.Unlock()
	if rn == nil {
		return *wire.Unknown("the watchdog found the run no longer in progress")
	}
	rn.mu.Lock()
	boxID := rn.boxID
	rn.mu.Unlock()
	var done, left []string
	note := func(err error, ok, failed string) {
		if err != nil {
			left = append(left, failed+": "+err.Error())
		} else {
			done = append(done, ok)
		}
	}
	if b.paths.cgroups != "" {
		cg := &runCgroup{dir: filepath.Join(b.paths.cgroups, boxID), fd: -1}
		if !cg.gone() {
			err := cg.kill()
			if err == nil {
				err = cg.waitEmpty(time.Second)
			}
			note(err, "every process killed", "processes may be left")
			note(cg.remove(), "cgroup removed", "cgroup left")
		}
	}
	st := &staging{base: filepath.Join(b.paths.staging, boxID)}
	st.tmp = filepath.Join(st.base, "tmp")
	if err := unix.Unmount(st.tmp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		left = append(left, "/tmp not detached: "+err.Error())
	}
	note(st.remove(), "/tmp removed", "/tmp left")
	l := leftover{runID: boxID, st: st, slot: -1}
	if rest := l.what(); len(rest) > 0 {
		left = append(left, rest...)
	}
	detail := "the run overran its bound; the watchdog tore its box down: " + strings.Join(done, ", ")
	if len(left) == 0 {
		return wire.Cleanup{Status: wire.CleanupRemoved, Detail: detail}
	}
	return wire.Cleanup{Status: wire.CleanupFailed, Detail: detail + "; not confirmed: " + strings.Join(left, "; ")}
}
