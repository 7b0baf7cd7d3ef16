package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"pybox/host/paths"
	"pybox/host/vm"
	"pybox/shared/wire"
)

// startConfig is start.json: what `pybox vm start` asked for.
type startConfig struct {
	Home  string    `json:"home"`
	Accel string    `json:"accel"`
	VM    vm.Config `json:"vm"`
}

// event is one line on the pipe from the supervisor to `pybox vm start`.
type event struct {
	Note  string `json:"note,omitempty"`
	Ready *State `json:"ready,omitempty"`
	Error string `json:"error,omitempty"`
}

// Inherited descriptors of a supervisor (see Start).
const (
	lockFD   = 3 // the VM lock, already taken by the starter
	eventsFD = 4 // progress for the starter; closed once the VM is up
)

// guestGrace is how long QEMU may take to exit after the guest channel
// closed (a powering-off guest) before it is killed.
const guestGrace = 10 * time.Second

// Main is the detached supervisor process (see Start): it boots the VM in
// dir, serves clients until the VM stops, then removes its sockets and
// state. Its stderr is the supervisor log.
func Main(dir string) int {
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	if err := checkInherited(paths.VM{Dir: dir}); err != nil {
		logger.Printf("supervisor: %v", err)
		return 1
	}
	s := &supervisor{
		dir:    paths.VM{Dir: dir},
		logf:   logger.Printf,
		events: os.NewFile(eventsFD, "events"),
	}
	defer s.closeEvents()
	// Neither may leak into QEMU: the lock must end with this process, and
	// the starter must see EOF when this process is gone.
	syscall.CloseOnExec(lockFD)
	syscall.CloseOnExec(eventsFD)
	lock := os.NewFile(lockFD, "lock")
	defer lock.Close()
	if err := s.run(); err != nil {
		s.logf("supervisor: %v", err)
		s.emit(event{Error: err.Error()})
		return 1
	}
	return 0
}

// checkInherited checks that descriptors 3 and 4 are what Start passes:
// the locked lock file of dir, and a pipe.
func checkInherited(d paths.VM) error {
	var fd3, lock, fd4 syscall.Stat_t
	if syscall.Fstat(lockFD, &fd3) != nil || syscall.Stat(d.Lock(), &lock) != nil ||
		fd3.Dev != lock.Dev || fd3.Ino != lock.Ino ||
		syscall.Fstat(eventsFD, &fd4) != nil || fd4.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return errors.New("the supervisor is started by `pybox vm start`, not by hand")
	}
	return nil
}

type supervisor struct {
	dir  paths.VM
	logf func(string, ...any)
	cfg  startConfig
	con  *console

	mu     sync.Mutex
	events *os.File // to the starter, until the VM is up
	relay  *Relay   // the guest's, nil while the VM (re)boots

	stateMu sync.Mutex // state is written by the serving loop and the health check
	state   State
}

// emit tells the starter how the start goes.
func (s *supervisor) emit(e event) {
	if e.Note != "" {
		s.logf("%s", e.Note)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events != nil {
		// The starter may have gone (Ctrl-C): the start goes on regardless.
		json.NewEncoder(s.events).Encode(e)
	}
}

// closeEvents ends the starter's wait.
func (s *supervisor) closeEvents() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events != nil {
		s.events.Close()
		s.events = nil
	}
}

func (s *supervisor) run() error {
	// Everything this process creates (sockets, logs, QEMU's files) is
	// for this user only.
	syscall.Umask(0o077)
	// A crashing QEMU would dump the guest's whole memory as a core file.
	syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	if err := s.dir.Check(); err != nil {
		return err
	}
	defer removeLeftovers(s.dir)
	b, err := os.ReadFile(s.dir.Config())
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &s.cfg); err != nil {
		return fmt.Errorf("reading %s: %w", s.dir.Config(), err)
	}
	if err := s.openFolders(); err != nil {
		return err
	}
	defer s.closeFolders()
	c := s.cfg.VM
	s.state = State{Phase: PhaseBooting, SupervisorPid: os.Getpid(), StartedAt: time.Now().UTC(),
		Arch: c.Arch, Kernel: c.Kernel, Initramfs: c.Initramfs, MemoryMiB: c.MemoryMiB, CPUs: c.CPUs, Images: c.Images, Data: c.Data}
	if err := writeState(s.dir, &s.state); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)

	clog, err := openRotatingLog(s.dir.ConsoleLog(), consoleLogMax)
	if err != nil {
		return err
	}
	defer clog.Close()
	s.con = newConsole(clog)
	defer s.con.closeAll()
	conL, err := listen(s.dir.ConsoleSocket())
	if err != nil {
		return err
	}
	defer conL.Close()
	go s.con.serve(conL)

	m, relay, err := s.boot(ctx, s.cfg.Accel)
	if err != nil {
		return err
	}
	return s.serve(ctx, m, relay)
}

// boot tries each planned accelerator until a guest says hello. The
// data folders are checked first: each boot gives them to the VM anew.
func (s *supervisor) boot(ctx context.Context, accel string) (*vm.Machine, *Relay, error) {
	if err := s.checkFolders(); err != nil {
		return nil, nil, err
	}
	attempts, notes, err := vm.Plan(s.cfg.Home, s.cfg.VM, accel)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range notes {
		s.emit(event{Note: n})
	}
	for i, a := range attempts {
		m, r, err := s.attempt(ctx, a)
		if err == nil {
			return m, r, nil
		}
		if ctx.Err() != nil || !a.Probe || i == len(attempts)-1 {
			return nil, nil, err
		}
		reason := err.Error()
		s.emit(event{Note: fmt.Sprintf("%s does not boot here (%s); using %s", a.Accel, reason, attempts[i+1].Accel)})
		if err := vm.RecordFailure(s.cfg.Home, s.cfg.VM, a, reason); err != nil {
			s.logf("recording the failed %s probe: %v", a.Accel, err)
		}
	}
	return nil, nil, errors.New("no accelerator to try")
}

// attempt starts the VM once and waits for the guest's hello; on any
// failure the VM is killed before it returns.
func (s *supervisor) attempt(ctx context.Context, a vm.Attempt) (*vm.Machine, *Relay, error) {
	c := s.cfg.VM
	s.emit(event{Note: fmt.Sprintf("booting: %s, %s %s, %d CPUs, %d MiB, %s channel", a.Accel, c.Arch, c.Machine, c.CPUs, c.MemoryMiB, c.Channel)})
	s.con.note(fmt.Sprintf("starting the VM (%s, %s) at %s", a.Accel, c.Machine, time.Now().UTC().Format(time.RFC3339)))
	t0 := time.Now()
	m, err := vm.Start(c, a, &lineLogger{logf: s.logf, prefix: "qemu: "})
	if err != nil {
		return nil, nil, err
	}
	go s.con.pump(m.Console)
	hctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	var exited atomic.Bool
	go func() {
		select {
		case <-m.Done():
			exited.Store(true)
			cancel()
		case <-hctx.Done():
		}
	}()
	go s.tellSlowBoot(hctx, t0)
	guest, hello, err := greet(hctx, m)
	if err == nil {
		s.record(m, hello, time.Since(t0))
		r := NewRelay(guest, hello, s.logf)
		r.SetPrepare(s.prepareRun)
		return m, r, nil
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		// The channel broke: most likely QEMU is exiting, and its exit
		// says more than the broken channel.
		select {
		case <-m.Done():
			exited.Store(true)
		case <-time.After(time.Second):
		}
	}
	m.Kill()
	err = bootFailure(ctx, a, m, exited.Load(), err)
	s.con.note("the VM was stopped: " + err.Error())
	return nil, nil, err
}

// bootFailure says why a boot got no hello, in the terms that help most.
func bootFailure(ctx context.Context, a vm.Attempt, m *vm.Machine, exited bool, err error) error {
	switch {
	case ctx.Err() != nil:
		return errors.New("stopped by a signal during boot")
	case exited && m.Err() != nil:
		return fmt.Errorf("the VM exited during boot: %w", m.Err())
	case exited:
		return errors.New("the VM powered off during boot (a kernel panic or a failing /init: see the console log)")
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no hello from the guest within %s", a.Timeout)
	}
	return err
}

// greet connects to the guest channel and does the hello handshake.
func greet(ctx context.Context, m *vm.Machine) (net.Conn, wire.Hello, error) {
	guest, err := m.DialGuest(ctx)
	if err != nil {
		return nil, wire.Hello{}, err
	}
	h, err := Handshake(ctx, guest)
	if err != nil {
		guest.Close()
		return nil, wire.Hello{}, err
	}
	return guest, h, nil
}

// record notes a booted VM in the state.
func (s *supervisor) record(m *vm.Machine, h wire.Hello, boot time.Duration) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	st := &s.state
	st.QEMUPid, st.Accel, st.Machine, st.Channel, st.Sandbox, st.Jail = m.Pid, m.Accel, m.Kind, m.Channel, m.Sandbox, m.Jail
	st.BootMS = boot.Milliseconds()
	st.AgentVersion, st.AgentCommit, st.GuestKernel, st.Capabilities = h.AgentVersion, h.AgentCommit, h.Kernel, h.Capabilities
	st.GuestImages = nil
	for _, im := range h.Images {
		st.GuestImages = append(st.GuestImages, vm.Image{Name: im.Name, Digest: im.Digest})
	}
	s.con.note(fmt.Sprintf("the guest said hello after %d ms: agent %s (%s), kernel %s", st.BootMS, h.AgentVersion, h.AgentCommit, h.Kernel))
	mounted := map[string]string{}
	for _, im := range h.Images {
		mounted[im.Name] = im.Digest
	}
	for _, im := range st.Images {
		if d, ok := mounted[im.Name]; !ok || d != im.Digest {
			s.emit(event{Note: fmt.Sprintf("warning: the guest does not list image %s (%s) as mounted: see `pybox vm logs`", im.Name, im.Digest[:12])})
		}
	}
}

// tellSlowBoot says every 10 s that the boot goes on, so a slow TCG boot
// does not look like a hang.
func (s *supervisor) tellSlowBoot(ctx context.Context, t0 time.Time) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.emit(event{Note: fmt.Sprintf("still booting (%.0f s)", time.Since(t0).Seconds())})
		}
	}
}

// serve relays until the VM stops or a signal asks the supervisor to stop
// it. A guest that stops answering, stops reading or breaks the protocol
// is restarted (at most maxRestarts times in restartWindow), so that
// nobody has to notice it and run `pybox vm stop`.
func (s *supervisor) serve(ctx context.Context, m *vm.Machine, r *Relay) error {
	l, err := listen(s.dir.Socket())
	if err != nil {
		m.Kill()
		r.Close()
		return err
	}
	defer l.Close()
	s.setRelay(r)
	go s.accept(l)
	if err := s.update(func(st *State) { st.Phase = PhaseRunning }); err != nil {
		m.Kill()
		r.Close()
		return err
	}
	s.stateMu.Lock()
	ready := s.state
	s.stateMu.Unlock()
	s.emit(event{Ready: &ready})
	s.closeEvents()
	for {
		why := s.serveVM(ctx, m, r)
		s.setRelay(nil)
		if why != nil {
			r.Abandon(fmt.Errorf("%w; the supervisor restarts the VM", why))
		}
		r.Close()
		m.Kill()
		if why == nil {
			return unasked(r, m)
		}
		if err := s.mayRestart(why); err != nil {
			s.logf("%v", err)
			writeLastExit(s.dir, err.Error())
			return err
		}
		s.logf("restarting the VM: %v", why)
		s.con.note("restarting the VM: " + why.Error())
		s.update(func(st *State) { st.Phase, st.Health = PhaseRestarting, "restarting: "+why.Error() })
		if m, r, err = s.boot(ctx, s.accel()); err != nil {
			if ctx.Err() == nil {
				writeLastExit(s.dir, "the VM could not be restarted: "+err.Error())
			}
			return fmt.Errorf("restarting the VM: %w", err)
		}
		s.update(func(st *State) { st.Phase, st.Health = PhaseRunning, "" })
		s.setRelay(r)
	}
}

// serveVM relays for one boot of the VM. It returns nil when the VM is
// to stay stopped (it powered off, or was stopped by a signal), and why
// otherwise: the guest must be restarted.
func (s *supervisor) serveVM(ctx context.Context, m *vm.Machine, r *Relay) error {
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.ReadGuest() }()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wedged := make(chan error, 1)
	go func() { wedged <- s.watch(wctx, r, m) }()

	select {
	case <-m.Done():
		s.logf("the VM exited: %v", orClean(m.Err()))
		return nil
	case err := <-relayDone:
		if vmExited(m) {
			// QEMU died and took the channel with it (a reset as often as
			// an end): its exit, not the broken channel, says what
			// happened, and a VM that ended by itself is not restarted.
			s.logf("the guest channel ended (%v), and the VM exited: %v", err, orClean(m.Err()))
			return nil
		}
		if !errors.Is(err, io.EOF) {
			// A guest that breaks the protocol is not trusted with
			// another frame; one that does not read is wedged.
			s.logf("%v: stopping the VM", err)
			return err
		}
		s.logf("%v: waiting up to %s for the VM to exit", err, guestGrace)
	case err := <-wedged:
		s.logf("%v: stopping the VM", err)
		return err
	case <-ctx.Done():
		s.logf("signal: shutting the guest down")
		if err := r.Shutdown(); err != nil {
			s.logf("shutdown: %v", err)
		}
	}
	select {
	case <-m.Done():
		s.logf("the VM exited: %v", orClean(m.Err()))
	case <-time.After(guestGrace):
		s.logf("the VM did not exit within %s: killing it", guestGrace)
	}
	return nil
}

// exitGrace is how long a broken guest channel waits to see whether the
// VM is exiting, before the channel's break is taken for the guest's.
const exitGrace = time.Second

// vmExited reports whether the VM process has exited, or does within
// exitGrace.
func vmExited(m *vm.Machine) bool {
	select {
	case <-m.Done():
		return true
	case <-time.After(exitGrace):
		return false
	}
}

// unasked is the supervisor's verdict on a VM that stays stopped: nil when
// it was asked to stop (`pybox vm stop`, a signal), an error when it ended
// by itself (QEMU died, the guest powered off after a fatal error). The
// error makes the supervisor's exit status 1, as giving up on restarting
// a wedged guest does, which `pybox vm start --foreground` passes on: a
// service manager restarts a VM that failed but not one that was stopped.
func unasked(r *Relay, m *vm.Machine) error {
	if r.Stopping() {
		return nil
	}
	return fmt.Errorf("the VM ended without being asked to stop (%v)", orClean(m.Err()))
}

// Health checks of the guest by its supervisor.
const (
	pingEvery = 5 * time.Second
	pingLimit = 5 * time.Second
	// missLimit pings in a row unanswered, each within pingLimit, make
	// the guest wedged: about 25 s of silence.
	missLimit = 4
	// From silentAfter misses on, runs are refused at once rather than
	// sent to a guest that does not answer.
	silentAfter = 2
	// At most maxRestarts restarts in restartWindow; past that the
	// supervisor stops the VM for good and says why.
	maxRestarts   = 3
	restartWindow = 10 * time.Minute
)

// watch pings the guest until ctx ends, keeping the state's health up to
// date, and steering the guest's memory where the VM has a balloon to
// drive; it returns an error wrapping ErrWedged once missLimit pings in a
// row went unanswered.
func (s *supervisor) watch(ctx context.Context, r *Relay, m *vm.Machine) error {
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	mem := newBalloon(s.cfg.VM.MemoryMiB, time.Now())
	r.SetBeforeRun(func() {
		target, change := mem.run(time.Now())
		s.setTarget(mem, m, target, change)
	})
	misses, since := 0, time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, pingLimit)
		st, err := r.Ping(pctx)
		cancel()
		if err == nil {
			s.steer(mem, m, st)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil && misses > 0:
			s.logf("the guest answers again after %d unanswered pings", misses)
			misses = 0
			r.SetSilent("")
			s.update(func(st *State) { st.Health = "" })
		case err != nil:
			if misses == 0 {
				since = time.Now()
			}
			misses++
			health := fmt.Sprintf("not answering since %s (%d pings in a row unanswered within %v: %v)",
				since.UTC().Format(time.RFC3339), misses, pingLimit, err)
			s.logf("the guest is %s", health)
			s.update(func(st *State) { st.Health = health })
			if misses >= silentAfter {
				r.SetSilent(health)
			}
			if misses >= missLimit {
				return fmt.Errorf("%w: %d pings in a row unanswered within %v since %s", ErrWedged, misses, pingLimit, since.UTC().Format(time.RFC3339))
			}
		}
	}
}

// mayRestart records a restart for why, or says why there is none: too
// many restarts lately.
func (s *supervisor) mayRestart(why error) error {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	recent := 0
	for _, r := range s.state.Restarts {
		if time.Since(r.At) < restartWindow {
			recent++
		}
	}
	if recent >= maxRestarts {
		return fmt.Errorf("the VM was stopped: its guest had to be restarted %d times in %v and failed again (%v); "+
			"see `pybox vm logs`, then start it with `pybox vm start`", recent, restartWindow, why)
	}
	s.state.Restarts = append(s.state.Restarts, Restart{At: time.Now().UTC(), Reason: why.Error()})
	if len(s.state.Restarts) > maxRestarts*2 {
		s.state.Restarts = s.state.Restarts[len(s.state.Restarts)-maxRestarts*2:]
	}
	return nil
}

// accel is the accelerator the VM booted with; a restart uses it again.
func (s *supervisor) accel() string {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	return s.state.Accel
}

// update changes the state and writes state.json.
func (s *supervisor) update(f func(st *State)) error {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	f(&s.state)
	return writeState(s.dir, &s.state)
}

func (s *supervisor) setRelay(r *Relay) {
	s.mu.Lock()
	s.relay = r
	s.mu.Unlock()
}

// accept hands each client to the current guest's relay; while the VM
// restarts, a client is told so and let go.
func (s *supervisor) accept(l net.Listener) {
	for {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		r := s.relay
		s.mu.Unlock()
		if r != nil {
			r.admit(nc)
			continue
		}
		c := newPeer(nc, s.logf)
		c.send(errorMessage(wire.ErrUnhealthy, "the VM is restarting (its guest stopped answering); try again in a minute, "+
			"or see `pybox vm status`", wire.NothingRan()))
		go c.closeAfterSend()
	}
}

func orClean(err error) any {
	if err == nil {
		return "cleanly"
	}
	return err
}

func listen(path string) (net.Listener, error) {
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The directory is 0700 already; the socket's own mode says the same.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// lineLogger logs what is written to it (QEMU's stderr) line by line.
type lineLogger struct {
	logf   func(string, ...any)
	prefix string
	buf    []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if line := bytes.TrimSpace(w.buf[:i]); len(line) > 0 {
			w.logf("%s%s", w.prefix, line)
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 4096 {
		w.logf("%s%s", w.prefix, w.buf)
		w.buf = nil
	}
	return len(p), nil
}
