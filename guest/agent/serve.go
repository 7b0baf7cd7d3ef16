package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// shutdownGrace bounds how long shutdown waits for a cancelled run to
// clean up and send its receipt before the VM goes off.
const shutdownGrace = 10 * time.Second

// Serve answers the frames on one connection until it ends, then closes
// it. It returns why the connection was dropped, or nil when the host
// closed it. A run started on the connection is cancelled when it ends:
// its receipt would have nowhere to go.
//
// A frame that cannot be read (too large, empty, cut off) leaves the
// stream at an unknown place: no resynchronisation is possible, so the
// connection is dropped. A frame that is read but not understood is
// answered with a protocol error and the connection goes on, except a
// stream frame (handleNet), which is never answered.
func (a *Agent) Serve(rwc io.ReadWriteCloser) error {
	c := &conn{rwc: rwc, name: nameOf(rwc), timeout: a.cfg.WriteTimeout, logf: a.cfg.Logf}
	a.opened()
	a.logf("agent: %s: serving", c)
	defer a.closed(c)
	helloed := false
	for {
		p, err := frame.Read(rwc)
		if errors.Is(err, io.EOF) {
			a.logf("agent: %s: closed by the host", c)
			return nil
		}
		if err != nil {
			a.logf("agent: %s: dropped: %v", c, err)
			return err
		}
		m, err := wire.Decode(p)
		if errors.Is(err, wire.ErrLegacy) {
			a.refuseLegacy(c, p)
			continue
		}
		if err != nil {
			c.sendError(idOf(p), wire.ErrProtocol, err.Error())
			continue
		}
		if m.Type != wire.TypeHello && !helloed {
			c.sendError(m.ID, wire.ErrProtocol, "send hello first: every connection starts with a hello")
			continue
		}
		switch m.Type {
		case wire.TypeHello:
			helloed = a.handleHello(c, m)
		case wire.TypePing:
			st := a.status()
			c.send(&wire.Message{Type: wire.TypePong, ID: m.ID, Status: &st})
		case wire.TypeRun:
			a.handleRun(c, m.ID, m.Run)
		case wire.TypeNetData, wire.TypeNetWindow, wire.TypeNetClose:
			a.handleNet(c, m)
		case wire.TypeNetOpen:
			// Not answered: an answer would carry the run's ID, and the
			// host would take it for the run's.
			a.logf("agent: %s: net_open for message %d: a host does not open streams: dropped", c, m.ID)
		case wire.TypeCancel:
			a.cancel(m.Cancel.RunID)
			c.send(&wire.Message{Type: wire.TypeOK, ID: m.ID})
		case wire.TypeShutdown:
			c.send(&wire.Message{Type: wire.TypeOK, ID: m.ID})
			a.shutdown()
			return nil
		default:
			c.sendError(m.ID, wire.ErrProtocol, fmt.Sprintf("a host does not send %q messages", m.Type))
		}
	}
}

// refuseLegacy answers a host from an older pybox, in its own framing,
// so that it can say which side to rebuild.
func (a *Agent) refuseLegacy(c *conn, p []byte) {
	old, ok := wire.LegacyHello(p)
	if !ok || old.Type != wire.TypeHello {
		a.logf("agent: %s: a frame in an older framing that is no hello: ignored", c)
		return
	}
	a.logf("agent: %s: hello from a host of protocol %d: refused", c, old.Hello.Protocol)
	c.sendPayload(wire.EncodeLegacyRefusal(old.ID, fmt.Sprintf(
		"the host speaks protocol %d and this agent speaks %d: use a pybox and a guest from the same release (rebuild with `make`, or install both from one bundle)",
		old.Hello.Protocol, wire.ProtocolVersion)), wire.TypeError, old.ID)
}

// handleHello answers a hello; it may come again at any time (a new host
// on the same long-lived stream) and is answered each time.
func (a *Agent) handleHello(c *conn, m *wire.Message) bool {
	if m.Hello.Protocol != wire.ProtocolVersion {
		c.sendError(m.ID, wire.ErrProtocol, fmt.Sprintf(
			"the host speaks protocol %d and this agent speaks %d: use a pybox and a guest from the same release",
			m.Hello.Protocol, wire.ProtocolVersion))
		return false
	}
	a.logf("agent: %s: hello (protocol %d)", c, m.Hello.Protocol)
	h := a.hello
	c.send(&wire.Message{Type: wire.TypeHello, ID: m.ID, Hello: &h})
	return true
}

// handleRun checks a run and starts it, or answers why not. It is the
// guest's one check of a run: every rule of the contract, through
// wire.Run.Check (its input files' among them), then what only this VM
// can say (its images, its data folders, whether it takes runs now, and
// whether its memory fits beside the runs in progress: Runner.Admit).
// The box takes what passes as given. Nothing is queued: a run that does
// not fit is refused at once.
func (a *Agent) handleRun(c *conn, id uint64, r *wire.Run) {
	var e *wire.Error
	if err := r.Check(); err != nil {
		e = &wire.Error{Code: wire.ErrBadRequest, Message: err.Error()}
	} else if _, ok := a.images[r.Image]; !ok {
		e = &wire.Error{Code: wire.ErrNoImage, Message: fmt.Sprintf("image %q is not in this VM; it has: %s", r.Image, a.imageList())}
	} else if missing := a.missingData(r); missing != "" {
		e = &wire.Error{Code: wire.ErrNoData, Message: fmt.Sprintf("data folder %q is not in this VM; it has: %s", missing, a.dataList())}
	} else {
		e = a.start(c, id, r)
	}
	if e != nil {
		// Nothing of this run was made, and the host should say so.
		e.Cleanup = wire.NothingRan()
		c.send(&wire.Message{Type: wire.TypeError, ID: id, Error: e})
	}
}

// missingData is the first data folder r names that the VM lacks, or "".
func (a *Agent) missingData(r *wire.Run) string {
	for _, d := range r.Data {
		if !slices.Contains(a.hello.Data, d.Name) {
			return d.Name
		}
	}
	return ""
}

func (a *Agent) dataList() string {
	if len(a.hello.Data) == 0 {
		return "none (start the VM with --data NAME=DIR)"
	}
	return strings.Join(a.hello.Data, ", ")
}

func (a *Agent) imageList() string {
	if len(a.hello.Images) == 0 {
		return "none (start the VM with at least one image)"
	}
	names := make([]string, len(a.hello.Images))
	for i, img := range a.hello.Images {
		names[i] = img.Name
	}
	return strings.Join(names, ", ")
}

// start admits r and starts it, or says why it cannot.
func (a *Agent) start(c *conn, id uint64, r *wire.Run) *wire.Error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.stopping:
		return &wire.Error{Code: wire.ErrNoVM, Message: "the VM is shutting down"}
	case a.broken != nil:
		return &wire.Error{Code: wire.ErrUnhealthy, Message: a.broken.Error()}
	case a.runs[r.RunID] != nil:
		return &wire.Error{Code: wire.ErrBusy, Message: fmt.Sprintf(
			"run %s is in progress already; nothing was queued", r.RunID)}
	}
	if err := a.cfg.Runner.Admit(r); err != nil {
		code := wire.ErrUnhealthy
		if nm, ok := err.(noMemory); ok && nm.NoMemory() {
			code = wire.ErrNoMemory
		}
		a.logf("agent: run %s refused: %v", r.RunID, err)
		return &wire.Error{Code: code, Message: err.Error()}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if i := slices.Index(a.precancel, r.RunID); i >= 0 {
		// The cancel overtook its run: the run starts cancelled.
		a.precancel = slices.Delete(a.precancel, i, i+1)
		cancel()
	}
	ar := &activeRun{id: r.RunID, image: r.Image, conn: c, msgID: id, cancel: cancel,
		started: time.Now(), done: make(chan struct{})}
	if a.cfg.SetClock != nil {
		var err error
		if ar.clock, err = syncClock(r.HostTimeNS, time.Now, a.cfg.SetClock); err != nil {
			a.logf("agent: run %s: the clock is %.1f ms off the host's and could not be set: %v", r.RunID, ar.clock.OffsetMS, err)
		} else if ar.clock != nil && ar.clock.Stepped {
			a.logf("agent: run %s: the clock was %.1f ms off the host's: set to the host's", r.RunID, ar.clock.OffsetMS)
		}
	}
	if r.Net {
		ar.net = newNetRun(c, id, r.RunID, a.cfg.Logf)
	}
	a.runs[r.RunID] = ar
	a.idle.started()
	a.logf("agent: run %s started (image %s, timeout %gs; %d in progress)", r.RunID, r.Image, r.TimeoutSeconds, len(a.runs))
	go a.run(ctx, ar, id, r)
	return nil
}

// run runs r in the box and sends its receipt to the connection it came
// from. The run stops being in progress before the receipt is sent, so
// the host may start the next run as soon as it has the receipt.
//
// A watchdog bounds the whole run: every phase of the box keeps to its
// own allowance, so it fires only on a bug or a kernel that does not let
// go. It then tears the box down (Runner.Abort) and answers the host
// with what it could confirm; the run keeps its room until Run returns.
//
// A run that opens the network has its streams ended (netRun.closeAll)
// before its answer, however it ended, so that every frame of its
// streams precedes the answer on the connection.
func (a *Agent) run(ctx context.Context, ar *activeRun, id uint64, r *wire.Run) {
	defer close(ar.done)
	ended := make(chan runOutcome, 1)
	// Delivered output goes to the connection the run came from, as
	// output messages answering the run's own id, before its receipt.
	emit := func(o *wire.OutputChunk) error {
		return ar.conn.send(&wire.Message{Type: wire.TypeOutput, ID: id, Output: o})
	}
	var conns func(net.Conn) bool // nil unless the run opens the network
	if ar.net != nil {
		conns = ar.net.take
	}
	go func() {
		res, err := a.runBox(ctx, r, emit, conns)
		ended <- runOutcome{res, err}
	}()
	watchdog := time.NewTimer(a.cfg.Watchdog(r))
	defer watchdog.Stop()
	var o runOutcome
	select {
	case o = <-ended:
	case <-watchdog.C:
		ar.cancel()
		o.err = a.abort(r, ended)
	}
	ar.cancel()
	if ar.net != nil {
		ar.net.closeAll()
	}
	if o.res != nil {
		o.res.Receipt.Agent.Clock = ar.clock
	}
	a.finish(ar, o.res, o.err)
	if o.err != nil {
		ar.conn.send(&wire.Message{Type: wire.TypeError, ID: id, Error: o.err})
		return
	}
	ar.conn.sendResult(id, o.res)
}

// runOutcome is what the runner gave for a run.
type runOutcome struct {
	res *wire.Result
	err *wire.Error
}

// abort is the watchdog's answer for a run that overran its bound. It
// stays listed as stuck until the runner lets go of it (ended).
func (a *Agent) abort(r *wire.Run, ended <-chan runOutcome) *wire.Error {
	a.logf("agent: run %s: past its bound of %v (%s): the watchdog tears its box down", r.RunID, a.cfg.Watchdog(r), describe(a.cfg.Runner.Runs(), r.RunID))
	cl := a.cfg.Runner.Abort(r.RunID)
	a.logf("agent: run %s: watchdog: cleanup %s (%s)", r.RunID, cl.Status, cl.Detail)
	a.mu.Lock()
	a.stuck[r.RunID] = true
	a.mu.Unlock()
	go func() {
		t0 := time.Now()
		o := <-ended
		a.mu.Lock()
		delete(a.stuck, r.RunID)
		a.mu.Unlock()
		status := "error"
		if o.res != nil {
			status = o.res.Receipt.Status + ", cleanup " + o.res.Receipt.Cleanup.Status
		}
		a.logf("agent: run %s let go %v after the watchdog: %s", r.RunID, time.Since(t0).Round(time.Millisecond), status)
	}()
	return &wire.Error{Code: wire.ErrInternal, Message: fmt.Sprintf(
		"run %s overran its bound of %v; the agent's watchdog tore its box down", r.RunID, a.cfg.Watchdog(r)), Cleanup: &cl}
}

// describe says where a run is, for a log line.
func describe(runs []wire.RunProgress, runID string) string {
	for _, p := range runs {
		if p.RunID == runID {
			return fmt.Sprintf("in phase %s for %d ms, %d ms since its request", p.Phase, p.PhaseMS, p.RunMS)
		}
	}
	return "no longer in progress"
}

// health is "healthy" while the agent takes runs, else why it refuses
// them or what holds part of it: a box set aside, a run torn down by the
// watchdog that the box code has not let go of. Those two keep their
// own room out of use; other runs go on.
func (a *Agent) health(aside []string) string {
	a.mu.Lock()
	broken := a.broken
	var stuck []string
	for id := range a.stuck {
		stuck = append(stuck, id)
	}
	a.mu.Unlock()
	switch {
	case broken != nil:
		return broken.Error()
	case len(stuck) > 0:
		slices.Sort(stuck)
		return fmt.Sprintf("run %s overran its bound and was torn down, but the box code has not let go of it yet; "+
			"its memory stays held until it does, other runs go on (the console's status and log say more; `pybox vm stop` and `pybox vm start` end it)", strings.Join(stuck, ", "))
	case len(aside) > 0:
		return fmt.Sprintf("%d box(es) set aside: their cleanup left something behind, kept out of use; other runs go on", len(aside))
	}
	return "healthy"
}

// status is what a pong carries.
func (a *Agent) status() wire.AgentStatus {
	r := a.cfg.Runner
	aside := r.SetAside()
	st := wire.AgentStatus{Health: a.health(aside), Runs: r.Runs(), Room: r.Room(), SetAside: aside, Warm: r.Warm()}
	if a.cfg.Files != nil {
		if m, err := readMemory(a.cfg.Files); err == nil {
			for _, w := range st.Warm {
				m.Warm += w.MemoryBytes
			}
			st.Memory = m
		}
	}
	return st
}

// runBox calls the runner and turns a panic in it into an error: PID 1
// must outlive a bug in the box code. After a panic the box's state is
// unknown, so the agent refuses further runs.
func (a *Agent) runBox(ctx context.Context, r *wire.Run, emit func(*wire.OutputChunk) error, conns func(net.Conn) bool) (res *wire.Result, e *wire.Error) {
	defer func() {
		if p := recover(); p != nil {
			a.logf("agent: run %s: the box panicked: %v\n%s", r.RunID, p, debug.Stack())
			a.mu.Lock()
			a.broken = fmt.Errorf("the box code panicked in run %s; restart the VM (pybox vm stop; pybox vm start)", r.RunID)
			a.mu.Unlock()
			e = &wire.Error{Code: wire.ErrInternal, Message: fmt.Sprintf("the box panicked: %v", p),
				Cleanup: &wire.Cleanup{Status: wire.CleanupFailed, Detail: "the box's state is unknown after a panic"}}
		}
	}()
	res = a.cfg.Runner.Run(ctx, r, emit, conns)
	if res == nil {
		return nil, &wire.Error{Code: wire.ErrInternal, Message: "the box returned no result",
			Cleanup: wire.Unknown("the box returned no result, so nothing says whether its box is gone")}
	}
	return res, nil
}

// handleNet passes a stream frame from the host to the run it addresses:
// the run in progress whose request came on c with the frame's ID. It
// never waits (netRun.handle). A frame for no run in progress is dropped:
// the run has just ended, and frames cross its receipt. One for a run that
// does not open the network is logged and dropped, not answered: an
// answer would carry the run's ID, and the host would take it for the
// run's.
func (a *Agent) handleNet(c *conn, m *wire.Message) {
	var ar *activeRun
	a.mu.Lock()
	for _, r := range a.runs {
		if r.conn == c && r.msgID == m.ID {
			ar = r
			break
		}
	}
	a.mu.Unlock()
	switch {
	case ar == nil:
	case ar.net == nil:
		a.logf("agent: %s: %s for run %s, which does not open the network: dropped", c, m.Type, ar.id)
	default:
		ar.net.handle(m)
	}
}

// finish records a run and clears it from the runs in progress.
func (a *Agent) finish(ar *activeRun, res *wire.Result, e *wire.Error) {
	rec := record{id: ar.id, image: ar.image, ended: time.Now()}
	if res != nil {
		rec.status, rec.cleanup, rec.wallMS = res.Receipt.Status, res.Receipt.Cleanup.Status, res.Receipt.WallMS
	} else {
		rec.status, rec.cleanup = "error: "+e.Code, wire.CleanupUnknown
		if e.Cleanup != nil {
			rec.cleanup = e.Cleanup.Status
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.runs, ar.id)
	if len(a.runs) == 0 {
		a.idle.ended()
	}
	if res != nil {
		a.last = res
	}
	a.history = append(a.history, rec)
	if len(a.history) > keepRuns {
		a.history = slices.Delete(a.history, 0, len(a.history)-keepRuns)
	}
	a.logf("agent: run %s finished: %s, cleanup %s, %d ms", rec.id, rec.status, rec.cleanup, rec.wallMS)
}

// cancel stops the run with this id. A cancel for a finished run does
// nothing; one for a run not seen yet is remembered (a few of them), so
// the run starts cancelled if it comes after its cancel.
func (a *Agent) cancel(runID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ar := a.runs[runID]; ar != nil {
		a.logf("agent: run %s: cancelled by the host", runID)
		ar.cancel()
		return
	}
	for _, r := range a.history {
		if r.id == runID {
			return
		}
	}
	if !slices.Contains(a.precancel, runID) {
		a.precancel = append(a.precancel, runID)
	}
	if len(a.precancel) > keepPrecancels {
		a.precancel = slices.Delete(a.precancel, 0, len(a.precancel)-keepPrecancels)
	}
}

// shutdown refuses new runs, cancels those in progress, gives them a
// moment to clean up and send their receipts, then powers off.
func (a *Agent) shutdown() {
	a.mu.Lock()
	a.stopping = true
	var runs []*activeRun
	for _, ar := range a.runs {
		runs = append(runs, ar)
	}
	a.mu.Unlock()
	a.logf("agent: shutdown requested")
	for _, ar := range runs {
		ar.cancel()
	}
	grace := time.After(shutdownGrace)
	for _, ar := range runs {
		select {
		case <-ar.done:
		case <-grace:
			a.logf("agent: run %s did not end within %v; powering off anyway", ar.id, shutdownGrace)
		}
	}
	a.cfg.Runner.Close()
	a.cfg.PowerOff()
}

func (a *Agent) opened() {
	a.mu.Lock()
	a.open++
	a.served++
	a.mu.Unlock()
}

// closed ends a connection and cancels the runs whose receipts it awaited.
func (a *Agent) closed(c *conn) {
	c.close()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.open--
	for _, ar := range a.runs {
		if ar.conn == c {
			a.logf("agent: run %s: cancelled: its connection %s closed", ar.id, c)
			ar.cancel()
		}
	}
}

// idOf finds the id of a message that did not decode, so that the error
// goes back with it when it can.
func idOf(p []byte) uint64 {
	_, id, _ := wire.Peek(p)
	return id
}

func nameOf(rwc io.ReadWriteCloser) string {
	if s, ok := rwc.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", rwc)
}

// conn is one connection to the host. Writes are serialized: a receipt
// from a run's goroutine and a pong from the serving loop never
// interleave their bytes.
type conn struct {
	rwc     io.ReadWriteCloser
	name    string
	timeout time.Duration
	logf    func(string, ...any)

	mu        sync.Mutex // held for a whole frame write
	closeOnce sync.Once
	closed    atomic.Bool
}

func (c *conn) String() string { return c.name }

func (c *conn) sendError(id uint64, code, msg string) {
	c.send(&wire.Message{Type: wire.TypeError, ID: id, Error: &wire.Error{Code: code, Message: msg}})
}

// sendResult sends a receipt; one too large for a frame (the box is
// meant to prevent that) still reports its run's cleanup status.
func (c *conn) sendResult(id uint64, res *wire.Result) {
	err := c.send(&wire.Message{Type: wire.TypeReceipt, ID: id, Result: res})
	if errors.Is(err, frame.ErrTooLarge) {
		cl := res.Receipt.Cleanup
		c.send(&wire.Message{Type: wire.TypeError, ID: id, Error: &wire.Error{Code: wire.ErrInternal,
			Message: fmt.Sprintf("the receipt of run %s is larger than a frame; it was not sent", res.Receipt.RunID),
			Cleanup: &cl}})
	}
}

// send writes one message. A host that does not take it within the write
// timeout is taken to be gone: the connection is closed.
func (c *conn) send(m *wire.Message) error {
	p, err := wire.Encode(m)
	if err != nil {
		c.logf("agent: %s: encode %s: %v", c, m.Type, err)
		return err
	}
	return c.sendPayload(p, m.Type, m.ID)
}

// sendPayload writes one encoded message, of type typ and ID id.
func (c *conn) sendPayload(p []byte, typ string, id uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		c.logf("agent: %s: %s %d not sent: the connection is closed", c, typ, id)
		return io.ErrClosedPipe
	}
	d, canDeadline := c.rwc.(interface{ SetWriteDeadline(time.Time) error })
	if canDeadline {
		d.SetWriteDeadline(time.Now().Add(c.timeout))
	}
	err := frame.Write(c.rwc, p)
	if canDeadline {
		d.SetWriteDeadline(time.Time{})
	}
	if err != nil && !errors.Is(err, frame.ErrTooLarge) {
		c.logf("agent: %s: dropped: writing %s: %v", c, typ, err)
		c.close()
	} else if err != nil {
		c.logf("agent: %s: %s %d not sent: %v", c, typ, id, err)
	}
	return err
}

// close closes the connection once. It does not wait for the write lock:
// closing is what unblocks a write stuck on a host that does not read.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.rwc.Close()
	})
}
