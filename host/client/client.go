package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"pybox/host/egress"
	"pybox/host/paths"
	"pybox/shared/frame"
	"pybox/shared/wire"
)

// ErrNoVM is what a dial that finds no supervisor returns: the VM is not
// running. Like every error a call can end in, it is a *wire.Error, so
// its code and cleanup are read the same way as a refused run's; it is
// shared, not to be changed.
var ErrNoVM = &wire.Error{Code: wire.ErrNoVM, Message: "the VM is not running: start it with `pybox vm start`",
	Cleanup: wire.NothingRan()}

// Timeouts of the client's own waits.
const (
	helloTimeout = 10 * time.Second
	writeTimeout = 10 * time.Second
	// CancelWait is how long Run waits for the receipt after it sent a
	// cancel: the guest kills the box, stops collecting its output and
	// cleans it up, within its allowances.
	CancelWait = wire.SettleAllowance + wire.DrainAllowance + wire.CleanupAllowance
)

// Client is a connection to the supervisor. Its methods may be called
// from several goroutines.
type Client struct {
	nc    net.Conn
	hello wire.Hello

	wmu sync.Mutex // serializes frames

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan *wire.Message
	outputs map[uint64]delivery        // runs that asked for delivery
	facts   map[uint64]*wire.HostFacts // the host's record of a run's data folders, until its receipt
	nets    map[uint64]*netCall        // runs that may reach the network, until their answer
	err     error                      // why the connection ended
	done    chan struct{}
}

// Dial connects to the supervisor of the VM under home and says hello.
func Dial(home string) (*Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
	defer cancel()
	return DialContext(ctx, home)
}

// DialContext is Dial with a context for the connection and the hello.
func DialContext(ctx context.Context, home string) (*Client, error) {
	d := paths.ForVM(home)
	if _, err := os.Stat(d.Dir); errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoVM
	}
	if err := d.CheckSocket(); errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoVM
	} else if err != nil {
		return nil, err
	}
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "unix", d.Socket())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, ErrNoVM
		}
		return nil, fmt.Errorf("client: %w", err)
	}
	// The paths were checked before the dial; the peer is checked after
	// it, so that a directory swapped in between is caught too.
	if err := checkPeer(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return handshake(ctx, nc)
}

// checkPeer checks that the process on the other end of nc runs as the
// current user.
func checkPeer(nc net.Conn) error {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var uid int
	var perr error
	if err := raw.Control(func(fd uintptr) { uid, perr = peerUID(int(fd)) }); err != nil {
		return err
	}
	if perr != nil {
		return fmt.Errorf("client: who is the supervisor: %w", perr)
	}
	if uid != os.Getuid() {
		return fmt.Errorf("client: the supervisor's socket %s is served by uid %d, not by you (uid %d): it is not your VM; "+
			"check who can write to %s", nc.RemoteAddr(), uid, os.Getuid(), "$"+paths.EnvHome)
	}
	return nil
}

// New says hello on an established connection to a supervisor (tests,
// other transports).
func New(ctx context.Context, nc net.Conn) (*Client, error) { return handshake(ctx, nc) }

func handshake(ctx context.Context, nc net.Conn) (*Client, error) {
	c := &Client{nc: nc, waiting: map[uint64]chan *wire.Message{}, outputs: map[uint64]delivery{},
		facts: map[uint64]*wire.HostFacts{}, nets: map[uint64]*netCall{}, done: make(chan struct{})}
	go c.read()
	m, err := c.call(ctx, &wire.Message{Type: wire.TypeHello, Hello: &wire.Hello{Protocol: wire.ProtocolVersion}})
	if err == nil && m.Type != wire.TypeHello {
		err = fmt.Errorf("client: the supervisor answered hello with %s", m.Type)
	}
	var said *wire.Error
	if err != nil && !errors.As(err, &said) {
		// A supervisor that refuses a connection (it is full) says why
		// and closes it, perhaps before the hello is written: what it
		// said is the truth, not the broken pipe.
		select {
		case <-c.done:
		case <-time.After(time.Second):
		}
		if cause := c.cause(); errors.As(cause, &said) {
			err = said
		}
	}
	if err != nil {
		nc.Close()
		var we *wire.Error
		switch {
		case errors.As(err, &we) && we.Code == wire.ErrNoVM:
			return nil, ErrNoVM
		case errors.As(err, &we) && we.Code == wire.ErrProtocol:
			// A supervisor started by another version of pybox, which
			// runs on after an upgrade until the VM is restarted.
			return nil, runError(wire.ErrProtocol, fmt.Sprintf("the running VM was started by a pybox that does not speak this one's protocol (%s): "+
				"restart it with this pybox: `pybox vm stop`, then `pybox vm start`", we.Message), wire.NothingRan())
		}
		return nil, err
	}
	c.hello = *m.Hello
	return c, nil
}

// Hello is the guest's hello: agent version, kernel, images.
func (c *Client) Hello() wire.Hello { return c.hello }

// Sealed is nil when the agent seals every box. The benchmark build of
// the agent announces that it can run boxes unsealed (wire.CapUnsealable);
// the product's commands run nothing through it, and Sealed's error (a
// *wire.Error, cleanup NOT_ATTEMPTED) says how to get the product's agent
// back.
func (c *Client) Sealed() error {
	if !slices.Contains(c.hello.Capabilities, wire.CapUnsealable) {
		return nil
	}
	return &wire.Error{Code: wire.ErrUnhealthy, Message: fmt.Sprintf(
		"the VM runs the benchmark build of the guest agent (%s), whose boxes can be unsealed, so nothing is run on it: "+
			"restart the VM with `pybox vm stop` and `pybox vm start` (without --initramfs, or with the one `make` builds)", c.hello.AgentVersion),
		Cleanup: wire.NothingRan()}
}

// Close ends the connection. A run still in flight is cancelled by the
// supervisor.
func (c *Client) Close() error { return c.nc.Close() }

// Ping checks that the guest answers.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.Status(ctx)
	return err
}

// Status pings the guest and returns what the agent says it is doing:
// its health and where the run in progress is.
func (c *Client) Status(ctx context.Context) (*wire.AgentStatus, error) {
	m, err := c.call(ctx, &wire.Message{Type: wire.TypePing})
	if err != nil {
		return nil, err
	}
	if m.Type != wire.TypePong {
		return nil, fmt.Errorf("client: ping answered with %s", m.Type)
	}
	if m.Status == nil {
		return &wire.AgentStatus{}, nil
	}
	return m.Status, nil
}

// Shutdown asks the guest to sync and power off. It returns once the
// guest agreed; the VM is gone a moment later.
func (c *Client) Shutdown(ctx context.Context) error {
	m, err := c.call(ctx, &wire.Message{Type: wire.TypeShutdown})
	if err != nil {
		return err
	}
	if m.Type != wire.TypeOK {
		return fmt.Errorf("client: shutdown answered with %s", m.Type)
	}
	return nil
}

// Cancel asks the guest to stop a run; the run's own receipt then says
// cancelled.
func (c *Client) Cancel(ctx context.Context, runID string) error {
	m, err := c.call(ctx, &wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: runID}})
	if err != nil {
		return err
	}
	if m.Type != wire.TypeOK {
		return fmt.Errorf("client: cancel answered with %s", m.Type)
	}
	return nil
}

// Run runs one program and returns its result, bounded (see Result).
// When ctx ends first, Run sends a cancel and still waits (up to
// CancelWait) for the receipt, which then says cancelled, and returns it
// with a nil error.
//
// Every run has a deadline, wire.HostDeadline of its timeout: the guest
// keeps each phase of a run to its allowance, so a receipt that has not
// come by then never will from a guest that works. Run then cancels the
// run, waits a moment, and gives up with ErrNoReceipt.
//
// Every error is a *wire.Error whose Cleanup says what is known of the
// box: NOT_ATTEMPTED when the request never reached the guest (or was
// refused), UNKNOWN when contact was lost mid-run or no receipt came.
func (c *Client) Run(ctx context.Context, r *Checked) (*Result, error) {
	return c.RunDeliver(ctx, r, nil)
}

// Checked is a run that passed the product's rules (wire.Run.Check).
// Only CheckRun makes one, and the client sends nothing else: the host
// checks a run once, where it is made (the MCP server for a tool call,
// `pybox run` on the command line), and every hop after that trusts it:
// the supervisor reads only its frame's header, the guest checks it as
// the guest checks every run.
type Checked struct{ r wire.Run }

// CheckRun is the host's one check of a run: the product's rules, the
// same for `pybox mcp` and `pybox run` (a server checks its own, lower
// ceilings first). It keeps a copy of r, whose lists the caller can no
// longer change, or says which rule r broke.
func CheckRun(r *wire.Run) (*Checked, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	return &Checked{r: copyRun(r)}, nil
}

// Run is a copy of the checked run.
func (c *Checked) Run() wire.Run { return copyRun(&c.r) }

// DeliverAtMost is c with its output delivery bounded by maxBytes too:
// what a server learns only once it holds the VM (the room its output
// folder has left). Lowering a bound breaks no rule.
func (c *Checked) DeliverAtMost(maxBytes int64) *Checked {
	n := &Checked{r: copyRun(&c.r)}
	if n.r.Deliver != nil && maxBytes >= 0 && maxBytes < n.r.Deliver.MaxBytes {
		n.r.Deliver.MaxBytes = maxBytes
	}
	return n
}

// copyRun is a copy of r that shares no list or pointer with it (input
// files' contents are shared: no rule looks into them beyond their
// length, which a copy of the list keeps).
func copyRun(r *wire.Run) wire.Run {
	c := *r
	c.Files, c.Data = slices.Clone(r.Files), slices.Clone(r.Data)
	if r.Deliver != nil {
		d := *r.Deliver
		c.Deliver = &d
	}
	return c
}

// RunDeliver is Run for a run that asks for its output streamed whole
// (r.Deliver): RunWith with RunOptions.Output.
func (c *Client) RunDeliver(ctx context.Context, checked *Checked, output func(*wire.OutputChunk)) (*Result, error) {
	return c.RunWith(ctx, checked, RunOptions{Output: output})
}

// RunOptions are what a run's caller takes of it besides its result.
type RunOptions struct {
	// Output takes the parts of the files of a run that asks for its
	// output streamed whole (wire.Run.Deliver): each part, in order,
	// before RunWith returns. Nothing here checks the parts: the caller
	// holds them against the receipt's Output.Delivered.
	Output func(*wire.OutputChunk)
	// Net serves the connections of a run that may reach the network
	// (wire.Run.Net), and only of such a run: one gate for one run. Its
	// records are the receipt's Network, the host's own account; the
	// gate is done with when RunWith returns.
	Net *egress.Gate
}

// RunWith is Run with what opts asks for. A run that may reach the
// network needs a gate, and a gate a run that may: without, the run is
// refused (bad_request, nothing ran).
func (c *Client) RunWith(ctx context.Context, checked *Checked, opts RunOptions) (*Result, error) {
	run := checked.Run()
	r := &run
	if r.Net != (opts.Net != nil) {
		msg := "the run may reach the network, but no gate serves its connections"
		if !r.Net {
			msg = "a gate for the connections of a run that may not reach the network"
		}
		return nil, runError(wire.ErrBadRequest, msg, wire.NothingRan())
	}
	if r.Net && !slices.Contains(c.hello.Capabilities, wire.CapNet) {
		return nil, runError(wire.ErrBadRequest, fmt.Sprintf(
			"the run may reach the network, but the VM's guest agent (%s) carries no connections: "+
				"restart the VM with this pybox: `pybox vm stop`, then `pybox vm start`", c.hello.AgentVersion), wire.NothingRan())
	}
	limit := deadlineFor(r)
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	var d *delivery
	if output := opts.Output; output != nil {
		limit := int64(wire.DefaultTmpBytes)
		if r.Deliver != nil && r.Deliver.MaxBytes > 0 {
			limit = r.Deliver.MaxBytes
		}
		d = &delivery{runID: r.RunID, spool: newSpool(output, limit)}
		// Every part taken before this returns, whatever ends the run.
		defer d.spool.drain()
	}
	var n *netCall
	if opts.Net != nil {
		n = newNetCall(c, opts.Net)
	}
	// The guest sets its clock by this, if it is behind.
	r.HostTimeNS = time.Now().UnixNano()
	id, ch, err := c.sendWith(&wire.Message{Type: wire.TypeRun, Run: r}, d, n)
	if err != nil {
		if n != nil {
			n.finish()
		}
		return nil, runError(wire.ErrNoVM, "sending the run: "+err.Error(), wire.NothingRan())
	}
	defer c.forget(id)
	res, err := c.wait(ctx, r, id, ch, deadline, limit)
	if n != nil {
		// The run is over: its streams end, and the receipt's account of
		// its connections is the host's, of what the gate served.
		nw := n.finish()
		if res != nil {
			res.setNetwork(nw)
		}
	}
	return res, err
}

// wait waits for the answer to run r, sent as id.
func (c *Client) wait(ctx context.Context, r *wire.Run, id uint64, ch chan *wire.Message, deadline *time.Timer, limit time.Duration) (*Result, error) {
	var m *wire.Message
	var err error
	select {
	case m = <-ch:
	case <-c.done:
		return nil, c.lost(r.RunID)
	case <-ctx.Done():
		m, err = c.cancelAndWait(r.RunID, id, ch, CancelWait)
		if err != nil {
			return nil, err
		}
	case <-deadline.C:
		// One short wait after the cancel: a guest that kept no bound
		// so far is not likely to answer now.
		m, err = c.cancelAndWait(r.RunID, id, ch, wire.WatchdogGrace)
		if err != nil {
			return nil, runError(wire.ErrNoReceipt, fmt.Sprintf(
				"no receipt for run %s within its bound of %v (its %gs timeout plus %v for the box's setup, settling, output and cleanup, and %v for the way): "+
					"the guest is not answering; the run was cancelled and its box's cleanup is unknown: see `pybox vm status`",
				r.RunID, limit.Round(time.Second), r.TimeoutSeconds, wire.Allowance, wire.WatchdogGrace+wire.HostMargin),
				wire.Unknown("no receipt came within the run's bound"))
		}
	}
	switch {
	case m == nil:
		return nil, c.lost(r.RunID)
	case m.Type == wire.TypeError:
		return nil, boundError(m.Error)
	case m.Type != wire.TypeReceipt:
		return nil, runError(wire.ErrProtocol, "run answered with "+m.Type, wire.Unknown("the guest answered the run with no receipt"))
	case m.Result.Receipt.RunID != r.RunID:
		return nil, runError(wire.ErrProtocol, "the guest answered with the receipt of another run ("+wire.EscapeName(m.Result.Receipt.RunID)+")",
			wire.Unknown("the guest answered with the receipt of another run"))
	}
	// The receipt is this run's: here, once, it is bounded, and what the
	// run saw of its data folders is put in from the host's record, sent
	// by the supervisor before the receipt (the guest was told their
	// names only, and what it says of them proves nothing).
	return NewResult(m.Result, c.takeFacts(id)), nil
}

// deadlineFor is a run's deadline; tests shorten it.
var deadlineFor = (*wire.Run).HostDeadline

// cancelAndWait cancels a run and waits up to wait for its answer.
func (c *Client) cancelAndWait(runID string, id uint64, ch chan *wire.Message, wait time.Duration) (*wire.Message, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	// The cancel's own "ok" is not needed: the receipt says what happened.
	if _, _, err := c.send(&wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: runID}}); err != nil {
		return nil, c.lost(runID)
	}
	select {
	case m := <-ch:
		return m, nil
	case <-c.done:
		return nil, c.lost(runID)
	case <-t.C:
		c.forget(id)
		return nil, runError(wire.ErrNoReceipt, fmt.Sprintf("run %s was cancelled, but no receipt came within %s", runID, wait),
			wire.Unknown("no receipt came back after the cancel"))
	}
}

func (c *Client) lost(runID string) error {
	return runError(wire.ErrNoVM, fmt.Sprintf("lost the supervisor during run %s: %v", runID, c.cause()),
		wire.Unknown("contact with the VM was lost mid-run"))
}

func runError(code, msg string, cleanup *wire.Cleanup) *wire.Error {
	return &wire.Error{Code: code, Message: msg, Cleanup: cleanup}
}

// call sends a request and waits for its answer; an error answer is
// returned as a *wire.Error.
func (c *Client) call(ctx context.Context, m *wire.Message) (*wire.Message, error) {
	id, ch, err := c.send(m)
	if err != nil {
		return nil, err
	}
	select {
	case a := <-ch:
		if a == nil {
			return nil, fmt.Errorf("client: %s: %w", m.Type, c.cause())
		}
		if a.Type == wire.TypeError {
			return nil, a.Error
		}
		return a, nil
	case <-c.done:
		return nil, fmt.Errorf("client: %s: %w", m.Type, c.cause())
	case <-ctx.Done():
		c.forget(id)
		return nil, fmt.Errorf("client: %s: %w", m.Type, ctx.Err())
	}
}

// send writes m under a fresh ID and returns where its answer will come.
func (c *Client) send(m *wire.Message) (uint64, chan *wire.Message, error) {
	return c.sendWith(m, nil, nil)
}

// delivery is where a run's output parts go, and the run they must be of.
type delivery struct {
	runID string
	spool *spool
}

// sendWith is send for a run whose output parts go to d, and whose
// streams to n.
func (c *Client) sendWith(m *wire.Message, d *delivery, n *netCall) (uint64, chan *wire.Message, error) {
	ch := make(chan *wire.Message, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.nextID++
	id := c.nextID
	c.waiting[id] = ch
	if d != nil {
		c.outputs[id] = *d
	}
	if n != nil {
		n.id = id
		c.nets[id] = n
	}
	c.mu.Unlock()
	m.ID = id
	if err := c.writeFrame(m); err != nil {
		c.forget(id)
		return 0, nil, err
	}
	return id, ch, nil
}

// writeFrame writes m as it is.
func (c *Client) writeFrame(m *wire.Message) error {
	p, err := wire.Encode(m)
	if err == nil {
		c.wmu.Lock()
		// The supervisor reads every client at once; one that does not
		// take a frame within this long is not working.
		c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		err = frame.Write(c.nc, p)
		c.wmu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.waiting, id)
	delete(c.outputs, id)
	delete(c.facts, id)
	delete(c.nets, id)
	c.mu.Unlock()
}

// takeFacts is the host's record for request id, once.
func (c *Client) takeFacts(id uint64) *wire.HostFacts {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.facts[id]
	delete(c.facts, id)
	return f
}

// read hands each answer to its caller until the connection ends. Every
// frame is decoded strictly here, once: what the guest sent comes through
// the supervisor as it was, and this is where the host distrusts it (a
// run's receipt is then bounded by RunWith, through NewResult).
func (c *Client) read() {
	var err error
	for {
		var p []byte
		if p, err = frame.Read(c.nc); err != nil {
			break
		}
		var m *wire.Message
		m, err = wire.Decode(p)
		if errors.Is(err, wire.ErrLegacy) {
			err = legacySupervisor(p)
			break
		}
		if err != nil {
			// An answer whose body cannot be read fails its request, not
			// the connection: the header said whose it is.
			typ, id, perr := wire.Peek(p)
			if perr != nil {
				break
			}
			if isNet(typ) {
				// Not an answer: a frame of a run's stream, which the
				// relay checked the shape of. It is dropped, and counted.
				c.mu.Lock()
				n := c.nets[id]
				c.mu.Unlock()
				if n != nil {
					n.fault()
				}
				err = nil
				continue
			}
			m = &wire.Message{Type: wire.TypeError, ID: id, Error: &wire.Error{Code: wire.ErrProtocol,
				Message: "the answer could not be read: " + err.Error(), Cleanup: wire.Unknown("the answer could not be read")}}
			err = nil
		}
		switch m.Type {
		case wire.TypeOutput:
			// Part of a run's output: the run goes on. Parts of another
			// run than the one asked are not passed on.
			c.mu.Lock()
			d, ok := c.outputs[m.ID]
			c.mu.Unlock()
			if ok && m.Output.RunID == d.runID {
				d.spool.put(m.Output)
			}
			continue
		case wire.TypeFacts:
			c.mu.Lock()
			if c.waiting[m.ID] != nil {
				c.facts[m.ID] = m.Facts
			}
			c.mu.Unlock()
			continue
		case wire.TypeNetOpen, wire.TypeNetData, wire.TypeNetWindow, wire.TypeNetClose:
			// A frame of a run's stream. One of a run that may not reach
			// the network, or that is over, is dropped.
			c.mu.Lock()
			n := c.nets[m.ID]
			c.mu.Unlock()
			if n != nil {
				n.handle(m)
			}
			continue
		}
		c.mu.Lock()
		ch := c.waiting[m.ID]
		delete(c.waiting, m.ID)
		delete(c.outputs, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		} else if m.Type == wire.TypeError && m.ID == 0 {
			// The supervisor ends the connection with an unaddressed error.
			err = m.Error
			break
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("connection to the supervisor ended: %w", err)
	c.mu.Unlock()
	c.nc.Close()
	close(c.done)
}

// legacySupervisor is why a supervisor that frames as before protocol 3
// cannot be spoken to.
func legacySupervisor(p []byte) error {
	said := ""
	if m, ok := wire.LegacyHello(p); ok && m.Error != nil {
		said = " (it said: " + wire.EscapeName(m.Error.Message) + ")"
	}
	return &wire.Error{Code: wire.ErrProtocol, Message: fmt.Sprintf(
		"the supervisor speaks an older protocol than this pybox's %d%s", wire.ProtocolVersion, said)}
}

func (c *Client) cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return errors.New("connection closed")
	}
	return c.err
}
