//go:build linux

package box

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/launcher"
	"pybox/shared/wire"
)

// A warm box is a box made ahead of its run, by the same path as any
// other (fresh namespaces, its own cgroup, seccomp, the tmpfs, the
// posture check), whose python3 has started and imported its image's
// preload list and waits for exactly one program. Each is its own exec of
// python3, never a fork of another: its hash secret, address layout and
// random states are its own.
//
// The pool keeps, for each image, as many boxes as the VM takes runs at
// once (Config.RunsAtOnce, and at least two, so that back-to-back calls
// find one ready while the next warms). Boxes of an image warm one at a
// time, at a tenth of a run's CPU weight, and only in memory that leaves
// room for one more run beside them (admit.go). A run takes a ready
// box if there is one; one that comes while its image's box still warms
// takes it as it is: the launcher looks for a program before each module
// of the list, so the run waits at most for the import in progress.
//
// The python3 of a warm box is the image's own, started as a cold box's
// is (`python3 -I -B -c` with a stand-in for the code, the same
// environment) with the image's launcher in LD_PRELOAD (shared/launcher).
// The launcher's only channel is fd 3, one end of a unix seqpacket socket
// whose other end the agent holds: the agent sends the program's code with
// its stdout and stderr (fresh pipes, so that nothing the preload printed
// reaches the program's capture); the launcher reports the descriptors it
// holds, and on "go" closes the socket and runs the program through
// CPython's own Py_RunMain, as `python3 -I -B -c CODE` would, from the
// state a fresh interpreter has (pybox-launch.c says what it puts back).
// A run that names data folders has them bound into the waiting box
// before "go", as box-init binds them into a cold one.
//
// A run the user let reach the network takes a warm box of its own
// kind: one whose python3 started with the proxy in its environment
// (proxyEnv), as a cold net run's does, since an interpreter's
// environment is fixed when it starts. Its proxy listens in the box from
// the hand-over on, before "go". An image has such boxes once a run of
// it opened the network, and keeps them as it keeps the others.

// Bounds of warming.
const (
	// warmLimit bounds a warm box's start and preload: under TCG the
	// data image's imports take some seconds, and the box warms at a
	// tenth of a run's CPU weight while a run goes on.
	warmLimit = 3 * time.Minute
	// warmFailures in a row make an image run cold until the VM restarts:
	// a preload that fails fails again.
	warmFailures = 3
	// handOverLimit bounds each exchange with the launcher at the
	// hand-over, each from its own start.
	handOverLimit = 5 * time.Second
	// waitingOOMScore makes a waiting warm box the first the kernel's OOM
	// killer takes, before any run.
	waitingOOMScore = "1000"
)

// warmKey is the kind of box a run takes: of its image, with the
// proxy's environment or without.
type warmKey struct {
	image string
	net   bool
}

// warmBox is one box warming or waiting.
type warmBox struct {
	id, image  string
	net        bool // its python3 has the proxy's environment (proxyEnv)
	slot       int
	cg         *runCgroup
	st         *staging
	proc       *boxProc
	ctl        *os.File // the agent's end of the launcher's socket
	wanted     []string // the image's preload list, in order
	fresh      int64    // what the box held that a program cannot free, once its interpreter was up (see unreclaimable)
	spawned    time.Time
	readyAt    time.Time // under Runner.mu until done closes
	importing  string    // under Runner.mu: the module the preload is at
	preloaded  []string
	made       chan struct{} // closed once the box exists (box-init spawned) or has failed
	preloading chan struct{} // closed once the launcher's interpreter is up and it may get the program
	done       chan struct{} // closed once it is ready or has failed
	taken      chan struct{} // closed when a run takes it
	err        error         // why it failed; set before made or done closes
	discarded  bool          // under Runner.mu: discard ran
	claimed    bool          // under Runner.mu: a run is waiting to take it
}

func (wb *warmBox) key() warmKey { return warmKey{wb.image, wb.net} }

// exists says whether the box was made (its cgroup may be read), without
// waiting.
func (wb *warmBox) exists() bool {
	select {
	case <-wb.made:
		return wb.cg != nil
	default:
		return false
	}
}

// pool is the Runner's warm boxes, under Runner.mu.
type pool struct {
	enabled  bool
	closed   bool
	target   int                    // boxes kept of each kind
	boxes    map[warmKey][]*warmBox // each kind's boxes, warming or waiting, oldest first
	failures map[string]int         // failures in a row, by image
	why      map[string]string      // why an image runs cold
	size     map[string]int64       // what the image's last ready box held
	net      map[string]bool        // images a run opened the network in: they keep boxes with the proxy's environment too
	seq      int
}

// warmGuess is what a warm box is taken to hold before one of its image
// was ready: about what the data image's holds.
const warmGuess = 64 << 20

func (p *pool) init(enabled bool, target int) {
	p.enabled, p.target = enabled, target
	p.boxes, p.failures, p.why, p.size = map[warmKey][]*warmBox{}, map[string]int{}, map[string]string{}, map[string]int64{}
	p.net = map[string]bool{}
}

// holds says whether wb is in the pool still (not taken, not discarded).
func (p *pool) holds(wb *warmBox) bool {
	return slices.Contains(p.boxes[wb.key()], wb)
}

// remove takes wb out of the pool.
func (p *pool) remove(wb *warmBox) {
	k := wb.key()
	p.boxes[k] = slices.DeleteFunc(p.boxes[k], func(x *warmBox) bool { return x == wb })
	if len(p.boxes[k]) == 0 {
		delete(p.boxes, k)
	}
}

// pick is the box of kind k a run should take, and claims it: the ready
// one that has waited longest, else the one warming; nil when none is
// free.
func (p *pool) pick(k warmKey) *warmBox {
	var warming *warmBox
	for _, wb := range p.boxes[k] {
		switch {
		case wb.claimed || wb.discarded:
		case !wb.readyAt.IsZero():
			wb.claimed = true
			return wb
		case warming == nil:
			warming = wb
		}
	}
	if warming != nil {
		warming.claimed = true
	}
	return warming
}

// warmHeldLocked is what the pool's boxes hold now (the caller holds
// Runner.mu).
func (b *Runner) warmHeldLocked() int64 {
	var n int64
	for _, boxes := range b.warm.boxes {
		for _, wb := range boxes {
			if wb.exists() {
				held, _ := wb.cg.unreclaimable()
				n += held
			}
		}
	}
	return n
}

// replenishAll starts warming what each image lacks: boxes without the
// proxy's environment, and with it for the images a run opened the
// network in.
func (b *Runner) replenishAll() {
	b.mu.Lock()
	var keys []warmKey
	for name := range b.cfg.Images {
		keys = append(keys, warmKey{image: name})
		if b.warm.net[name] {
			keys = append(keys, warmKey{image: name, net: true})
		}
	}
	b.mu.Unlock()
	for _, k := range keys {
		b.replenish(k)
	}
}

// StartWarming makes warm boxes for each image, in the background.
func (b *Runner) StartWarming() {
	b.replenishAll()
}

// replenish starts a warm box of kind k unless there are as many as the
// pool keeps, one of them still warms, warming is off, the image has
// failed too often, or the box would take room a run may need.
func (b *Runner) replenish(k warmKey) {
	image := k.image
	mem, _ := b.memory()
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &b.warm
	if !p.enabled || p.closed || len(p.boxes[k]) >= p.target || p.failures[image] >= warmFailures || b.paths.cgroups == "" {
		return
	}
	for _, wb := range p.boxes[k] {
		if wb.readyAt.IsZero() {
			return // it starts the next once it is ready
		}
	}
	if room := b.roomLocked(mem); room != nil {
		guess := p.size[image]
		if guess == 0 {
			guess = warmGuess
		}
		// Room for one more run stays free while the VM runs fewer than
		// it was sized for: a warm box never takes the room of the run it
		// is for. (The boxes are bounded by count, and vm start sizes the
		// VM for them.)
		var owed int64
		if len(b.admitted) < b.cfg.RunsAtOnce {
			owed = runNeeds
		}
		if room.Left-guess < owed {
			return // the next run's end tries again
		}
	}
	if fi, err := os.Lstat(b.paths.images + "/" + image + launcher.Path); err != nil || !fi.Mode().IsRegular() {
		p.failures[image] = warmFailures
		p.why[image] = "this image has no warm launcher (" + launcher.Path + "): it was built by an older pybox, or for a Python the launcher does not know; rebuild it (pybox image build NAME) to give it warm boxes"
		return
	}
	slot := b.takeSlotLocked()
	if slot < 0 {
		return // every slot in use: the next run replenishes
	}
	p.seq++
	id := fmt.Sprintf("warm-%s-%d", image, p.seq)
	if k.net {
		id = fmt.Sprintf("warm-%s-net-%d", image, p.seq)
	}
	wb := &warmBox{id: id, image: image, net: k.net, slot: slot,
		made: make(chan struct{}), preloading: make(chan struct{}), done: make(chan struct{}), taken: make(chan struct{})}
	p.boxes[k] = append(p.boxes[k], wb)
	go b.warmUp(wb)
}

// warmUp makes wb and waits until its launcher is ready, or discards it.
func (b *Runner) warmUp(wb *warmBox) {
	wb.spawned = time.Now()
	err := b.makeWarm(wb)
	if err == nil {
		close(wb.made)
		err = b.awaitReady(wb)
	}
	if err != nil {
		wb.err = err
		b.discard(wb, err.Error(), true)
		select {
		case <-wb.made:
		default:
			close(wb.made)
		}
		close(wb.done)
		return
	}
	b.mu.Lock()
	wb.readyAt, wb.importing = time.Now(), ""
	b.mu.Unlock()
	select {
	case <-wb.taken: // a run has it, and waits
	default:
		for _, pid := range wb.cg.procs() {
			os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(waitingOOMScore), 0)
		}
	}
	held, _ := wb.cg.unreclaimable()
	b.mu.Lock()
	delete(b.warm.failures, wb.image)
	delete(b.warm.why, wb.image)
	b.warm.size[wb.image] = held
	b.mu.Unlock()
	b.logf("box: warm box %s ready in %d ms, preloaded: %s", wb.id, wb.readyAt.Sub(wb.spawned).Milliseconds(), strings.Join(wb.preloaded, " "))
	close(wb.done)
	go b.watchWarm(wb)
	b.replenish(wb.key()) // the next box of its kind, if the pool keeps more
}

// makeWarm makes the box: cgroup (at the warm CPU weight), /tmp with no
// input yet, and box-init, which starts the image's python3 with the
// launcher and gives it the agent's socket as fd 3.
func (b *Runner) makeWarm(wb *warmBox) error {
	var err error
	if wb.cg, err = makeCgroup(b.paths.cgroups, wb.id, cpuWeightWarm); err != nil {
		return err
	}
	image := b.paths.images + "/" + wb.image
	if wb.wanted, err = readPreloadList(image); err != nil {
		return err
	}
	ids := slotIDs(wb.slot)
	if wb.st, err = makeStaging(b.paths.staging, wb.id, image, nil, ids); err != nil {
		return err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	// The agent's end is non-blocking, so that its reads and writes have
	// deadlines; the launcher's stays blocking.
	if err := unix.SetNonblock(pair[0], true); err != nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return err
	}
	wb.ctl = os.NewFile(uintptr(pair[0]), "launcher")
	boxEnd := os.NewFile(uintptr(pair[1]), "launcher")
	defer boxEnd.Close()
	cfg := b.childConfig(wb.image, wb.st.tmp, []string{"python3", "-I", "-B", "-c", launcher.StandIn}, nil)
	if wb.net {
		cfg.Env = append(cfg.Env, proxyEnv()...)
	}
	// Last, so that the launcher can drop it from the environment the
	// kernel shows without moving anything else.
	cfg.Env = append(cfg.Env, launcher.Env)
	cfg.Control = true
	// What the preload prints is read and dropped; a program's output
	// goes to pipes of its own (handOver).
	wb.proc, err = spawn(spawnSpec{exe: b.paths.exe, cfg: cfg, cgroupFD: wb.cg.descriptor(), ids: ids, control: boxEnd, maxOut: 1024})
	if err != nil {
		return err
	}
	wb.proc.watch(b.wait)
	return nil
}

// awaitReady waits for box-init's good posture, then for the launcher:
// its interpreter up (the box's memory is read then, before the preload),
// each module it imports, and "ready" (or "fail ..."), all within
// warmLimit.
func (b *Runner) awaitReady(wb *warmBox) error {
	deadline := time.Now().Add(warmLimit)
	select {
	case <-wb.proc.report.started:
	case <-wb.proc.report.done:
		return errors.New(wb.proc.report.refusal())
	case <-time.After(wire.SetupAllowance):
		return fmt.Errorf("box setup took longer than %v", wire.SetupAllowance)
	}
	for {
		line, err := wb.readLine(deadline)
		if err != nil {
			return fmt.Errorf("the launcher said nothing: %v (box-init %s)", err, wb.proc.report.refusal())
		}
		word, rest, _ := strings.Cut(line, " ")
		switch {
		case line == launcher.Initialized && wb.fresh == 0:
			if wb.fresh, err = wb.cg.unreclaimable(); err != nil {
				return err
			}
			if err := wb.write(launcher.Preload, deadline); err != nil {
				return err
			}
			close(wb.preloading)
			continue
		case word == launcher.Importing && rest != "" && !strings.Contains(rest, " "):
			b.mu.Lock()
			wb.importing = rest
			b.mu.Unlock()
			continue
		case word == launcher.Ready:
			wb.preloaded = strings.Fields(rest)
			return nil
		case word == launcher.Fail:
			return fmt.Errorf("the preload failed: %s", rest)
		}
		return fmt.Errorf("the launcher said %q", line)
	}
}

// watchWarm discards a waiting box that dies (killed, or out of memory)
// before a run takes it; the image runs cold until the next is ready.
func (b *Runner) watchWarm(wb *warmBox) {
	select {
	case <-wb.taken:
	case ws := <-wb.proc.exited:
		b.mu.Lock()
		mine := b.warm.holds(wb) && !wb.claimed
		if mine {
			b.warm.remove(wb)
		}
		b.mu.Unlock()
		if !mine {
			wb.proc.exited <- ws // taken meanwhile: the run's to collect
			return
		}
		why := fmt.Sprintf("the warm box ended while it waited (%s)", describeStatus(ws))
		wb.err = errors.New(why)
		b.discard(wb, why, true)
		b.replenish(wb.key())
	}
}

// takeWarm takes a warm box of kind k for a run: one that is ready, one
// still starting its python3, or one importing a module of its preload
// that the program imports too (or one listed before such a module),
// which a cold box would import all over again. It waits until by (or
// ctx's end) for the box to exist. It returns nil when there is none to
// take, or the box is importing what the program does not need: the run
// then makes a cold box, and why says why (empty for coldReason's).
func (b *Runner) takeWarm(ctx context.Context, k warmKey, code string, by time.Time) (wb *warmBox, why string) {
	b.mu.Lock()
	wb = b.warm.pick(k)
	if k.net && b.warm.enabled {
		b.warm.net[k.image] = true
	}
	b.mu.Unlock()
	if wb == nil {
		return nil, ""
	}
	unclaim := func() {
		b.mu.Lock()
		wb.claimed = false
		b.mu.Unlock()
	}
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-wb.made:
	case <-ctx.Done():
		unclaim()
		return nil, ""
	case <-t.C:
		unclaim()
		return nil, ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.warm.holds(wb) || wb.discarded {
		return nil, ""
	}
	if m := wb.importing; wb.readyAt.IsZero() && m != "" && !needsModule(programImports(code), wb.wanted, m) {
		wb.claimed = false
		return nil, fmt.Sprintf("the warm box was still importing %s, which the program does not import: a cold box starts sooner", m)
	}
	b.warm.remove(wb)
	close(wb.taken)
	return wb, ""
}

// coldReason says why a run that wanted a box of kind k got a cold one,
// for its receipt.
func (b *Runner) coldReason(k warmKey) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &b.warm
	switch {
	case !p.enabled:
		return "warm boxes are off (pybox vm start --warm 0)"
	case p.why[k.image] != "":
		return p.why[k.image]
	case len(p.boxes[k]) > 0:
		return "no warm box of the image was free: each was taken by another run, or still warming"
	case k.net:
		return "no warm box with the proxy in its environment was ready: the image's first run that opens the network starts them"
	}
	return "no warm box was ready"
}

// discard removes a warm box that failed (or, failed false, was not
// wanted), and notes why for the image's cold runs.
func (b *Runner) discard(wb *warmBox, why string, failed bool) {
	b.mu.Lock()
	if wb.discarded {
		b.mu.Unlock()
		return
	}
	wb.discarded = true
	if b.warm.holds(wb) {
		b.warm.remove(wb)
	}
	if failed && !b.warm.closed {
		b.warm.failures[wb.image]++
		b.warm.why[wb.image] = "the last warm box failed: " + why
		if b.warm.failures[wb.image] >= warmFailures {
			b.warm.why[wb.image] += fmt.Sprintf(" (%d failures in a row: this image runs cold until the VM restarts)", warmFailures)
		}
	}
	b.mu.Unlock()
	b.logf("box: warm box %s discarded: %s", wb.id, why)
	if wb.ctl != nil {
		wb.ctl.Close()
	}
	empty := true
	if wb.cg != nil {
		wb.cg.kill()
		empty = wb.cg.waitEmpty(wire.SettleAllowance) == nil
	}
	if wb.proc != nil {
		drainBy := time.Now().Add(wire.DrainAllowance)
		wb.proc.stdout.finish(time.Until(drainBy))
		wb.proc.stderr.finish(time.Until(drainBy))
		wb.proc.report.finish(time.Until(drainBy))
	}
	if cl := b.removeBox(wb.id, wb.cg, wb.st, empty, wb.slot); cl.Status != wire.CleanupRemoved {
		b.logf("box: warm box %s: cleanup %s: %s", wb.id, cl.Status, cl.Detail)
	}
}

// Warm says how each warm box is, by image; an image with none says
// why it runs cold.
func (b *Runner) Warm() []wire.WarmBox {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []wire.WarmBox
	for name := range b.cfg.Images {
		if !b.warm.enabled {
			out = append(out, wire.WarmBox{Image: name, State: "off"})
			continue
		}
		boxes := b.warm.boxes[warmKey{image: name}]
		if len(boxes) == 0 {
			out = append(out, wire.WarmBox{Image: name, State: "cold", Reason: b.warm.why[name]})
		}
		boxes = append(slices.Clone(boxes), b.warm.boxes[warmKey{image: name, net: true}]...)
		for _, wb := range boxes {
			w := wire.WarmBox{Image: name, Net: wb.net}
			if wb.readyAt.IsZero() {
				w.State, w.ForMS, w.Importing = "warming", time.Since(wb.spawned).Milliseconds(), wb.importing
			} else {
				w.State, w.ForMS, w.Preloaded = "ready", time.Since(wb.readyAt).Milliseconds(), slices.Clone(wb.preloaded)
			}
			if wb.exists() {
				w.MemoryBytes, _ = wb.cg.read("memory.current")
			}
			out = append(out, w)
		}
	}
	slices.SortStableFunc(out, func(x, y wire.WarmBox) int { return strings.Compare(x.Image, y.Image) })
	return out
}

// Close discards every warm box and makes no more: the VM stops.
func (b *Runner) Close() {
	b.mu.Lock()
	b.warm.closed = true
	var boxes []*warmBox
	for _, of := range b.warm.boxes {
		boxes = append(boxes, of...)
	}
	b.mu.Unlock()
	// A box still in its preload is not waited for: once it exists, it
	// is removed as it is.
	for _, wb := range boxes {
		<-wb.made
		b.discard(wb, "the VM stops", false)
	}
}

// DiscardWarm discards image's warm box, ready or still in its preload,
// as one that died would be (for the console, when a box is to be looked at anew);
// the next one starts warming at once.
func (b *Runner) DiscardWarm(image string) error {
	b.mu.Lock()
	wb := b.warm.pick(warmKey{image: image})
	b.mu.Unlock()
	if wb == nil {
		return fmt.Errorf("image %q has no warm box", image)
	}
	<-wb.made
	b.mu.Lock()
	mine := b.warm.holds(wb) && !wb.discarded
	if mine {
		b.warm.remove(wb)
		close(wb.taken)
	}
	b.mu.Unlock()
	if !mine {
		return fmt.Errorf("image %q's warm box is gone already", image)
	}
	b.discard(wb, "discarded from the console", false)
	b.replenish(wb.key())
	return nil
}

// describeStatus says how a process ended.
func describeStatus(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + unix.SignalName(syscall.Signal(ws.Signal()))
	}
	return fmt.Sprintf("status %#x", uint32(ws))
}

// KillWarm kills image's waiting warm box with SIGKILL, as the OOM
// killer would (for the console, to see the agent notice a box that
// died): the agent discards it, counts it as a failure, and warms the
// next.
func (b *Runner) KillWarm(image string) error {
	b.mu.Lock()
	var wb *warmBox
	if boxes := b.warm.boxes[warmKey{image: image}]; len(boxes) > 0 {
		wb = boxes[0]
	}
	b.mu.Unlock()
	if wb == nil {
		return fmt.Errorf("image %q has no warm box", image)
	}
	<-wb.done
	b.mu.Lock()
	mine := b.warm.holds(wb) && wb.err == nil
	b.mu.Unlock()
	if !mine {
		return fmt.Errorf("image %q's warm box is gone already", image)
	}
	return wb.cg.kill()
}
