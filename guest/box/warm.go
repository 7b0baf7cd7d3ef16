//go:build linux

package box

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pybox/guest/imagefs"
	"pybox/shared/launcher"
	"pybox/shared/wire"
)

// A warm box is a box made ahead of its run, by the same path as any
// other (fresh namespaces, its own cgroup, seccomp, the tmpfs, the
// posture check), whose python3 has started and imported its image's
// preload list and waits for exactly one program. Each is its own exec of
// python3, never a fork of another: its hash secret, address layout and
// random states are its own. The agent keeps one for each image; when a
// run takes it, the next one starts warming at once, at a tenth of a
// run's CPU weight. A run that comes while its box still warms takes it
// as it is: the launcher looks for a program before each module of the
// list, so the run waits at most for the import in progress.
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

// warmBox is one box warming or waiting.
type warmBox struct {
	id, image  string
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
}

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
	boxes    map[string]*warmBox // the one box of each image
	failures map[string]int      // failures in a row, by image
	why      map[string]string   // why an image runs cold
	seq      int
}

func (p *pool) init(enabled bool) {
	p.enabled = enabled
	p.boxes, p.failures, p.why = map[string]*warmBox{}, map[string]int{}, map[string]string{}
}

// StartWarming makes a warm box for each image, in the background.
func (b *Runner) StartWarming() {
	for name := range b.cfg.Images {
		b.replenish(name)
	}
}

// replenish starts a warm box for image unless one is there, warming is
// off, or the image has failed too often.
func (b *Runner) replenish(image string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &b.warm
	if !p.enabled || p.closed || p.boxes[image] != nil || p.failures[image] >= warmFailures || b.paths.cgroups == "" {
		return
	}
	if fi, err := os.Lstat(b.paths.images + "/" + image + launcher.Path); err != nil || !fi.Mode().IsRegular() {
		p.failures[image] = warmFailures
		p.why[image] = "this image has no warm launcher (" + launcher.Path + "): it was built by an older pybox, or for a Python the launcher does not know; rebuild it (pybox image build NAME) to give it warm boxes"
		return
	}
	slot := -1
	for i, used := range b.slots {
		if !used {
			b.slots[i], slot = true, i
			break
		}
	}
	if slot < 0 {
		return // every slot in use: the next run replenishes
	}
	p.seq++
	wb := &warmBox{id: fmt.Sprintf("warm-%s-%d", image, p.seq), image: image, slot: slot,
		made: make(chan struct{}), preloading: make(chan struct{}), done: make(chan struct{}), taken: make(chan struct{})}
	p.boxes[image] = wb
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
	b.mu.Lock()
	delete(b.warm.failures, wb.image)
	delete(b.warm.why, wb.image)
	b.mu.Unlock()
	b.logf("box: warm box %s ready in %d ms, preloaded: %s", wb.id, wb.readyAt.Sub(wb.spawned).Milliseconds(), strings.Join(wb.preloaded, " "))
	close(wb.done)
	go b.watchWarm(wb)
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

// readLine reads one message of the launcher, by deadline.
func (wb *warmBox) readLine(deadline time.Time) (string, error) {
	wb.ctl.SetReadDeadline(deadline)
	defer wb.ctl.SetReadDeadline(time.Time{})
	buf := make([]byte, 64<<10+64)
	n, err := wb.ctl.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// write sends one message to the launcher, by deadline.
func (wb *warmBox) write(msg string, deadline time.Time) error {
	wb.ctl.SetWriteDeadline(deadline)
	defer wb.ctl.SetWriteDeadline(time.Time{})
	if _, err := wb.ctl.Write([]byte(msg)); err != nil {
		return fmt.Errorf("telling the launcher %q: %w", msg, err)
	}
	return nil
}

// watchWarm discards a waiting box that dies (killed, or out of memory)
// before a run takes it; the image runs cold until the next is ready.
func (b *Runner) watchWarm(wb *warmBox) {
	select {
	case <-wb.taken:
	case ws := <-wb.proc.exited:
		b.mu.Lock()
		mine := b.warm.boxes[wb.image] == wb
		if mine {
			delete(b.warm.boxes, wb.image)
		}
		b.mu.Unlock()
		if !mine {
			wb.proc.exited <- ws // taken meanwhile: the run's to collect
			return
		}
		why := fmt.Sprintf("the warm box ended while it waited (%s)", describeStatus(ws))
		wb.err = errors.New(why)
		b.discard(wb, why, true)
		b.replenish(wb.image)
	}
}

// takeWarm takes image's warm box for a run: one that is ready, one
// still starting its python3, or one importing a module of its preload
// that the program imports too (or one listed before such a module),
// which a cold box would import all over again. It waits until by (or
// ctx's end) for the box to exist. It returns nil when there is none to
// take, or the box is importing what the program does not need: the run
// then makes a cold box, and why says why (empty for coldReason's).
func (b *Runner) takeWarm(ctx context.Context, image, code string, by time.Time) (wb *warmBox, why string) {
	b.mu.Lock()
	wb = b.warm.boxes[image]
	b.mu.Unlock()
	if wb == nil {
		return nil, ""
	}
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-wb.made:
	case <-ctx.Done():
		return nil, ""
	case <-t.C:
		return nil, ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.warm.boxes[image] != wb || wb.discarded {
		return nil, ""
	}
	if m := wb.importing; wb.readyAt.IsZero() && m != "" && !needsModule(programImports(code), wb.wanted, m) {
		return nil, fmt.Sprintf("the warm box was still importing %s, which the program does not import: a cold box starts sooner", m)
	}
	delete(b.warm.boxes, image)
	close(wb.taken)
	return wb, ""
}

// importLine finds the modules a line of Python imports: "import a.b as
// c, d" or "from a.b import c, d".
var importLine = regexp.MustCompile(`(?m)^[ \t]*(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import[ \t]+\(?([^#\n]*)|import[ \t]+([^#\n]*))`)

// programImports is what the program's import statements name, at any
// depth: modules, and for "from M import x" both M and M.x. Imports made
// some other way (importlib, __import__) are not seen: such a program may
// run in a cold box where a warm one would have done, and in a warm box a
// preloaded module it reaches that way has lost what it set at import
// (warnings filters; the one documented difference, docs/how-it-works.md).
func programImports(code string) []string {
	var names []string
	for _, m := range importLine.FindAllStringSubmatch(code, -1) {
		if m[1] != "" {
			names = append(names, m[1])
			for _, n := range strings.Split(m[2], ",") {
				if f := strings.Fields(strings.Trim(n, " \t()\\")); len(f) > 0 {
					names = append(names, m[1]+"."+f[0])
				}
			}
			continue
		}
		for _, n := range strings.Split(m[3], ",") {
			if f := strings.Fields(n); len(f) > 0 {
				names = append(names, f[0])
			}
		}
	}
	return names
}

// needsModule says whether a program that imports imports needs module
// current of the preload list wanted to be imported: it imports it, one
// of its submodules, or a module listed after it (the list is in the
// order of their dependencies: numpy before pandas).
func needsModule(imports, wanted []string, current string) bool {
	at := slices.Index(wanted, current)
	if at < 0 {
		return false
	}
	for _, n := range imports {
		for _, p := range wanted[at:] {
			if n == p || strings.HasPrefix(n, p+".") {
				return true
			}
		}
	}
	return false
}

// maxPreloadBytes bounds an image's preload list: a few dozen module
// names.
const maxPreloadBytes = 64 << 10

// readPreloadList reads the preload list of the image mounted at image;
// an image without one has none. A list that is not a plain file of the
// image (imagefs) fails the warm box, and says why.
func readPreloadList(image string) ([]string, error) {
	img, err := imagefs.Open(image)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	b, err := img.ReadFile(wire.ImagePreloadFile, maxPreloadBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the preload list: %w", err)
	}
	var list []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			list = append(list, l)
		}
	}
	return list, nil
}

// coldReason says why a run of image got a cold box, for its receipt.
func (b *Runner) coldReason(image string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &b.warm
	switch {
	case !p.enabled:
		return "warm boxes are off (pybox vm start --warm 0)"
	case p.why[image] != "":
		return p.why[image]
	case p.boxes[image] != nil:
		return "the warm box was not made within the setup's allowance"
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
	if b.warm.boxes[wb.image] == wb {
		delete(b.warm.boxes, wb.image)
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

// handOver gives wb the run's program: its input files, fresh stdout and
// stderr pipes, the code. A box still warming gets the program as soon as
// its interpreter is up, a run's CPU weight, and until by to stop its
// preload at the next module. Then it checks what the launcher holds,
// binds the run's data folders, sets the box's memory limit to what a
// cold box's program could allocate, and tells the launcher to go. Each
// exchange has handOverLimit from its own start. Until "go", nothing of
// the program has run: an error leaves the run free to make a cold box.
func (rn *run) handOver(ctx context.Context, wb *warmBox, by time.Time) (err error) {
	rn.mu.Lock()
	rn.warm, rn.boxID, rn.slot = wb, wb.id, wb.slot
	rn.mu.Unlock()
	rn.cg, rn.st, rn.proc = wb.cg, wb.st, wb.proc
	rn.at.cgroup = time.Now()
	if err := rn.st.addInput(rn.req.Files); err != nil {
		return err
	}
	rn.at.staged = time.Now()
	if err := rn.cg.set("cpu.weight", strconv.Itoa(cpuWeightRun)); err != nil {
		return fmt.Errorf("cpu.weight: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer outW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		return err
	}
	defer errW.Close()
	out, errOut := startCapture(outR, rn.req.MaxOutputBytes), startCapture(errR, rn.req.MaxOutputBytes)
	defer func() {
		if err != nil { // the program's pipes were never the box's
			out.finish(0)
			errOut.finish(0)
		}
	}()
	if err := wb.await(ctx, wb.preloading, by, "did not start its interpreter"); err != nil {
		return err
	}
	select {
	case <-wb.done:
		if wb.err != nil {
			return wb.err
		}
	default:
	}
	if err := wb.sendProgram(rn.req.Code, outW, errW); err != nil {
		return err
	}
	if err := wb.await(ctx, wb.done, by, "did not stop its preload"); err != nil {
		return err
	}
	if wb.err != nil {
		return wb.err
	}
	// The preload's output is done with: a program's starts empty, and
	// the run's cleanup finishes its pipes.
	for name, c := range map[string]*capture{"stdout": rn.proc.stdout, "stderr": rn.proc.stderr} {
		c.finish(0)
		if st, _ := c.stream(); st.Bytes > 0 {
			rn.b.logf("box: warm box %s: the preload printed %d bytes on %s (not the program's)", wb.id, st.Bytes, name)
		}
	}
	rn.proc.stdout, rn.proc.stderr = out, errOut
	line, err := wb.readLine(time.Now().Add(handOverLimit))
	if err != nil {
		return fmt.Errorf("the launcher did not report its descriptors: %v", err)
	}
	if word, rest, _ := strings.Cut(line, " "); word == launcher.Fail {
		return fmt.Errorf("the launcher could not take the program: %s", rest)
	}
	if line != launcher.Fds+" 0,1,2" {
		return fmt.Errorf("the launcher holds more than fds 0-2 (%q)", line)
	}
	if ctx.Err() != nil {
		return errors.New("the run was cancelled")
	}
	// The run's data folders, bound and checked as box-init does for a
	// cold box.
	if len(rn.req.Data) > 0 {
		data := rn.b.dataMounts(rn.req.Data)
		if err := bindData(wb.proc.pid, slotIDs(wb.slot), data); err != nil {
			return fmt.Errorf("binding the data folders: %w", err)
		}
		if problems := checkData(wb.proc.pid, data); len(problems) > 0 {
			return fmt.Errorf("the data folders' posture: %s", strings.Join(problems, "; "))
		}
	}
	// The box becomes the run's: its memory limit is a cold box's plus
	// what the preload holds that the program cannot free (the page
	// cache it read is reclaimable, and not counted), no OOM preference.
	held, err := rn.cg.unreclaimable()
	if err != nil {
		return err
	}
	preload := max(0, held-wb.fresh)
	if err := rn.cg.set("memory.max", strconv.FormatInt(memoryMax+preload, 10)); err != nil {
		return fmt.Errorf("memory.max: %w", err)
	}
	for _, pid := range rn.cg.procs() {
		os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0"), 0)
	}
	rn.cpu0, _ = rn.cg.stats()
	rn.rec.Memory.PreloadBytes, rn.rec.Memory.LimitBytes = preload, memoryMax+preload
	keep := keeps(programImports(rn.req.Code), wb.preloaded)
	if err := wb.write(launcher.Go+" "+strconv.Itoa(keep), time.Now().Add(handOverLimit)); err != nil {
		return err
	}
	rn.go_ = time.Now()
	rn.at.spawned = rn.go_
	wb.ctl.Close()
	rn.rec.Box = &wire.BoxInfo{Warm: true, Preloaded: slices.Clone(wb.preloaded),
		PrepareMS: wb.readyAt.Sub(wb.spawned).Milliseconds(), ReadyMS: rn.go_.Sub(wb.readyAt).Milliseconds(),
		PrepareCPUMS: (rn.cpu0.userUsec + rn.cpu0.systemUsec) / 1000}
	// The next run's box starts warming now, at the warm CPU weight.
	rn.b.replenish(wb.image)
	return nil
}

// await waits for ch (or the box's end), the run's cancel, or by.
func (wb *warmBox) await(ctx context.Context, ch <-chan struct{}, by time.Time, what string) error {
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-ch:
	case <-wb.done:
	case <-ctx.Done():
		return errors.New("the run was cancelled")
	case <-t.C:
		return fmt.Errorf("the warm box %s within the setup's allowance", what)
	}
	return nil
}

// sendProgram sends the code, with the program's stdout and stderr.
func (wb *warmBox) sendProgram(code string, stdout, stderr *os.File) error {
	rights := unix.UnixRights(int(stdout.Fd()), int(stderr.Fd()))
	conn, err := wb.ctl.SyscallConn()
	if err != nil {
		return err
	}
	wb.ctl.SetWriteDeadline(time.Now().Add(handOverLimit))
	defer wb.ctl.SetWriteDeadline(time.Time{})
	var serr error
	if err := conn.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte(launcher.Run+code), rights, nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil || serr != nil {
		return fmt.Errorf("sending the program: %v", errors.Join(err, serr))
	}
	return nil
}

// keeps says how many modules of the preload, in order, the program
// imports itself, by its import statements, directly or through a module
// listed after them (the list is in the order of their dependencies: a
// program that imports pandas needs numpy before it). What those modules
// set at import (warnings filters) stays for the program, as their import
// would have set it in a cold box; the rest goes back to how a fresh
// interpreter has it.
func keeps(imports, preloaded []string) int {
	n := 0
	for i, m := range preloaded {
		for _, name := range imports {
			if name == m || strings.HasPrefix(name, m+".") {
				n = i + 1
			}
		}
	}
	return n
}

// addInput writes a run's input files into a box's existing input/.
func (s *staging) addInput(files []wire.InputFile) error {
	dir := filepath.Join(s.tmp, "input")
	if len(files) == 0 {
		return nil
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeOwned(filepath.Join(dir, f.Name), f.Content, 0o444, s.ids.root); err != nil {
			return fmt.Errorf("input file %q: %w", f.Name, err)
		}
	}
	return os.Chmod(dir, 0o555)
}

// Warm says, for each image, how its warm box is.
func (b *Runner) Warm() []wire.WarmBox {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []wire.WarmBox
	for name := range b.cfg.Images {
		w := wire.WarmBox{Image: name}
		wb := b.warm.boxes[name]
		switch {
		case !b.warm.enabled:
			w.State = "off"
		case wb == nil:
			w.State, w.Reason = "cold", b.warm.why[name]
		case wb.readyAt.IsZero():
			w.State, w.ForMS, w.Importing = "warming", time.Since(wb.spawned).Milliseconds(), wb.importing
		default:
			w.State, w.ForMS, w.Preloaded = "ready", time.Since(wb.readyAt).Milliseconds(), slices.Clone(wb.preloaded)
		}
		if wb != nil && wb.exists() {
			w.MemoryBytes, _ = wb.cg.read("memory.current")
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(x, y wire.WarmBox) int { return strings.Compare(x.Image, y.Image) })
	return out
}

// Close discards every warm box and makes no more: the VM stops.
func (b *Runner) Close() {
	b.mu.Lock()
	b.warm.closed = true
	var boxes []*warmBox
	for _, wb := range b.warm.boxes {
		boxes = append(boxes, wb)
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
	wb := b.warm.boxes[image]
	b.mu.Unlock()
	if wb == nil {
		return fmt.Errorf("image %q has no warm box", image)
	}
	<-wb.made
	b.mu.Lock()
	mine := b.warm.boxes[image] == wb && !wb.discarded
	if mine {
		delete(b.warm.boxes, image)
		close(wb.taken)
	}
	b.mu.Unlock()
	if !mine {
		return fmt.Errorf("image %q's warm box is gone already", image)
	}
	b.discard(wb, "discarded from the console", false)
	b.replenish(image)
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
	wb := b.warm.boxes[image]
	b.mu.Unlock()
	if wb == nil {
		return fmt.Errorf("image %q has no warm box", image)
	}
	<-wb.done
	b.mu.Lock()
	mine := b.warm.boxes[image] == wb && wb.err == nil
	b.mu.Unlock()
	if !mine {
		return fmt.Errorf("image %q's warm box is gone already", image)
	}
	return wb.cg.kill()
}
