//go:build linux

package box

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// run is one run in progress.
type run struct {
	b   *Runner
	req *wire.Run
	rec wire.Receipt

	cg    *runCgroup
	st    *staging
	proc  *boxProc
	out   outcome
	files []wire.OutputFile

	exitedAt time.Time
	empty    bool // the cgroup was confirmed empty after the run
	at       milestones

	emit func(*wire.OutputChunk) error // where delivered files go

	conns func(net.Conn) bool // where a net run's connections go (see Runner.Run)
	proxy *proxy              // a net run's proxy, once its box-init is started

	boxID string    // names its cgroup and staging: the run id, or a warm box's
	slot  int       // its host ids; -1 before it has some
	warm  *warmBox  // the warm box it took, if it did
	go_   time.Time // when a warm box was told to start the program
	cpu0  cgroupStats

	// settleBy is when settling must be done: SettleAllowance after the
	// box was killed, or after the program's end.
	settleBy time.Time

	mu      sync.Mutex // guards phase, phaseAt and boxID, read by Progress and Abort
	phase   string
	phaseAt time.Time
}

// milestones are when a run passed each step, for the per-run log line
// that says where the time went.
type milestones struct {
	begun, cgroup, staged, spawned, settled, collected, cleaned time.Time
}

// phases renders the time between milestones, in ms; started is when
// box-init reported a good posture and exited when box-init ended (zero
// if it never did). A step that was not reached shows as "-".
func (m milestones) phases(started, exited time.Time) string {
	steps := []struct {
		name     string
		from, to time.Time
	}{
		{"cgroup", m.begun, m.cgroup},
		{"staging", m.cgroup, m.staged},
		{"spawn", m.staged, m.spawned},
		{"box-init", m.spawned, started}, // mounts, pivot, seccomp, posture check
		{"program", started, exited},
		{"settle", exited, m.settled},
		{"output", m.settled, m.collected},
		{"cleanup", m.collected, m.cleaned}, // counters and removal
	}
	parts := make([]string, 0, len(steps))
	for _, st := range steps {
		if st.from.IsZero() || st.to.IsZero() {
			parts = append(parts, st.name+" -")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", st.name, float64(st.to.Sub(st.from).Microseconds())/1000))
	}
	return fmt.Sprintf("%.1f ms in all: %s (ms)", float64(m.cleaned.Sub(m.begun).Microseconds())/1000, strings.Join(parts, ", "))
}

// newRun starts the receipt of r, a checked run (see Run).
func (b *Runner) newRun(r *wire.Run) *run {
	img, ok := b.cfg.Images[r.Image]
	if !ok {
		img = wire.ImageInfo{Name: r.Image}
	}
	rn := &run{b: b, req: r, boxID: r.RunID, slot: -1}
	rn.at.begun = time.Now()
	rn.out.timeout = r.TimeoutSeconds
	rn.rec = wire.Receipt{
		SchemaVersion: wire.ReceiptSchemaVersion,
		RunID:         r.RunID,
		Image:         img,
		Agent:         b.cfg.Agent,
		Limits: wire.AppliedLimit{
			TimeoutSeconds: r.TimeoutSeconds, MaxOutputBytes: r.MaxOutputBytes,
			MemoryBytes: memoryMax, PidsMax: pidsMax, TmpBytes: tmpBytes, TmpInodes: tmpInodes,
		},
		Memory:     wire.Memory{LimitBytes: memoryMax, Reading: readingNone},
		Pids:       wire.Pids{Max: pidsMax},
		InputFiles: digestInputs(r.Files),
		Data:       dataInfo(r.Data),
		Output:     wire.Output{Returned: []wire.FileDigest{}, NotReturned: []wire.NotReturned{}},
		Cleanup:    *wire.NothingRan(),
	}
	return rn
}

// dataInfo is the data folders for the receipt: their names, as the run
// gave them. Where each is on the host and what it holds is the host's to
// say; it fills those in itself when the receipt reaches it.
func dataInfo(in []wire.DataFolder) []wire.DataFolder {
	if len(in) == 0 {
		return nil
	}
	out := make([]wire.DataFolder, len(in))
	for i, d := range in {
		out[i] = wire.DataFolder{Name: d.Name}
	}
	return out
}

// Readings of memory.peak.
const (
	readingFinal    = "final"     // read after every process of the box was gone
	readingNotFinal = "not_final" // read while something was left in the box
	readingNone     = "unavailable"
)

// Phases of a run, as Progress reports them.
const (
	phaseSetup   = "setup"   // cgroup, staging, box-init up to its posture report
	phaseProgram = "program" // the program runs, up to its timeout
	phaseSettle  = "settle"  // the box is killed and emptied, the pipes drained
	phaseOutput  = "output"  // /tmp/output is collected and the counters read
	phaseDeliver = "deliver" // /tmp/output is streamed whole to the host
	phaseCleanup = "cleanup" // the tmpfs and the cgroup are removed
)

func (rn *run) enter(phase string) {
	rn.mu.Lock()
	rn.phase, rn.phaseAt = phase, time.Now()
	rn.mu.Unlock()
}

// execute makes the box, runs the program and measures it. Whatever it
// made is recorded in rn for cleanup, even when a step fails. Each phase
// keeps to its allowance (wire.RunBound); cancelling ctx ends the
// program and the collection of its output, never the cleanup.
func (rn *run) execute(ctx context.Context) {
	rn.enter(phaseSetup)
	if rn.req.Net && rn.conns == nil {
		rn.out.refusal = "the run asks for the network, and nothing here serves its connections"
		return
	}
	// A warm box of the run's kind, if there is one (waiting for it
	// while it warms, within the setup's allowance); a cold one
	// otherwise.
	by := rn.at.begun.Add(wire.SetupAllowance - time.Second)
	k := warmKey{image: rn.req.Image, net: rn.req.Net}
	wb, why := rn.b.takeWarm(ctx, k, rn.req.Code, by)
	if wb != nil {
		rn.takeOver(ctx, wb, by)
	} else if why != "" {
		rn.rec.Box = &wire.BoxInfo{Fallback: why}
	}
	if rn.warm == nil {
		if rn.rec.Box == nil {
			rn.rec.Box = &wire.BoxInfo{Fallback: rn.b.coldReason(k)}
		}
		if !rn.makeCold(ctx) {
			return
		}
	}
	rn.supervise(ctx)
	// The box is dead or killed: nothing of the program connects any
	// more.
	rn.proxy.close()
	rn.enter(phaseSettle)
	rn.settle()
	rn.at.settled = time.Now()
	rn.enter(phaseOutput)
	if rn.out.refusal == "" {
		var overrun string
		rn.files, rn.rec.Output, overrun = collectOutput(ctx, rn.st.tmp, rn.req.ReturnFiles, time.Now().Add(wire.CollectAllowance))
		rn.overran(overrun)
		rn.deliver(ctx)
	}
	rn.at.collected = time.Now()
	rn.measure()
}

// takeOver hands the program to wb; if that fails, before anything of
// the program ran, the box is discarded and the run is left to make a
// cold one, its receipt saying why.
func (rn *run) takeOver(ctx context.Context, wb *warmBox, by time.Time) {
	err := rn.handOver(ctx, wb, by)
	if err == nil {
		return
	}
	rn.b.logf("box: run %s: the warm box %s could not take the program (%v); a cold box runs it", rn.req.RunID, wb.id, err)
	rn.b.discard(wb, "the hand-over failed: "+err.Error(), true) // unless its warming failed, and discarded it
	rn.proxy.close()                                             // a net run's, if it listened in the box already: the cold box gets its own
	rn.proxy = nil
	rn.mu.Lock()
	rn.warm, rn.cg, rn.st, rn.proc, rn.slot, rn.boxID = nil, nil, nil, nil, -1, rn.req.RunID
	rn.mu.Unlock()
	rn.rec.Memory, rn.cpu0 = wire.Memory{LimitBytes: memoryMax, Reading: readingNone}, cgroupStats{}
	rn.rec.Box = &wire.BoxInfo{Fallback: "the warm box could not take the program: " + err.Error()}
}

// makeCold makes a box for the run alone: its cgroup, its /tmp with the
// input files, and box-init, which execs python3 -I -B -c CODE. It says
// whether the box runs; if not, the outcome says why.
func (rn *run) makeCold(ctx context.Context) bool {
	b := rn.b
	refuse := func(err error) bool {
		rn.out.refusal = "the box could not be made: " + err.Error()
		return false
	}
	if rn.slot = b.takeSlot(); rn.slot < 0 {
		return refuse(errors.New("every box slot is in use"))
	}
	ids := slotIDs(rn.slot)
	var err error
	if b.paths.cgroups != "" {
		if rn.cg, err = makeCgroup(b.paths.cgroups, rn.boxID, cpuWeightRun); err != nil {
			return refuse(err)
		}
	}
	rn.at.cgroup = time.Now()
	image := b.paths.images + "/" + rn.req.Image
	if rn.st, err = makeStaging(b.paths.staging, rn.boxID, image, rn.req.Files, ids); err != nil {
		return refuse(err)
	}
	rn.at.staged = time.Now()
	if ctx.Err() != nil {
		rn.out.cancelled = true
		return false
	}
	cfg := b.childConfig(rn.req.Image, rn.st.tmp, []string{"python3", "-I", "-B", "-c", rn.req.Code}, rn.req.Data)
	sp := spawnSpec{exe: b.paths.exe, cgroupFD: rn.cg.descriptor(), ids: ids, maxOut: rn.req.MaxOutputBytes}
	if rn.req.Net {
		// The proxy listens before box-init has its config, so before
		// anything of the program runs.
		cfg.Env = append(cfg.Env, proxyEnv()...)
		sp.ready, sp.wait = rn.listen, b.wait
	}
	sp.cfg = cfg
	if rn.proc, err = spawn(sp); err != nil {
		return refuse(err)
	}
	rn.proc.watch(b.wait)
	rn.at.spawned = time.Now()
	return true
}

// listen makes the proxy, resolver and direct listeners of a net run in
// the box of box-init pid and starts handing their connections to the
// run's conns.
func (rn *run) listen(pid int) error {
	bn, err := listenIn(pid, rn.req.NetPorts)
	if err != nil {
		return fmt.Errorf("the box's proxy: %w", err)
	}
	rn.proxy = serveProxy(bn, rn.conns, func(what string) { rn.b.logf("box: run %s: %s", rn.req.RunID, what) })
	return nil
}

// childConfig is what box-init gets for a box of image, with the staging
// tmpfs tmp as its /tmp, that runs argv.
func (b *Runner) childConfig(image, tmp string, argv []string, data []wire.DataFolder) childConfig {
	root := b.paths.images + "/" + image
	cfg := childConfig{
		Root: root, Staging: tmp, Argv: argv, Env: programEnv(runtime.GOARCH, b.cfg.Accel),
		AgentNS: b.agentNS, UID: programID, GID: programID, FileSizeMax: tmpBytes,
	}
	cfg.Data = b.dataMounts(data)
	cfg.SkipPosture, cfg.SkipSeccomp = b.skips()
	return cfg
}

// dataMounts are where the agent has the data folders a run names.
func (b *Runner) dataMounts(data []wire.DataFolder) []dataMount {
	var out []dataMount
	for _, d := range data {
		out = append(out, dataMount{Name: d.Name, Source: b.paths.data + "/" + d.Name})
	}
	return out
}

// startedAt is when the program started: box-init's good posture for a
// cold box, the "go" for a warm one.
func (rn *run) startedAt() time.Time {
	if rn.warm != nil {
		return rn.go_
	}
	if rn.proc == nil {
		return time.Time{}
	}
	return rn.proc.report.startedAt
}

// deliver streams /tmp/output whole to the host, for a run that asked.
func (rn *run) deliver(ctx context.Context) {
	if rn.req.Deliver == nil || rn.emit == nil {
		return
	}
	rn.enter(phaseDeliver)
	emit := func(name string, off int64, data []byte) error {
		return rn.emit(&wire.OutputChunk{RunID: rn.req.RunID, Name: name, Offset: off, Data: data})
	}
	d := deliverOutput(ctx, rn.st.tmp, rn.req.Deliver, emit, time.Now().Add(wire.DeliverAllowance))
	rn.rec.Output.Delivered = d.delivered
	all := wire.SumFiles(d.delivered)
	rn.rec.Output.DeliveredAll = &all
	rn.rec.Output.NotDelivered, rn.rec.Output.NotDeliveredUnlisted = d.notDelivered, d.notListed
	rn.overran(d.overrun)
}

// overran notes in the receipt a phase that stopped before it was done.
func (rn *run) overran(what string) {
	if what != "" {
		rn.rec.Overruns = append(rn.rec.Overruns, what)
	}
}

// programEnv is the program's whole environment, on goarch under accel
// (see Config.Accel).
func programEnv(goarch, accel string) []string {
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/tmp",
		"TMPDIR=/tmp",
		"LANG=C.UTF-8",
		"MPLCONFIGDIR=/tmp/" + mplConfig,
		// One BLAS thread, the program's own: OpenBLAS starts its
		// worker threads when numpy loads it, so with more a warm box
		// (numpy preloaded) would run threads under a program that
		// never imported numpy, and a cold one would not. The box has
		// few CPUs, and the small arrays programs here use gain little
		// from a second.
		"OPENBLAS_NUM_THREADS=1",
		"PYTHONDONTWRITEBYTECODE=1",
	}
	if goarch == "amd64" && accel != "kvm" {
		// Under QEMU's emulator OpenBLAS picks kernels by what the
		// emulated CPU claims, and some of them die with SIGILL (in
		// matplotlib's savefig) or crawl; Prescott's (SSE3) run
		// everywhere, at no cost for the small arrays programs here
		// use. On KVM the CPU is the host's and OpenBLAS's own choice is
		// right. A host that does not say (older than pybox.accel) gets
		// the safe kernels.
		env = append(env, "OPENBLAS_CORETYPE=Prescott")
	}
	return env
}

// supervise waits for box-init, which outlives the program, to exit,
// killing the box at the timeout, on cancel, or when its setup overruns.
// Once the box is killed, box-init has SettleAllowance to exit; one
// stuck in the kernel past that is left to settle and cleanup, which
// kill the cgroup again and say what is left.
func (rn *run) supervise(ctx context.Context) {
	p := rn.proc
	exited := p.exited
	// Setup's allowance counts from the run's request, not from spawn.
	setup := time.NewTimer(time.Until(rn.at.begun.Add(wire.SetupAllowance)))
	defer setup.Stop()
	var deadline, killed <-chan time.Time
	started, cancelled := p.report.started, ctx.Done()
	if rn.warm != nil {
		// The program started at the hand-over's "go".
		now := make(chan struct{})
		close(now)
		started = now
	}
	kill := func() {
		rn.kill()
		rn.settleBy = time.Now().Add(wire.SettleAllowance)
		deadline, cancelled, killed = nil, nil, time.After(wire.SettleAllowance)
	}
	for {
		select {
		case <-started:
			// The wall timeout counts from the program's start, not
			// from the box's setup.
			started = nil
			setup.Stop()
			rn.enter(phaseProgram)
			t := time.NewTimer(time.Duration(rn.req.TimeoutSeconds * float64(time.Second)))
			defer t.Stop()
			deadline = t.C
		case <-deadline:
			rn.out.timedOut = true
			kill()
		case <-setup.C:
			rn.out.refusal = fmt.Sprintf("box setup took longer than its allowance of %v", wire.SetupAllowance)
			rn.overran(rn.out.refusal)
			started = nil
			kill()
		case <-cancelled:
			rn.out.cancelled = true
			kill()
		case <-killed:
			rn.overran(fmt.Sprintf("settle: box-init had not exited %v after the box was killed", wire.SettleAllowance))
			return
		case ws := <-exited:
			rn.exitedAt = time.Now()
			rn.out.exited, rn.out.status = true, ws
			return
		}
	}
}

// kill kills every process of the box.
func (rn *run) kill() {
	if rn.cg != nil && rn.cg.kill() == nil {
		return
	}
	// Without a cgroup (tests), or if cgroup.kill failed: box-init is
	// the init of the box's pid namespace, and when it dies the kernel
	// kills every other process in it.
	unix.Kill(rn.proc.pid, unix.SIGKILL)
}

// settle kills whatever the program left running, waits for the box to
// empty, and lets the pipes end. Nothing of the box may run while
// /tmp/output is read or memory.peak taken.
func (rn *run) settle() {
	if rn.settleBy.IsZero() {
		rn.settleBy = time.Now().Add(wire.SettleAllowance)
	}
	rn.empty = true
	if rn.cg != nil {
		rn.cg.kill()
		if err := rn.cg.waitEmpty(time.Until(rn.settleBy)); err != nil {
			rn.empty = false
			rn.overran("settle: " + err.Error())
		}
	}
	// The three pipes share one allowance.
	drainBy := time.Now().Add(wire.DrainAllowance)
	p := rn.proc
	ended := p.stdout.finish(time.Until(drainBy))
	ended = p.stderr.finish(time.Until(drainBy)) && ended
	ended = p.report.finish(time.Until(drainBy)) && ended
	if !ended {
		rn.overran(fmt.Sprintf("settle: the box's pipes had not ended %v after it emptied; what came later was not read", wire.DrainAllowance))
	}
	if rn.out.refusal == "" {
		rn.out.refusal = p.report.refusal()
	}
	// box-init's own status is 0 when it reported the program's end, or
	// SIGKILL when the box was killed first; the program's is the one
	// the receipt gives.
	if p.report.program != nil {
		rn.out.status = *p.report.program
	} else if rn.out.exited && !rn.out.timedOut && !rn.out.cancelled && rn.out.refusal == "" {
		// box-init ended before the program without the agent killing
		// it: the status at hand is box-init's, not the program's.
		rn.out.initEnded = true
	}
	rn.rec.Capture.StdoutInfo, rn.rec.Capture.Stdout = p.stdout.stream()
	rn.rec.Capture.StderrInfo, rn.rec.Capture.Stderr = p.stderr.stream()
	rn.rec.Posture = p.report.posture
	if start := rn.startedAt(); !start.IsZero() && !rn.exitedAt.IsZero() {
		rn.rec.WallMS = rn.exitedAt.Sub(start).Milliseconds()
	}
}

// measure reads the cgroup's counters into the receipt.
func (rn *run) measure() {
	if rn.cg == nil {
		return
	}
	s, err := rn.cg.stats()
	if err != nil {
		return
	}
	rn.out.oomKills = s.oomKills
	rn.rec.Memory.PeakBytes = s.memoryPeak
	rn.rec.Memory.Reading = readingNotFinal
	if rn.empty {
		rn.rec.Memory.Reading = readingFinal
	}
	rn.rec.Memory.OOMKilled = s.oomKills > 0
	// A warm box's CPU before the hand-over (the preload) is not the
	// program's.
	rn.rec.CPU = wire.CPUTime{UserMS: (s.userUsec - rn.cpu0.userUsec) / 1000, SystemMS: (s.systemUsec - rn.cpu0.systemUsec) / 1000}
	rn.rec.Pids.LimitHit = s.pidsMaxHit
}

// cleanup removes the box, then checks that it is gone: only then is
// it REMOVED. What is left is remembered, and runs are refused until a
// later attempt removes it.
func (rn *run) cleanup() wire.Cleanup {
	if rn.st == nil && rn.cg == nil {
		rn.b.freeSlot(rn.slot)
		return *wire.NothingRan()
	}
	return rn.b.removeBox(rn.req.RunID, rn.cg, rn.st, rn.empty, rn.slot)
}

// result finishes the receipt.
func (rn *run) result() *wire.Result {
	v := decide(rn.out)
	rn.rec.Status, rn.rec.ExitCode, rn.rec.Signal = v.status, v.exitCode, v.signal
	rn.rec.Reason = pidsNote(v.reason, rn.rec.Pids.LimitHit)
	return &wire.Result{Receipt: rn.rec, Files: rn.files}
}
