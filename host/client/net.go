package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"pybox/host/egress"
	"pybox/shared/wire"
)

// A run that may reach the network (wire.Run.Net) carries streams: each
// connection its program opens to the box's proxy comes from the guest
// as a stream of the run's frames (wire.TypeNetOpen ...), and is served
// here, in the process that made the run, by the caller's egress.Gate.
// The guest is not trusted with them: every frame it sends is checked
// against the rules of the streams (ids in order, the bounds, the
// windows this side granted), and one that breaks them aborts its
// stream and is counted in the receipt (wire.Network.Faults). The read
// loop hands the frames over and never waits on a stream: a stream's
// data waits in its buffer, which the window bounds, for the gate to
// read it.

// Errors of a stream, as the gate reads them.
var (
	errStreamReset  = errors.New("client: the box reset the connection")
	errStreamBroken = errors.New("client: the guest broke the rules of the stream; it was aborted")
	errStreamEnded  = errors.New("client: the run ended")
)

// netWait is how long a run's result waits for the gate to end its
// connections once the run is over.
const netWait = 2 * time.Second

// netCall is one run's streams and the gate that serves them.
type netCall struct {
	c      *Client
	id     uint64 // the run's message ID; set by sendWith before the run is sent
	gate   *egress.Gate
	ctx    context.Context // the gate's: cancelled when the run is over
	cancel context.CancelFunc
	wg     sync.WaitGroup // the gate's Serve of each stream
	// ctl holds what the read loop has to send (aborts, windows given
	// back), which it never writes itself: a goroutine does. When it is
	// full the guest is flooding the run with faults, and what does not
	// fit is not sent.
	ctl chan control

	mu      sync.Mutex
	streams map[uint32]*stream // open: not yet closed both ways, nor aborted
	last    uint32             // the last stream opened
	opened  int                // streams opened in all
	faults  int
	ended   bool
}

// control is a frame the read loop wants sent: an abort of stream id
// (st, when it was one the host took), or window given back to st.
type control struct {
	st     *stream
	id     uint32
	window uint32
}

func newNetCall(c *Client, gate *egress.Gate) *netCall {
	ctx, cancel := context.WithCancel(context.Background())
	n := &netCall{c: c, gate: gate, ctx: ctx, cancel: cancel, ctl: make(chan control, 4*wire.MaxNetOpen),
		streams: map[uint32]*stream{}}
	go n.sendControls()
	return n
}

// handle takes one of the guest's stream frames for the run, from the
// read loop: it never waits.
func (n *netCall) handle(m *wire.Message) {
	f := m.Net
	if m.Type == wire.TypeNetOpen {
		n.open(f.Stream)
		return
	}
	n.mu.Lock()
	st, last := n.streams[f.Stream], n.last
	n.mu.Unlock()
	switch {
	case st != nil:
		st.take(m.Type, f)
	case f.Stream > last:
		// A frame of a stream never opened.
		n.fault()
	default:
		// A stream that ended: its last frames crossed the end.
	}
}

// open takes a stream the guest opened: its id must be past every one
// before, within the run's bounds.
func (n *netCall) open(id uint32) {
	n.mu.Lock()
	if n.ended {
		n.mu.Unlock()
		return
	}
	st := n.streams[id]
	ok := id > n.last
	if ok {
		n.last = id
		n.opened++
		ok = n.opened <= wire.MaxNetStreams && len(n.streams) < wire.MaxNetOpen
	}
	if ok {
		st = newStream(n, id)
		n.streams[id] = st
		n.wg.Add(1)
	}
	n.mu.Unlock()
	switch {
	case !ok && st != nil:
		// The id of an open stream, again: that stream is aborted.
		st.broke()
	case !ok:
		n.fault()
		n.post(control{id: id})
	default:
		go func() {
			defer n.wg.Done()
			n.gate.Serve(n.ctx, st)
		}()
	}
}

// fault counts a frame of the guest that broke the rules.
func (n *netCall) fault() {
	n.mu.Lock()
	n.faults++
	n.mu.Unlock()
}

// free forgets st, closed both ways or aborted.
func (n *netCall) free(st *stream) {
	n.mu.Lock()
	if n.streams[st.id] == st {
		delete(n.streams, st.id)
	}
	n.mu.Unlock()
}

// post queues a frame for the control goroutine, unless the queue is
// full.
func (n *netCall) post(ctl control) {
	select {
	case n.ctl <- ctl:
	default:
	}
}

// sendControls sends what the read loop posted, until the run is over.
func (n *netCall) sendControls() {
	for {
		select {
		case <-n.ctx.Done():
			return
		case ctl := <-n.ctl:
			if ctl.st == nil {
				n.send(wire.TypeNetClose, &wire.NetFrame{Stream: ctl.id, Abort: true})
			} else if ctl.window > 0 {
				ctl.st.grant(ctl.window)
			} else {
				ctl.st.sendAbort()
			}
		}
	}
}

// send writes one frame of the run's streams.
func (n *netCall) send(typ string, f *wire.NetFrame) error {
	if n.ctx.Err() != nil {
		return errStreamEnded
	}
	return n.c.writeFrame(&wire.Message{Type: typ, ID: n.id, Net: f})
}

// finish ends the run's streams, once its answer came (or none will):
// nothing more of them is sent or taken, the gate's connections are
// closed, and, once they ended (within netWait), the gate's records are
// the run's network section.
func (n *netCall) finish() *wire.Network {
	n.c.mu.Lock()
	delete(n.c.nets, n.id)
	n.c.mu.Unlock()
	n.mu.Lock()
	n.ended = true
	var open []*stream
	for _, st := range n.streams {
		open = append(open, st)
	}
	n.mu.Unlock()
	for _, st := range open {
		st.end(errStreamEnded)
	}
	n.cancel()
	done := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(netWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	n.mu.Lock()
	faults := n.faults
	n.mu.Unlock()
	return network(n.gate.Allow.String(), n.gate.Records(), faults)
}

// network is a run's network section of the gate's records.
func network(allowed string, recs []egress.Record, faults int) *wire.Network {
	nw := &wire.Network{Allowed: allowed, Connections: []wire.NetConnection{}, Faults: faults}
	for _, r := range recs {
		if !r.Allowed {
			nw.Refused++
		}
		nw.SentBytes += r.Sent
		nw.ReceivedBytes += r.Received
		if len(nw.Connections) == wire.MaxNetListed {
			nw.NotListed++
			continue
		}
		nw.Connections = append(nw.Connections, r)
	}
	return nw
}

// stream is one connection of the box, as the gate serves it: Read has
// what the guest sent, Write sends to the guest, Close says the host
// sends no more.
type stream struct {
	n  *netCall
	id uint32

	// smu is held while a frame of the stream is written, so that none
	// follows its abort. It is never taken by the read loop.
	smu sync.Mutex

	mu      sync.Mutex // never held while waiting for anything but cond
	cond    *sync.Cond
	in      bytes.Buffer // what the guest sent, not yet read
	credit  int          // what the guest may still send
	unsent  int          // what was read and not yet granted back
	out     int          // what this side may still send
	finIn   bool         // the guest sends no more
	closed  bool         // Close was called: this side sends no more
	err     error        // aborted or ended: every Read and Write fails with it
	aborted bool         // the host aborts the stream: its net_close is to be sent
	freed   bool
}

func newStream(n *netCall, id uint32) *stream {
	st := &stream{n: n, id: id, credit: wire.NetWindow, out: wire.NetWindow}
	st.cond = sync.NewCond(&st.mu)
	return st
}

// take is a frame of the stream from the guest, from the read loop.
func (st *stream) take(typ string, f *wire.NetFrame) {
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return
	}
	var giveBack uint32
	switch typ {
	case wire.TypeNetData:
		if st.finIn || len(f.Data) > st.credit {
			st.mu.Unlock()
			st.broke()
			return
		}
		st.credit -= len(f.Data)
		if st.closed {
			// The host reads no more: what comes is dropped, and its
			// window given back, so that the guest gets to its end.
			st.credit += len(f.Data)
			giveBack = uint32(len(f.Data))
		} else {
			st.in.Write(f.Data)
		}
	case wire.TypeNetWindow:
		if st.out+int(f.Window) > wire.NetWindow {
			st.mu.Unlock()
			st.broke()
			return
		}
		st.out += int(f.Window)
	case wire.TypeNetClose:
		if f.Abort {
			st.err, st.freed = errStreamReset, true
			st.in.Reset()
			st.cond.Broadcast()
			st.mu.Unlock()
			st.n.free(st)
			return
		}
		if st.finIn {
			st.mu.Unlock()
			st.broke()
			return
		}
		st.finIn = true
	}
	st.cond.Broadcast()
	free := st.done()
	st.mu.Unlock()
	if free {
		st.n.free(st)
	}
	if giveBack > 0 {
		st.n.post(control{st: st, window: giveBack})
	}
}

// done says, once, whether the stream is over both ways. st.mu is held.
func (st *stream) done() bool {
	if st.freed || !st.finIn || !st.closed {
		return false
	}
	st.freed = true
	return true
}

// broke aborts the stream for a frame of the guest that broke its
// rules, and counts it.
func (st *stream) broke() {
	st.n.fault()
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return
	}
	st.err, st.aborted, st.freed = errStreamBroken, true, true
	st.in.Reset()
	st.cond.Broadcast()
	st.mu.Unlock()
	st.n.free(st)
	st.n.post(control{st: st})
}

// end fails every Read and Write of the stream with err; nothing more
// of it is sent.
func (st *stream) end(err error) {
	st.mu.Lock()
	if st.err == nil {
		st.err = err
	}
	st.in.Reset()
	st.cond.Broadcast()
	st.mu.Unlock()
}

// sendAbort sends the stream's abort, after whatever frame of it is
// being written.
func (st *stream) sendAbort() {
	st.smu.Lock()
	defer st.smu.Unlock()
	st.mu.Lock()
	send := st.aborted
	st.aborted = false
	st.mu.Unlock()
	if send {
		st.n.send(wire.TypeNetClose, &wire.NetFrame{Stream: st.id, Abort: true})
	}
}

// grant gives the guest w bytes more of window, unless the stream was
// aborted or ended.
func (st *stream) grant(w uint32) error {
	st.smu.Lock()
	defer st.smu.Unlock()
	st.mu.Lock()
	err := st.err
	st.mu.Unlock()
	if err != nil {
		return err
	}
	return st.n.send(wire.TypeNetWindow, &wire.NetFrame{Stream: st.id, Window: w})
}

// Read reads what the guest sent; the window is granted back as it is
// read.
func (st *stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	st.mu.Lock()
	for st.in.Len() == 0 && !st.finIn && !st.closed && st.err == nil {
		st.cond.Wait()
	}
	switch {
	case st.err != nil:
		st.mu.Unlock()
		return 0, st.err
	case st.closed:
		st.mu.Unlock()
		return 0, io.ErrClosedPipe
	case st.in.Len() == 0:
		st.mu.Unlock()
		return 0, io.EOF
	}
	k, _ := st.in.Read(p)
	st.unsent += k
	var w int
	if st.unsent >= wire.NetWindow/4 && !st.finIn {
		w, st.unsent = st.unsent, 0
		st.credit += w
	}
	st.mu.Unlock()
	if w > 0 {
		if err := st.grant(uint32(w)); err != nil {
			return k, nil // the next Read says why
		}
	}
	return k, nil
}

// Write sends p to the guest, in frames of at most wire.MaxNetChunk
// bytes, each within the window the guest granted: it waits for more.
func (st *stream) Write(p []byte) (int, error) {
	sent := 0
	for sent < len(p) {
		st.mu.Lock()
		for st.out == 0 && !st.closed && st.err == nil {
			st.cond.Wait()
		}
		err := st.err
		if err == nil && st.closed {
			err = io.ErrClosedPipe
		}
		if err != nil {
			st.mu.Unlock()
			return sent, err
		}
		k := min(len(p)-sent, wire.MaxNetChunk, st.out)
		st.out -= k
		st.mu.Unlock()
		if err := st.sendData(p[sent : sent+k]); err != nil {
			return sent, err
		}
		sent += k
	}
	return sent, nil
}

// sendData writes a frame of data, unless the stream was aborted or
// ended meanwhile.
func (st *stream) sendData(b []byte) error {
	st.smu.Lock()
	defer st.smu.Unlock()
	st.mu.Lock()
	err := st.err
	st.mu.Unlock()
	if err != nil {
		return err
	}
	if err := st.n.send(wire.TypeNetData, &wire.NetFrame{Stream: st.id, Data: b}); err != nil {
		st.end(err)
		return err
	}
	return nil
}

// Close says the host sends no more (fin), once. What the guest still
// sends is dropped, its window given back, until its own end.
func (st *stream) Close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	st.closed = true
	w := st.in.Len() + st.unsent
	st.in.Reset()
	st.unsent = 0
	if st.finIn {
		w = 0
	}
	st.credit += w
	err := st.err
	free := st.done()
	st.cond.Broadcast()
	st.mu.Unlock()
	if err != nil {
		return nil
	}
	st.smu.Lock()
	st.mu.Lock()
	err = st.err
	st.mu.Unlock()
	if err == nil {
		st.n.send(wire.TypeNetClose, &wire.NetFrame{Stream: st.id})
	}
	st.smu.Unlock()
	if free {
		st.n.free(st)
	}
	if w > 0 && err == nil {
		st.grant(uint32(w))
	}
	return nil
}

// isNet says whether typ is a kind of a stream's frame.
func isNet(typ string) bool {
	return typ == wire.TypeNetOpen || typ == wire.TypeNetData || typ == wire.TypeNetWindow || typ == wire.TypeNetClose
}
