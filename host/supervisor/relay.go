package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// Bounds on what clients may hold in the supervisor, and on how long it
// waits for the guest.
const (
	maxClients       = 32
	maxPending       = 16 // requests in flight per client
	maxPendingAll    = 256
	clientQueue      = maxPending + 4
	clientWriteLimit = 10 * time.Second // a client that does not read for this long is dropped
	// requestLimit is how long an answer to anything but a run may take;
	// a run's is wire.HostDeadline of its timeout.
	requestLimit = 30 * time.Second
	sweepEvery   = time.Second
)

// helloLimit is how long a new connection may take to say hello: one
// that says nothing would hold one of maxClients for nobody. (A variable
// for the tests.)
var helloLimit = 5 * time.Second

// guestWriteLimit: a guest that does not take a frame for this long is
// wedged; the frame may be half written, so the channel is closed. (A
// variable for the tests.)
var guestWriteLimit = 10 * time.Second

// answers says which replies the guest may give to each request type.
var answers = map[string][]string{
	wire.TypePing:     {wire.TypePong},
	wire.TypeRun:      {wire.TypeReceipt},
	wire.TypeCancel:   {wire.TypeOK},
	wire.TypeShutdown: {wire.TypeOK},
	wire.TypeHello:    {wire.TypeHello},
}

// Relay carries frames between host clients and the guest. Each request a
// client sends gets a new, supervisor-wide ID on its way to the guest, so
// that clients can pick their IDs freely; the guest's answer goes back to
// the client that asked, under the client's own ID.
type Relay struct {
	guest net.Conn
	hello wire.Hello // the guest's hello: every client's hello is answered with it
	logf  func(format string, args ...any)

	wmu sync.Mutex // serializes frames to the guest

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]*pending
	clients  map[*peer]bool
	gone     error // why the guest can take no more requests (stopped, stopping)
	dropped  int   // answers nobody asked for, for log throttling
	stopping bool
	ran      chan struct{} // closed once ReadGuest has answered what was in flight
	// silent is set by the supervisor's health check while the guest
	// does not answer its pings: runs are refused at once meanwhile.
	silent string
	// netDropped counts clients' stream frames for no run of theirs in
	// flight: mostly a stream's last words after the run's receipt.
	netDropped int
	// prepare, when set, checks the data folders a run names before it
	// is sent, and returns the host's record of each for the run's
	// receipt. It is given the run's header: the relay reads no run's
	// body. Runs of several clients may be prepared at once: it reads
	// the folders and changes nothing.
	prepare func(*wire.RunHeader) ([]wire.DataFolder, *wire.Error)
	// beforeRun, when set, is called before each run is sent: the
	// supervisor gives the guest back any memory its balloon holds, so
	// that the guest's admission and the host agree.
	beforeRun func()
}

// SetPrepare sets what readies a run that names data folders (see
// Relay.prepare).
func (r *Relay) SetPrepare(f func(*wire.RunHeader) ([]wire.DataFolder, *wire.Error)) { r.prepare = f }

// SetBeforeRun sets what is called before each run is sent (see
// Relay.beforeRun).
func (r *Relay) SetBeforeRun(f func()) {
	r.mu.Lock()
	r.beforeRun = f
	r.mu.Unlock()
}

// pending is a request on its way through the guest.
type pending struct {
	// c is nil when the supervisor asked, or the client left: leave
	// clears it under Relay.mu, so it is read under that lock while p is
	// in Relay.pending. Whoever takes p out of the table (under the
	// lock) may read it freely: leave no longer sees p.
	c       *peer
	id      uint64 // the client's ID
	typ     string
	runID   string
	expires time.Time
	deliver bool // a run that asked for its output streamed (Run.Deliver)
	// net is a run that may carry streams (Run.Net), and nq what it has
	// queued of them for its client.
	net bool
	nq  *netQueue
	// data is the host's record of the data folders a run names, put
	// before its receipt, for the client to put there (wire.HostFacts).
	data []wire.DataFolder
	// reply, when set, takes the answer instead of a client: the
	// supervisor's own requests (its health pings).
	reply chan *wire.Message
}

// newPending is a request of type typ and the client's ID id from c, with
// its expiry; run is the request's run header, for a run.
func newPending(c *peer, typ string, id uint64, run *wire.RunHeader) *pending {
	p := &pending{c: c, id: id, typ: typ, expires: time.Now().Add(requestLimit)}
	if run != nil {
		p.runID = run.RunID
		p.expires = time.Now().Add(runExpiry(run))
		p.deliver = run.Deliver != nil
		if run.Net {
			p.net, p.nq = true, &netQueue{}
		}
	}
	return p
}

// runExpiry is how long the relay waits for a run's receipt: the run's
// own HostDeadline, from the timeout and delivery its header gives, but
// never longer than that of the longest run the product allows. The
// relay does not check runs (the client did, and the guest does), so the
// header's timeout is only the client's word; the run goes to the guest
// as it came, and only the relay's own wait is bounded.
func runExpiry(run *wire.RunHeader) time.Duration {
	t := run.TimeoutSeconds
	if !(t > 0) { // NaN too
		t = 0
	}
	bounded := wire.Run{TimeoutSeconds: min(t, wire.MaxTimeoutSeconds), Deliver: run.Deliver}
	return bounded.HostDeadline()
}

// NewRelay relays for a guest that has said hello.
func NewRelay(guest net.Conn, hello wire.Hello, logf func(string, ...any)) *Relay {
	return &Relay{
		guest:   guest,
		hello:   hello,
		logf:    logf,
		pending: map[uint64]*pending{},
		clients: map[*peer]bool{},
		ran:     make(chan struct{}),
	}
}

// Handshake sends the host's hello on a fresh guest channel and waits for
// the guest's, until ctx ends.
func Handshake(ctx context.Context, guest net.Conn) (wire.Hello, error) {
	if dl, ok := ctx.Deadline(); ok {
		guest.SetDeadline(dl)
		defer guest.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { guest.SetDeadline(time.Now()) })
	defer stop()
	if err := writeMessage(guest, &wire.Message{Type: wire.TypeHello, ID: 1, Hello: &wire.Hello{Protocol: wire.ProtocolVersion}}); err != nil {
		return wire.Hello{}, fmt.Errorf("sending hello to the guest: %w", err)
	}
	p, err := frame.Read(guest)
	var m *wire.Message
	if err == nil {
		m, err = wire.Decode(p)
	}
	const rebuild = "its initramfs is not this pybox's (`pybox version` shows which it boots): " +
		"install the guest files of this pybox (`make install`, or the release bundle's lib/) or rebuild them (`make`)"
	if errors.Is(err, wire.ErrLegacy) {
		// An agent from before protocol 3 answers in its own framing.
		if old, ok := wire.LegacyHello(p); ok && old.Type == wire.TypeError {
			return wire.Hello{}, fmt.Errorf("the guest agent speaks an older protocol than this pybox's %d (it said: %s): %s", wire.ProtocolVersion, old.Error.Message, rebuild)
		}
		return wire.Hello{}, fmt.Errorf("the guest agent speaks an older protocol than this pybox's %d: %s", wire.ProtocolVersion, rebuild)
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return wire.Hello{}, fmt.Errorf("no hello from the guest: %w", context.DeadlineExceeded)
		}
		return wire.Hello{}, fmt.Errorf("reading the guest's hello: %w", err)
	}
	switch {
	case m.Type == wire.TypeError:
		if m.Error.Code == wire.ErrProtocol {
			return wire.Hello{}, fmt.Errorf("the guest refused the hello: %w: %s", m.Error, rebuild)
		}
		return wire.Hello{}, fmt.Errorf("the guest refused the hello: %w", m.Error)
	case m.Type != wire.TypeHello || m.ID != 1:
		return wire.Hello{}, fmt.Errorf("the guest answered hello with %s (id %d)", m.Type, m.ID)
	case m.Hello.Protocol != wire.ProtocolVersion:
		return wire.Hello{}, fmt.Errorf("the guest speaks protocol %d, this pybox %d: %s", m.Hello.Protocol, wire.ProtocolVersion, rebuild)
	}
	return *m.Hello, nil
}

// ReadGuest reads the guest's answers and hands each to the client that
// asked, until the guest channel fails. Then every pending request is
// answered with an error and new ones are refused. The returned error
// says why the channel ended; a malformed frame is an error the VM cannot
// recover from.
func (r *Relay) ReadGuest() error {
	defer close(r.ran)
	stop := make(chan struct{})
	defer close(stop)
	go r.sweep(stop)
	err := r.readAnswers()
	r.mu.Lock()
	if r.gone != nil {
		// A write that timed out, or why the guest was abandoned, says
		// more than the closed channel.
		err = r.gone
	}
	r.mu.Unlock()
	r.fail(err)
	return err
}

// sweep answers the requests the guest has not answered in time, so that
// neither a wedged guest nor clients that left can fill the table.
func (r *Relay) sweep(stop <-chan struct{}) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			r.expire(now)
		}
	}
}

func (r *Relay) expire(now time.Time) {
	r.mu.Lock()
	var late []*pending
	for id, p := range r.pending {
		if now.After(p.expires) {
			late = append(late, p)
			delete(r.pending, id)
		}
	}
	r.mu.Unlock()
	for _, p := range late {
		r.logf("the guest did not answer %s %s in time: given up", p.typ, p.runID)
		msg, cleanup := fmt.Sprintf("the guest did not answer %s in time", p.typ), (*wire.Cleanup)(nil)
		if p.typ == wire.TypeRun {
			msg = fmt.Sprintf("no receipt for run %s within its bound: the guest is not answering; see `pybox vm status`", p.runID)
			cleanup = wire.Unknown("no receipt came back")
		}
		r.answerWith(p, errorMessage(wire.ErrNoReceipt, msg, cleanup))
	}
}

// answer hands the guest's answer to p (a frame's payload, of type typ)
// to whoever asked: to a client as it came, under the client's ID; to the
// supervisor's own request decoded. p must be out of r.pending, so that
// its client is no longer leave's to clear (see pending.c).
func (r *Relay) answer(p *pending, typ string, payload []byte) {
	switch {
	case p.reply != nil:
		m, err := wire.Decode(payload)
		if err != nil {
			m = errorMessage(wire.ErrProtocol, "the guest's answer: "+err.Error(), nil)
		}
		p.reply <- m
	case p.c != nil:
		// An answer waits for room as a run's output does: a receipt
		// comes right after the output the client may still be taking.
		if typ == wire.TypeReceipt && len(p.data) > 0 {
			// The host's own record of the run's data folders goes just
			// before the receipt; the client puts it into the receipt.
			p.c.sendWithin(&wire.Message{Type: wire.TypeFacts, ID: p.id, Facts: &wire.HostFacts{Data: p.data}}, clientWriteLimit)
		}
		wire.SetID(payload, p.id)
		p.c.pass(payload, clientWriteLimit)
	}
}

// answerWith answers p, out of r.pending as for answer, with a message
// of the supervisor's own.
func (r *Relay) answerWith(p *pending, m *wire.Message) {
	switch {
	case p.reply != nil:
		p.reply <- m
	case p.c != nil:
		m.ID = p.id
		p.c.send(m)
	}
}

// readAnswers routes the guest's frames until the channel fails.
func (r *Relay) readAnswers() error {
	for {
		p, err := frame.Read(r.guest)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("guest channel closed: %w", io.EOF)
			}
			return fmt.Errorf("guest channel: %w", err)
		}
		typ, id, err := wire.Peek(p)
		if err != nil {
			return fmt.Errorf("guest channel: %w", err)
		}
		r.deliver(typ, id, p)
	}
}

// deliver routes one answer from the guest by its header alone. The guest
// is not trusted: an answer must match a request in flight and be of a
// type that request allows, else it is logged and dropped. Its body is
// the asker's to decode and check (the client's, for a client's request).
func (r *Relay) deliver(typ string, id uint64, payload []byte) {
	switch typ {
	case wire.TypeOutput:
		r.deliverOutput(id, payload)
		return
	case wire.TypeNetOpen, wire.TypeNetData, wire.TypeNetWindow, wire.TypeNetClose:
		r.deliverNet(typ, id, payload)
		return
	}
	r.mu.Lock()
	p := r.pending[id]
	delete(r.pending, id)
	r.mu.Unlock()
	switch {
	case p == nil:
		r.logDropped("the guest sent %s for id %d, which nobody asked for: dropped", typ, id)
		return
	case !allowed(p.typ, typ):
		r.logf("the guest answered %s (id %d) with %s: dropped", p.typ, id, typ)
		var cleanup *wire.Cleanup
		if p.typ == wire.TypeRun {
			cleanup = wire.Unknown("the guest answered the run with " + typ)
		}
		r.answerWith(p, errorMessage(wire.ErrProtocol, "the guest answered "+p.typ+" with "+typ, cleanup))
		return
	case p.c == nil && p.reply == nil:
		r.logOrphan(p, typ)
		return
	}
	r.answer(p, typ, payload)
}

// deliverOutput passes on part of a delivered file: only for a run in
// flight that asked for delivery. The run stays in flight. The client
// takes it within clientWriteLimit or is dropped; waiting for it holds
// the guest's reader, which is how the guest is slowed to what the
// client can write.
func (r *Relay) deliverOutput(id uint64, payload []byte) {
	// The run stays in r.pending, where leave may clear its client at
	// any moment: the client is read under r.mu, and the part passed
	// outside it, for pass may wait. A client that leaves in between is
	// closed, and pass then drops the part.
	var c *peer
	r.mu.Lock()
	p := r.pending[id]
	if p != nil {
		c = p.c
	}
	r.mu.Unlock()
	switch {
	case p == nil || p.typ != wire.TypeRun || !p.deliver:
		r.logDropped("the guest sent output for id %d, which is no run in flight that asked for it: dropped", id)
		return
	case c == nil:
		return // the client left; the run's cancel is on its way
	}
	wire.SetID(payload, p.id)
	c.pass(payload, clientWriteLimit)
}

// deliverNet passes on a frame of one of a run's streams (of type typ,
// for the run the guest knows as id) to the run's client, for a run in
// flight that may carry streams. It never waits for the client: a run
// whose frames would take it past its budget (netQueue) has a guest that
// ignored the windows, and is cancelled, as is one whose frame is
// malformed; either way only that run, and the channel goes on. The
// frame's body is the client's to read; the relay checks its shape only.
func (r *Relay) deliverNet(typ string, id uint64, payload []byte) {
	var c *peer
	r.mu.Lock()
	p := r.pending[id]
	if p != nil {
		c = p.c
	}
	r.mu.Unlock()
	switch {
	case p == nil || p.typ != wire.TypeRun:
		r.logDropped("the guest sent %s for id %d, which is no run in flight: dropped", typ, id)
		return
	case !p.net:
		r.logDropped("the guest sent %s for run %s, which may not reach the network: dropped", typ, p.runID)
		return
	case c == nil:
		return // the client left; the run's cancel is on its way
	case p.nq.cancelled:
		r.logDropped("the guest sent %s for run %s after it was cancelled for its streams: dropped", typ, p.runID)
		return
	}
	if _, _, _, _, err := wire.PeekNet(payload); err != nil {
		r.cancelNet(p, fmt.Sprintf("the guest sent a malformed stream frame (%v)", err))
		return
	}
	wire.SetID(payload, p.id)
	if !c.passNet(payload, p.nq) {
		r.cancelNet(p, fmt.Sprintf("the guest sent more of its streams than their windows allow (%d frames, %d bytes queued for the client)",
			p.nq.frames.Load(), p.nq.bytes.Load()))
	}
}

// cancelNet cancels run p for how the guest broke the rules of its
// streams (why): its later stream frames are dropped, and the guest is
// asked to cancel it, as when its client leaves. The run still ends with
// its receipt. The cancel is written by a goroutine of its own: the
// guest's reader, which calls this, must never wait on the guest.
func (r *Relay) cancelNet(p *pending, why string) {
	p.nq.cancelled = true
	r.logf("run %s: %s: cancelling it", p.runID, why)
	r.mu.Lock()
	gone := r.gone != nil
	r.mu.Unlock()
	if gone {
		return
	}
	go func() {
		cancel := &wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: p.runID}}
		if err := r.send(&pending{typ: wire.TypeCancel, runID: p.runID, expires: time.Now().Add(requestLimit)}, cancel); err != nil {
			r.logf("cancelling run %s: %v", p.runID, err)
		}
	}()
}

func allowed(req, reply string) bool {
	if reply == wire.TypeError {
		return true
	}
	for _, t := range answers[req] {
		if t == reply {
			return true
		}
	}
	return false
}

// logOrphan logs the answer (of type typ) to a request whose client
// left, by its header: the relay decodes no answer but its own pings'.
// How such a run ended, its status and cleanup, is in the agent's own
// log, on the guest's console (`pybox vm logs`).
func (r *Relay) logOrphan(p *pending, typ string) {
	switch typ {
	case wire.TypeReceipt:
		r.logf("run %s ended after its client left: its receipt came and was dropped (the console log says how it ended)", p.runID)
	case wire.TypeError:
		r.logf("%s %s: an error came after its client left", p.typ, p.runID)
	}
}

func (r *Relay) logDropped(format string, args ...any) {
	r.mu.Lock()
	r.dropped++
	n := r.dropped
	r.mu.Unlock()
	if throttled(n) {
		r.logf(format+" (%d so far)", append(args, n)...)
	}
}

// throttled says whether the nth of a kind of dropped frame is logged: a
// hostile guest or a broken client could flood them, and the log must
// stay bounded.
func throttled(n int) bool { return n <= 10 || n%1000 == 0 }

// fail answers every pending request with an error once the guest is gone.
func (r *Relay) fail(cause error) {
	r.mu.Lock()
	if r.gone == nil {
		r.gone = cause
	}
	ps := r.pending
	r.pending = map[uint64]*pending{}
	r.mu.Unlock()
	for _, p := range ps {
		var cleanup *wire.Cleanup
		if p.typ == wire.TypeRun {
			cleanup = wire.Unknown("the VM stopped during the run")
		}
		r.answerWith(p, errorMessage(wire.ErrNoVM, "the VM stopped: "+cause.Error(), cleanup))
	}
}

// Abandon gives up on the guest for why: the channel is closed, and
// every request in flight is answered with why (once ReadGuest sees it).
func (r *Relay) Abandon(why error) {
	r.mu.Lock()
	if r.gone == nil {
		r.gone = why
	}
	r.mu.Unlock()
	r.guest.Close()
}

// Close ends the guest channel and every client connection. Clients get
// what was queued for them first (the answers to their requests in
// flight), for a moment.
func (r *Relay) Close() {
	r.guest.Close()
	select {
	case <-r.ran:
	case <-time.After(time.Second): // ReadGuest was never started, or is stuck
	}
	r.mu.Lock()
	cs := r.clients
	r.clients = map[*peer]bool{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for c := range cs {
		wg.Go(c.closeAfterSend)
	}
	wg.Wait()
}

// Serve accepts clients on l until l is closed.
func (r *Relay) Serve(l net.Listener) error {
	for {
		nc, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		r.admit(nc)
	}
}

func (r *Relay) admit(nc net.Conn) {
	c := newPeer(nc, r.logf)
	r.mu.Lock()
	full := len(r.clients) >= maxClients
	if !full {
		r.clients[c] = true
	}
	r.mu.Unlock()
	if full {
		c.send(errorMessage(wire.ErrBusy, fmt.Sprintf("the VM's supervisor has %d connections already, the most it takes (each pybox mcp and pybox run holds one): "+
			"nothing ran; stop an agent's server you no longer use, or try again in a moment", maxClients), wire.NothingRan()))
		// Not on the accept loop: a refused client that does not read
		// must not hold up the next one.
		go c.closeAfterSend()
		return
	}
	go func() {
		r.serveClient(c)
		r.leave(c)
	}()
}

// serveClient reads a client's requests until it leaves or breaks a rule.
// Its first frame must come within helloLimit.
func (r *Relay) serveClient(c *peer) {
	c.nc.SetReadDeadline(time.Now().Add(helloLimit))
	waiting := true // for the hello, under the deadline
	for {
		if waiting && c.helloDone {
			c.nc.SetReadDeadline(time.Time{})
			waiting = false
		}
		p, err := frame.Read(c.nc)
		if waiting && errors.Is(err, os.ErrDeadlineExceeded) {
			r.logf("client: no hello within %s: disconnected", helloLimit)
			c.send(errorMessage(wire.ErrProtocol, fmt.Sprintf("no hello within %s", helloLimit), nil))
			c.closeAfterSend()
			return
		}
		var typ string
		var id uint64
		if err == nil {
			typ, id, err = wire.Peek(p)
		}
		if errors.Is(err, wire.ErrLegacy) {
			r.refuseLegacy(c, p)
			c.closeAfterSend()
			return
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				// The frame could not be read whole (too large, empty,
				// no header): the stream cannot be trusted past it.
				r.logf("client: %v: disconnected", err)
				c.send(errorMessage(wire.ErrProtocol, err.Error(), nil))
				c.closeAfterSend()
			}
			return
		}
		if !r.request(c, typ, id, p) {
			c.closeAfterSend()
			return
		}
	}
}

// refuseLegacy answers a client from an older pybox in its own framing.
func (r *Relay) refuseLegacy(c *peer, p []byte) {
	old, ok := wire.LegacyHello(p)
	if !ok || old.Type != wire.TypeHello {
		r.logf("client: a frame in an older framing that is no hello: disconnected")
		return
	}
	r.logf("client: hello from a pybox of protocol %d: refused", old.Hello.Protocol)
	c.queue(wire.EncodeLegacyRefusal(old.ID, fmt.Sprintf(
		"this VM was started by a pybox of protocol %d and you speak %d: use the pybox that started it, or restart the VM with yours (`pybox vm stop`, then `pybox vm start`)",
		wire.ProtocolVersion, old.Hello.Protocol)), 0)
}

// request handles one frame from a client, of type typ and the client's
// ID id; false ends the connection. Only a hello is decoded: it is the
// supervisor's own to answer. Of a run, its header is read: what routes
// it, its data folders to ready and its bound. Everything is forwarded
// as it came.
func (r *Relay) request(c *peer, typ string, id uint64, p []byte) bool {
	reply := func(code, msg string) {
		e := errorMessage(code, msg, nil)
		e.ID = id
		c.send(e)
	}
	var run *wire.RunHeader
	switch {
	case typ == wire.TypeNetData || typ == wire.TypeNetWindow || typ == wire.TypeNetClose:
		if !c.helloDone {
			reply(wire.ErrProtocol, "say hello first")
			return false
		}
		return r.forwardNet(c, id, p)
	case typ == wire.TypeHello:
		m, err := wire.Decode(p)
		if err != nil {
			reply(wire.ErrProtocol, err.Error())
			return false
		}
		if m.Hello.Protocol != wire.ProtocolVersion {
			reply(wire.ErrProtocol, fmt.Sprintf("this supervisor speaks protocol %d, not %d", wire.ProtocolVersion, m.Hello.Protocol))
			return false
		}
		c.helloDone = true
		h := r.hello
		c.send(&wire.Message{Type: wire.TypeHello, ID: id, Hello: &h})
		return true
	case answers[typ] == nil:
		reply(wire.ErrProtocol, "a client may not send "+typ)
		return false
	case !c.helloDone:
		reply(wire.ErrProtocol, "say hello first")
		return false
	case typ == wire.TypeRun:
		// The client checked the run and the guest checks it again; the
		// relay reads its header only, and trusts none of it beyond
		// routing: a wrong header is the guest's to refuse.
		h, err := wire.PeekRun(p)
		if err != nil {
			c.sendErr(id, wire.ErrBadRequest, err.Error(), wire.NothingRan())
			return true
		}
		run = &h
	}
	r.forward(c, typ, id, p, run)
	return true
}

// forward sends a client's request (p, of type typ and the client's ID
// id; run is its run header, for a run) to the guest under a new ID.
func (r *Relay) forward(c *peer, typ string, id uint64, p []byte, run *wire.RunHeader) {
	pd := newPending(c, typ, id, run)
	var notSent *wire.Cleanup
	if typ == wire.TypeRun {
		notSent = wire.NothingRan()
	}
	r.mu.Lock()
	gone, stopping, all, silent, beforeRun := r.gone, r.stopping, len(r.pending), r.silent, r.beforeRun
	inFlight := 0
	for _, q := range r.pending {
		if q.c == c {
			inFlight++
		}
	}
	r.mu.Unlock()
	switch {
	case gone != nil || stopping:
		reason := "the VM is stopping"
		if gone != nil {
			reason = "the VM stopped: " + gone.Error()
		}
		c.sendErr(id, wire.ErrNoVM, reason+": start it with `pybox vm start`", notSent)
		return
	case inFlight >= maxPending:
		c.sendErr(id, wire.ErrBusy, fmt.Sprintf("%d requests in flight on this connection; wait for answers", maxPending), notSent)
		return
	case silent != "" && typ == wire.TypeRun:
		c.sendErr(id, wire.ErrUnhealthy, "the guest is "+silent+"; the supervisor restarts it if it stays so: try again in a minute, or see `pybox vm status`", notSent)
		return
	case all >= maxPendingAll:
		c.sendErr(id, wire.ErrBusy, fmt.Sprintf("%d requests are waiting for the guest; try again shortly", maxPendingAll), notSent)
		return
	}
	if typ == wire.TypeShutdown {
		r.mu.Lock()
		r.stopping = true
		r.mu.Unlock()
	}
	if run != nil && len(run.Data) > 0 {
		if r.prepare == nil {
			c.sendErr(id, wire.ErrNoData, "this VM has no data folders: start it with `pybox vm start --data NAME=DIR`", notSent)
			return
		}
		data, e := r.prepare(run)
		if e != nil {
			c.sendErr(id, e.Code, e.Message, notSent)
			return
		}
		pd.data = data
	}
	if run != nil && beforeRun != nil {
		beforeRun()
	}
	if err := r.sendPayload(pd, p); err != nil {
		c.sendErr(id, wire.ErrNoVM, "the VM is not reachable: "+err.Error(), notSent)
	}
}

// forwardNet passes a frame of one of a run's streams (p, for the run the
// client knows as id) to the guest, under the run's ID there. Nothing
// answers it. A malformed one ends the connection (false), as any frame
// that could not be read: the client's streams cannot be trusted past
// it. One for no run of the client's in flight that may carry streams is
// dropped: most are a stream's last words crossing the run's receipt.
func (r *Relay) forwardNet(c *peer, id uint64, p []byte) bool {
	if _, _, _, _, err := wire.PeekNet(p); err != nil {
		e := errorMessage(wire.ErrProtocol, err.Error(), nil)
		e.ID = id
		c.send(e)
		return false
	}
	var gid uint64
	var pd *pending
	r.mu.Lock()
	for k, q := range r.pending {
		if q.c == c && q.id == id && q.typ == wire.TypeRun {
			gid, pd = k, q
			break
		}
	}
	gone := r.gone != nil
	if pd == nil || !pd.net {
		r.netDropped++
	}
	n := r.netDropped
	r.mu.Unlock()
	switch {
	case pd == nil:
		if throttled(n) {
			r.logf("a client sent a stream frame for its id %d, which is no run of its in flight: dropped (%d so far)", id, n)
		}
		return true
	case !pd.net:
		if throttled(n) {
			r.logf("a client sent a stream frame for run %s, which may not reach the network: dropped (%d so far)", pd.runID, n)
		}
		return true
	case gone:
		return true // the run is being answered with why
	}
	wire.SetID(p, gid)
	if err := r.writeGuest(p, nil); err != nil {
		r.logf("run %s: passing a stream frame to the guest: %v", pd.runID, err)
	}
	return true
}

// send registers p and writes m, a message of the supervisor's own, to
// the guest under a fresh ID.
func (r *Relay) send(p *pending, m *wire.Message) error {
	payload, err := wire.Encode(m)
	if err != nil {
		return err
	}
	return r.sendPayload(p, payload)
}

// sendPayload registers p and writes payload to the guest under a fresh
// ID (set in its header, in place).
func (r *Relay) sendPayload(p *pending, payload []byte) error {
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.pending[id] = p
	r.mu.Unlock()
	wire.SetID(payload, id)
	return r.writeGuest(payload, func() {
		r.mu.Lock()
		delete(r.pending, id)
		r.mu.Unlock()
	})
}

// writeGuest writes a frame to the guest, as it is, within
// guestWriteLimit. When it fails, forget (if any) runs first: the
// request is then the caller's to answer, not one of those in flight. A
// guest that does not take the frame in that time is wedged: the channel
// is closed, and every request still in flight is answered.
func (r *Relay) writeGuest(payload []byte, forget func()) error {
	r.wmu.Lock()
	r.guest.SetWriteDeadline(time.Now().Add(guestWriteLimit))
	err := frame.Write(r.guest, payload)
	r.wmu.Unlock()
	if err != nil && forget != nil {
		forget()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Part of the frame may be out: the stream cannot go on. Closing
		// it ends ReadGuest, and every request in flight is answered.
		r.mu.Lock()
		if r.gone == nil {
			r.gone = fmt.Errorf("%w: the guest did not take a frame within %v", ErrWedged, guestWriteLimit)
		}
		r.mu.Unlock()
		r.guest.Close()
	}
	return err
}

// SetSilent says the guest is not answering (how, for the refusal), or
// with "" that it answers again.
func (r *Relay) SetSilent(how string) {
	r.mu.Lock()
	r.silent = how
	r.mu.Unlock()
}

// ErrWedged is why a guest channel ends when the guest stopped taking or
// answering frames.
var ErrWedged = errors.New("the guest is wedged")

// Ping asks the guest for a pong, within ctx, for the supervisor's own
// health check, and returns what the agent says it is doing.
func (r *Relay) Ping(ctx context.Context) (*wire.AgentStatus, error) {
	p := &pending{typ: wire.TypePing, expires: time.Now().Add(requestLimit), reply: make(chan *wire.Message, 1)}
	r.mu.Lock()
	gone := r.gone
	r.mu.Unlock()
	if gone != nil {
		return nil, gone
	}
	if err := r.send(p, &wire.Message{Type: wire.TypePing}); err != nil {
		return nil, err
	}
	select {
	case m := <-p.reply:
		if m.Type == wire.TypeError {
			return nil, m.Error
		}
		if m.Status == nil {
			return &wire.AgentStatus{}, nil
		}
		return m.Status, nil
	case <-ctx.Done():
		r.mu.Lock()
		for id, q := range r.pending {
			if q == p {
				delete(r.pending, id)
			}
		}
		r.mu.Unlock()
		return nil, ctx.Err()
	}
}

// leave forgets a client. A run it was waiting for is cancelled: nobody
// would read its receipt, and the box should not outlive its purpose.
func (r *Relay) leave(c *peer) {
	c.close()
	r.mu.Lock()
	delete(r.clients, c)
	var runs []string
	for _, p := range r.pending {
		if p.c == c {
			p.c = nil
			if p.typ == wire.TypeRun {
				runs = append(runs, p.runID)
			}
		}
	}
	gone := r.gone != nil
	r.mu.Unlock()
	if gone {
		return
	}
	for _, id := range runs {
		r.logf("client left during run %s: cancelling it", id)
		cancel := &wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: id}}
		if err := r.send(&pending{typ: wire.TypeCancel, runID: id, expires: time.Now().Add(requestLimit)}, cancel); err != nil {
			r.logf("cancelling run %s: %v", id, err)
		}
	}
}

// Stopping reports whether the VM was asked to power off, by a client's
// shutdown or by Shutdown.
func (r *Relay) Stopping() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopping
}

// Shutdown asks the guest to power off, as a client would.
func (r *Relay) Shutdown() error {
	r.mu.Lock()
	r.stopping = true
	gone := r.gone
	r.mu.Unlock()
	if gone != nil {
		return gone
	}
	return r.send(&pending{typ: wire.TypeShutdown, expires: time.Now().Add(requestLimit)}, &wire.Message{Type: wire.TypeShutdown})
}

func errorMessage(code, msg string, cleanup *wire.Cleanup) *wire.Message {
	return &wire.Message{Type: wire.TypeError, Error: &wire.Error{Code: code, Message: msg, Cleanup: cleanup}}
}

func writeMessage(w io.Writer, m *wire.Message) error {
	p, err := wire.Encode(m)
	if err != nil {
		return err
	}
	return frame.Write(w, p)
}
