package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
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
	ran      chan struct{} // closed once Run has answered what was in flight
	// silent is set by the supervisor's health check while the guest
	// does not answer its pings: runs are refused at once meanwhile.
	silent string
	// prepare, when set, readies what a run that names data folders
	// needs (their copies brought up to date) before it is sent, and
	// returns the host's record of each for the run's receipt; it runs
	// only while no other run is in flight, as preparing says.
	prepare   func(*wire.Run) ([]wire.DataFolder, *wire.Error)
	preparing bool
}

// SetPrepare sets what readies a run that names data folders (see
// Relay.prepare).
func (r *Relay) SetPrepare(f func(*wire.Run) ([]wire.DataFolder, *wire.Error)) { r.prepare = f }

// pending is a request on its way through the guest.
type pending struct {
	c       *peer  // nil when the supervisor asked, or the client left
	id      uint64 // the client's ID
	typ     string
	runID   string
	expires time.Time
	deliver bool // a run that asked for its output streamed (Run.Deliver)
	// data is the host's record of the data folders a run names, put
	// into its receipt in place of what the guest says (see hostFacts).
	data []wire.DataFolder
	// reply, when set, takes the answer instead of a client: the
	// supervisor's own requests (its health pings).
	reply chan *wire.Message
}

// newPending is a request of m's type from c, with its expiry.
func newPending(c *peer, m *wire.Message) *pending {
	p := &pending{c: c, id: m.ID, typ: m.Type, expires: time.Now().Add(requestLimit)}
	if m.Run != nil {
		p.runID = m.Run.RunID
		// The guest checks the run; its expiry here is bounded whatever
		// the timeout it asks for.
		bounded := *m.Run
		bounded.TimeoutSeconds = min(max(bounded.TimeoutSeconds, 0), wire.MaxTimeoutSeconds)
		p.expires = time.Now().Add(bounded.HostDeadline())
		p.deliver = m.Run.Deliver != nil
	}
	return p
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
	m, err := readMessage(guest)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return wire.Hello{}, fmt.Errorf("no hello from the guest: %w", context.DeadlineExceeded)
		}
		return wire.Hello{}, fmt.Errorf("reading the guest's hello: %w", err)
	}
	switch {
	case m.Type == wire.TypeError:
		return wire.Hello{}, fmt.Errorf("the guest refused the hello: %w", m.Error)
	case m.Type != wire.TypeHello || m.ID != 1:
		return wire.Hello{}, fmt.Errorf("the guest answered hello with %s (id %d)", m.Type, m.ID)
	case m.Hello.Protocol != wire.ProtocolVersion:
		return wire.Hello{}, fmt.Errorf("the guest speaks protocol %d, this pybox %d: its initramfs is not this pybox's "+
			"(`pybox version` shows which it boots): install the guest files of this pybox (`make install`, or the release bundle's lib/) or rebuild them (`make`)",
			m.Hello.Protocol, wire.ProtocolVersion)
	}
	return *m.Hello, nil
}

// Run reads the guest's answers and hands each to the client that asked,
// until the guest channel fails. Then every pending request is answered
// with an error and new ones are refused. The returned error says why the
// channel ended; a malformed frame is an error the VM cannot recover from.
func (r *Relay) Run() error {
	defer close(r.ran)
	stop := make(chan struct{})
	defer close(stop)
	go r.sweep(stop)
	err := r.readGuest()
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
			cleanup = &wire.Cleanup{Status: wire.CleanupUnknown, Detail: "no receipt came back"}
		}
		r.answer(p, errorMessage(wire.ErrNoReceipt, msg, cleanup))
	}
}

// answer hands m to whoever asked p.
func (r *Relay) answer(p *pending, m *wire.Message) {
	switch {
	case p.reply != nil:
		p.reply <- m
	case p.c != nil:
		m.ID = p.id
		p.c.send(m)
	}
}

func (r *Relay) readGuest() error {
	for {
		m, err := readMessage(r.guest)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("guest channel closed: %w", io.EOF)
			}
			return fmt.Errorf("guest channel: %w", err)
		}
		r.deliver(m)
	}
}

// deliver routes one answer from the guest. The guest is not trusted: an
// answer must match a request in flight and be of a type that request
// allows, else it is logged and dropped.
func (r *Relay) deliver(m *wire.Message) {
	if m.Type == wire.TypeOutput {
		r.deliverOutput(m)
		return
	}
	r.mu.Lock()
	p := r.pending[m.ID]
	delete(r.pending, m.ID)
	r.mu.Unlock()
	switch {
	case p == nil:
		r.logDropped("the guest sent %s for id %d, which nobody asked for: dropped", m.Type, m.ID)
		return
	case !allowed(p.typ, m.Type):
		r.logf("the guest answered %s (id %d) with %s: dropped", p.typ, m.ID, m.Type)
		m = errorMessage(wire.ErrProtocol, "the guest answered "+p.typ+" with "+m.Type, nil)
	case m.Type == wire.TypeReceipt && m.Result.Receipt.RunID != p.runID:
		r.logf("the guest answered run %s with the receipt of run %q: dropped", p.runID, m.Result.Receipt.RunID)
		m = errorMessage(wire.ErrProtocol, "the guest answered with another run's receipt", &wire.Cleanup{Status: wire.CleanupUnknown})
	case m.Type == wire.TypeReceipt:
		hostFacts(&m.Result.Receipt, p.data)
	}
	if p.c == nil && p.reply == nil {
		r.logOrphan(p, m)
		return
	}
	r.answer(p, m)
}

// deliverOutput passes on part of a delivered file: only for a run in
// flight that asked for delivery, and only of that run. The run stays in
// flight. The client takes it within clientWriteLimit or is dropped;
// waiting for it holds the guest's reader, which is how the guest is
// slowed to what the client can write.
func (r *Relay) deliverOutput(m *wire.Message) {
	r.mu.Lock()
	p := r.pending[m.ID]
	r.mu.Unlock()
	switch {
	case p == nil || p.typ != wire.TypeRun || !p.deliver:
		r.logDropped("the guest sent output for id %d, which is no run in flight that asked for it: dropped", m.ID)
		return
	case m.Output.RunID != p.runID:
		r.logDropped("the guest sent output of run %q for run %s: dropped", m.Output.RunID, p.runID)
		return
	case p.c == nil:
		return // the client left; the run's cancel is on its way
	}
	m.ID = p.id
	p.c.sendWait(m, clientWriteLimit)
}

// hostFacts puts the host's own record of a run's data folders into its
// receipt, over whatever the guest wrote there: the guest was told their
// names only, and what it says of the host's folders proves nothing. A run
// that named none has none, whatever the guest claims.
func hostFacts(rc *wire.Receipt, data []wire.DataFolder) {
	rc.Data = slices.Clone(data)
}

// namesOnly is what the guest is told of a run's data folders: their
// names. Where they are on the host and what they hold is the host's to
// say (hostFacts).
func namesOnly(data []wire.DataFolder) []wire.DataFolder {
	if len(data) == 0 {
		return nil
	}
	out := make([]wire.DataFolder, len(data))
	for i, d := range data {
		out[i] = wire.DataFolder{Name: d.Name}
	}
	return out
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

func (r *Relay) logOrphan(p *pending, m *wire.Message) {
	switch {
	case m.Type == wire.TypeReceipt:
		rc := m.Result.Receipt
		r.logf("run %s ended after its client left: status %s, cleanup %s %s", rc.RunID, rc.Status, rc.Cleanup.Status, rc.Cleanup.Detail)
	case m.Type == wire.TypeError:
		r.logf("%s %s: error after its client left: %v", p.typ, p.runID, m.Error)
	}
}

func (r *Relay) logDropped(format string, args ...any) {
	r.mu.Lock()
	r.dropped++
	n := r.dropped
	r.mu.Unlock()
	// A hostile guest could flood these; the log must stay bounded.
	if n <= 10 || n%1000 == 0 {
		r.logf(format+" (%d so far)", append(args, n)...)
	}
}

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
			cleanup = &wire.Cleanup{Status: wire.CleanupUnknown, Detail: "the VM stopped during the run"}
		}
		r.answer(p, errorMessage(wire.ErrNoVM, "the VM stopped: "+cause.Error(), cleanup))
	}
}

// Abandon gives up on the guest for why: the channel is closed, and
// every request in flight is answered with why (once Run sees it).
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
	case <-time.After(time.Second): // Run was never started, or is stuck
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
	c := newClient(nc, r.logf)
	r.mu.Lock()
	full := len(r.clients) >= maxClients
	if !full {
		r.clients[c] = true
	}
	r.mu.Unlock()
	if full {
		c.send(errorMessage(wire.ErrBusy, fmt.Sprintf("the supervisor has %d clients already", maxClients), nil))
		c.closeAfterSend()
		return
	}
	go func() {
		r.serveClient(c)
		r.leave(c)
	}()
}

// serveClient reads a client's requests until it leaves or breaks a rule.
func (r *Relay) serveClient(c *peer) {
	for {
		m, err := readMessage(c.nc)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				// The frame could not be read whole (too large, empty,
				// malformed): the stream cannot be trusted past it.
				r.logf("client: %v: disconnected", err)
				c.send(errorMessage(wire.ErrProtocol, err.Error(), nil))
				c.closeAfterSend()
			}
			return
		}
		if !r.request(c, m) {
			c.closeAfterSend()
			return
		}
	}
}

// request handles one message from a client; false ends the connection.
func (r *Relay) request(c *peer, m *wire.Message) bool {
	reply := func(code, msg string, cleanup *wire.Cleanup) {
		e := errorMessage(code, msg, cleanup)
		e.ID = m.ID
		c.send(e)
	}
	switch {
	case m.Type == wire.TypeHello:
		if m.Hello.Protocol != wire.ProtocolVersion {
			reply(wire.ErrProtocol, fmt.Sprintf("this supervisor speaks protocol %d, not %d", wire.ProtocolVersion, m.Hello.Protocol), nil)
			return false
		}
		c.helloDone = true
		h := r.hello
		c.send(&wire.Message{Type: wire.TypeHello, ID: m.ID, Hello: &h})
		return true
	case answers[m.Type] == nil:
		reply(wire.ErrProtocol, "a client may not send "+m.Type, nil)
		return false
	case !c.helloDone:
		reply(wire.ErrProtocol, "say hello first", nil)
		return false
	}
	// A run is not checked here: the client sends only runs checked where
	// they were made, and the guest checks each before its box is made.
	r.forward(c, m)
	return true
}

// forward sends a client's request to the guest under a new ID.
func (r *Relay) forward(c *peer, m *wire.Message) {
	p := newPending(c, m)
	var notSent *wire.Cleanup
	if m.Type == wire.TypeRun {
		notSent = &wire.Cleanup{Status: wire.CleanupNotAttempted}
	}
	r.mu.Lock()
	gone, stopping, all, silent := r.gone, r.stopping, len(r.pending), r.silent
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
		c.sendErr(m.ID, wire.ErrNoVM, reason+": start it with `pybox vm start`", notSent)
		return
	case inFlight >= maxPending:
		c.sendErr(m.ID, wire.ErrBusy, fmt.Sprintf("%d requests in flight on this connection; wait for answers", maxPending), notSent)
		return
	case silent != "" && m.Type == wire.TypeRun:
		c.sendErr(m.ID, wire.ErrUnhealthy, "the guest is "+silent+"; the supervisor restarts it if it stays so: try again in a minute, or see `pybox vm status`", notSent)
		return
	case all >= maxPendingAll:
		c.sendErr(m.ID, wire.ErrBusy, fmt.Sprintf("%d requests are waiting for the guest; try again shortly", maxPendingAll), notSent)
		return
	}
	if m.Type == wire.TypeShutdown {
		r.mu.Lock()
		r.stopping = true
		r.mu.Unlock()
	}
	if m.Type == wire.TypeRun && len(m.Run.Data) > 0 {
		data, e := r.prepareData(m.Run)
		if e != nil {
			c.sendErr(m.ID, e.Code, e.Message, notSent)
			return
		}
		defer r.donePreparing()
		p.data = data
	}
	if m.Type == wire.TypeRun {
		m.Run.Data = namesOnly(m.Run.Data)
	}
	if err := r.send(p, m); err != nil {
		c.sendErr(m.ID, wire.ErrNoVM, "the VM is not reachable: "+err.Error(), notSent)
	}
}

// prepareData readies a run that names data folders and returns the
// host's record of them. Their copies must not change under a run that
// reads them, so this waits for nothing: with another run in flight (or
// being readied), the run is busy, as the guest would say. The caller
// must call donePreparing once the run is sent (and so in flight); after
// a refusal there is nothing to undo.
func (r *Relay) prepareData(run *wire.Run) ([]wire.DataFolder, *wire.Error) {
	r.mu.Lock()
	busy := r.preparing
	for _, q := range r.pending {
		busy = busy || q.typ == wire.TypeRun
	}
	if !busy {
		r.preparing = true
	}
	r.mu.Unlock()
	if busy {
		return nil, &wire.Error{Code: wire.ErrBusy, Message: "another run is in progress; nothing was queued: try again when it has finished"}
	}
	if r.prepare == nil {
		r.donePreparing()
		return nil, &wire.Error{Code: wire.ErrNoData, Message: "this VM has no data folders: start it with `pybox vm start --data NAME=DIR`"}
	}
	data, e := r.prepare(run)
	if e != nil {
		r.donePreparing()
		return nil, e
	}
	return data, nil
}

func (r *Relay) donePreparing() {
	r.mu.Lock()
	r.preparing = false
	r.mu.Unlock()
}

// send registers p and writes m to the guest under a fresh ID.
func (r *Relay) send(p *pending, m *wire.Message) error {
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.pending[id] = p
	r.mu.Unlock()
	out := *m
	out.ID = id
	r.wmu.Lock()
	r.guest.SetWriteDeadline(time.Now().Add(guestWriteLimit))
	err := writeMessage(r.guest, &out)
	r.wmu.Unlock()
	if err != nil {
		r.mu.Lock()
		delete(r.pending, id)
		r.mu.Unlock()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Part of the frame may be out: the stream cannot go on. Closing
		// it ends Run, and every request in flight is answered.
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

func readMessage(r io.Reader) (*wire.Message, error) {
	p, err := frame.Read(r)
	if err != nil {
		return nil, err
	}
	return wire.Decode(p)
}

func writeMessage(w io.Writer, m *wire.Message) error {
	p, err := wire.Encode(m)
	if err != nil {
		return err
	}
	return frame.Write(w, p)
}
