package supervisor

import (
	"net"
	"sync"
	"time"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// peer is one host client connection. Answers are queued and written by the
// client's own goroutine, so a client that stops reading never blocks the
// guest's reader; one whose queue fills up is dropped.
type peer struct {
	nc        net.Conn
	logf      func(string, ...any)
	helloDone bool // touched only by the client's reading goroutine

	mu     sync.Mutex
	out    chan []byte
	closed bool
	done   chan struct{}
}

// newPeer is the peer of client connection nc, its writer started.
func newPeer(nc net.Conn, logf func(string, ...any)) *peer {
	c := &peer{nc: nc, logf: logf, out: make(chan []byte, clientQueue), done: make(chan struct{})}
	go c.write()
	return c
}

func (c *peer) write() {
	defer close(c.done)
	for p := range c.out {
		c.nc.SetWriteDeadline(time.Now().Add(clientWriteLimit))
		if err := frame.Write(c.nc, p); err != nil {
			c.logf("client: %v: disconnected", err)
			c.nc.Close()
			for range c.out {
			}
			return
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
