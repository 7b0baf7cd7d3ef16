package supervisor

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// peer is one host client connection. Answers are queued and written by the
// client's own goroutine, so a client that stops reading never blocks the
// guest's reader; one whose queue fills up is dropped.
//
// Its runs' stream frames have a queue of their own, netOut, which is
// never waited on: what bounds it is each run's netQueue budget (see
// passNet), not the client's pace.
type peer struct {
	nc        net.Conn
	logf      func(string, ...any)
	helloDone bool // touched only by the client's reading goroutine

	mu     sync.Mutex
	out    chan []byte
	netOut chan netItem
	closed bool
	done   chan struct{}
}

// netItem is a stream frame queued for a client, with the budget of the
// run it counts against.
type netItem struct {
	p []byte
	q *netQueue
}

// Bounds on a run's stream frames queued for its client. An honest guest
// sends a stream's data only within the credit the client granted after
// taking what came before (wire.NetWindow a stream, wire.MaxNetOpen
// streams at once), so its run never has more queued than the windows
// allow; the slack is for the open, window and close frames around them.
// A run past either bound has a guest that ignored the windows.
const (
	netBudgetBytes  = wire.MaxNetOpen*wire.NetWindow + 64<<10
	netBudgetFrames = 1024
)

// netQueue is what a run has queued for its client of its streams'
// frames: added by the guest's reader, taken off by the client's writer.
type netQueue struct {
	bytes, frames atomic.Int64
	// cancelled is set once the run broke the rules: its later stream
	// frames are dropped, so that its client never sees a stream go on
	// past a frame it missed. Touched only by the guest's reader.
	cancelled bool
}

// take counts a frame of n bytes, if it fits the budget.
func (q *netQueue) take(n int) bool {
	frames, bytes := q.frames.Add(1), q.bytes.Add(int64(n))
	if frames > netBudgetFrames || bytes > netBudgetBytes {
		q.give(n)
		return false
	}
	return true
}

// give takes a frame of n bytes off the count.
func (q *netQueue) give(n int) {
	q.frames.Add(-1)
	q.bytes.Add(-int64(n))
}

// newPeer is the peer of client connection nc, its writer started.
func newPeer(nc net.Conn, logf func(string, ...any)) *peer {
	c := &peer{nc: nc, logf: logf, out: make(chan []byte, clientQueue), netOut: make(chan netItem, netBudgetFrames), done: make(chan struct{})}
	go c.write()
	return c
}

// write writes what is queued for the client until its queue is closed.
// Stream frames queued before an answer are written before it: the guest
// sends every frame of a run's streams before its receipt, and the
// client must see them in that order.
func (c *peer) write() {
	defer close(c.done)
	for {
		var err error
		select {
		case p, ok := <-c.out:
			err = c.writeNetQueued()
			if !ok {
				return
			}
			if err == nil {
				err = c.writeFrame(p)
			}
		case it := <-c.netOut:
			err = c.writeNet(it)
		}
		if err != nil {
			c.logf("client: %v: disconnected", err)
			c.nc.Close()
			c.discard()
			return
		}
	}
}

// writeNetQueued writes the stream frames queued now, and no more: a
// guest that streams on must not hold an answer back.
func (c *peer) writeNetQueued() error {
	for n := len(c.netOut); n > 0; n-- {
		if err := c.writeNet(<-c.netOut); err != nil {
			return err
		}
	}
	return nil
}

func (c *peer) writeNet(it netItem) error {
	defer it.q.give(len(it.p))
	return c.writeFrame(it.p)
}

func (c *peer) writeFrame(p []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(clientWriteLimit))
	return frame.Write(c.nc, p)
}

// discard drops what is queued until the queue is closed (by close or
// queue, once the client is found gone).
func (c *peer) discard() {
	for {
		select {
		case _, ok := <-c.out:
			if !ok {
				return
			}
		case it := <-c.netOut:
			it.q.give(len(it.p))
		}
	}
}

// send queues m for the client. It never blocks: a client whose queue is
// full is dropped.
func (c *peer) send(m *wire.Message) { c.sendWithin(m, 0) }

// sendWithin is send waiting up to wait for room in the queue.
func (c *peer) sendWithin(m *wire.Message, wait time.Duration) {
	p, err := wire.Encode(m)
	if err != nil {
		c.logf("client: encoding %s: %v", m.Type, err)
		return
	}
	c.queue(p, wait)
}

// pass queues a frame's payload as it came (from the guest, its ID
// already the client's), waiting up to wait for room in the queue; a
// client that makes no room in that time is dropped.
func (c *peer) pass(p []byte, wait time.Duration) { c.queue(p, wait) }

// passNet queues a stream frame's payload as it came (its ID already the
// client's), counted against its run's budget q. It never waits: false
// says the frame was not queued, for it would take the run past its
// budget, or the client's stream queue is full (its runs together past
// one run's budget). A client that is gone takes the frame and drops it:
// its runs are being cancelled already (Relay.leave).
func (c *peer) passNet(p []byte, q *netQueue) bool {
	if !q.take(len(p)) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		q.give(len(p))
		return true
	}
	select {
	case c.netOut <- netItem{p, q}:
		return true
	default:
		q.give(len(p))
		return false
	}
}

func (c *peer) queue(p []byte, wait time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	select {
	case c.out <- p:
		return
	default:
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case c.out <- p:
			return
		case <-t.C:
		}
	}
	c.logf("client: not reading its answers: disconnected")
	c.closed = true
	close(c.out)
	c.nc.Close()
}

func (c *peer) sendErr(id uint64, code, msg string, cleanup *wire.Cleanup) {
	m := errorMessage(code, msg, cleanup)
	m.ID = id
	c.send(m)
}

// closeAfterSend lets queued answers go out, then closes the connection.
func (c *peer) closeAfterSend() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.out)
	}
	c.mu.Unlock()
	select {
	case <-c.done:
	case <-time.After(clientWriteLimit):
	}
	c.nc.Close()
}

func (c *peer) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.out)
	}
	c.mu.Unlock()
	c.nc.Close()
}
