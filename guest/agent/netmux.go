package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"

	"pybox/shared/wire"
)

// A run that opens the network (wire.Run.Net) carries streams: each
// connection its program makes to the box's proxy, which the box hands to
// the run's taker (netRun.take), becomes one, numbered from 1 in the order
// they came, and its bytes travel both ways in the run's stream frames on
// the connection the run came from (see wire.TypeNetOpen), addressed by
// the run's message ID as its output is. The agent never reads what a
// stream carries: it relays bytes as they come, within the credit each
// side granted the other, so no side buffers more than wire.NetWindow of
// a stream each way.
//
// The host is the stricter side of every stream: whatever it sends wrong
// (data past the credit it was granted, a window past wire.NetWindow, data
// after its fin, a second fin) aborts that stream alone, logged, and the
// run goes on. A frame for a stream that has ended is dropped (frames
// cross an end), and one for a stream never opened is dropped and logged;
// neither is answered, so that two sides that disagree about a stream
// never answer each other's closes for ever. The serving loop never waits on a stream: a host frame only
// updates the stream's state, and each stream's two goroutines do the
// waiting (for the program, for credit, for the connection to the host).
//
// When the run ends, however it ends, closeAll closes every connection of
// the box, waits for the streams' goroutines and aborts the streams still
// open, before the run's answer is sent: on the ordered connection every
// frame of a run's streams precedes its receipt, so the host has them all
// once it has the receipt.

// maxNetNotes bounds the log lines a run's streams write; the rest are
// counted, in the line closeAll writes.
const maxNetNotes = 16

// netRun is the streams of one run.
type netRun struct {
	conn  *conn  // the connection the run came from
	id    uint64 // the run's message ID, which every frame of its streams carries
	runID string
	logf  func(string, ...any)

	wg sync.WaitGroup // the streams' goroutines

	mu      sync.Mutex
	streams map[uint32]*netStream // the streams not ended yet, by number
	next    uint32                // the number of the last stream taken
	// announced is the number of the last stream whose net_open was
	// sent: the streams announce themselves in turn, so that the host
	// sees their numbers in order.
	announced uint32
	turn      sync.Cond // on mu: announced moved, or the run is ending
	closed    bool      // the run is ending: no new stream, no host frame taken
	notes     int       // problems met, logged up to maxNetNotes
}

// netStream is one connection of the box, carried as a stream.
type netStream struct {
	run  *netRun
	num  uint32
	c    net.Conn  // the program's connection; closed once
	wake sync.Cond // on run.mu: credit, data, a fin or an end came

	closeOnce sync.Once

	// Under run.mu.
	opened bool   // its net_open is sent, or being sent: the host knows it
	credit int    // bytes the host lets this side send still
	in     []byte // the host's bytes not yet written to c
	grant  int    // bytes this side lets the host send still
	finIn  bool   // the host sent fin: after in, c is half-closed
	inDone bool   // c is half-closed after the host's fin
	finOut bool   // this side sent fin: the program closed its side
	// dead: aborted, by either side. One the host aborted is out of
	// streams at once; one still in it was aborted by this side, which
	// owes the host a net_close abort.
	dead    bool
	running int // the stream's goroutines still running
}

func newNetRun(c *conn, id uint64, runID string, logf func(string, ...any)) *netRun {
	n := &netRun{conn: c, id: id, runID: runID, logf: logf, streams: map[uint32]*netStream{}}
	n.turn.L = &n.mu
	return n
}

// take makes the box's connection c a stream of the run, with the next
// number, and starts the stream's goroutines, the first of which
// announces it (net_open). It is the run's taker (box.Runner.Run's
// conns), called from one goroutine, and waits for nothing. Once the run
// is ending it takes nothing: the box closes what it did not take.
func (n *netRun) take(c net.Conn) bool {
	n.mu.Lock()
	if n.closed || n.next >= wire.MaxNetStreams {
		// The box hands over no more than MaxNetStreams; this is the
		// host's bound too, so it is kept here whatever the box does.
		n.mu.Unlock()
		return false
	}
	n.next++
	s := &netStream{run: n, num: n.next, c: c, credit: wire.NetWindow, grant: wire.NetWindow, running: 2}
	s.wake.L = &n.mu
	n.streams[s.num] = s
	// Added before closeAll can set closed, so before it waits.
	n.wg.Add(2)
	n.mu.Unlock()
	go s.up()
	go s.down()
	return true
}

// handle takes a stream frame from the host (net_data, net_window or
// net_close) without waiting: it updates its stream and wakes the
// stream's goroutines. A frame for a stream that ended (its frames cross
// the end) or for a run that is ending is dropped; one for a stream never
// opened is dropped and logged; one that breaks the stream's rules aborts
// the stream.
func (n *netRun) handle(m *wire.Message) {
	f := m.Net
	n.mu.Lock()
	s := n.streams[f.Stream]
	switch {
	case n.closed:
		n.mu.Unlock()
		return
	case s == nil && f.Stream > n.next, s != nil && !s.opened:
		n.mu.Unlock()
		// There is nothing to abort, and no answer is sent: answering a
		// close with a close could go on for ever between two sides
		// that disagree.
		n.note("the host sent %s for stream %d, which was never opened: dropped", m.Type, f.Stream)
		return
	case s == nil || s.dead:
		n.mu.Unlock()
		return
	}
	var bad string
	switch m.Type {
	case wire.TypeNetData:
		switch {
		case s.finIn:
			bad = "data after its fin"
		case len(f.Data) > s.grant:
			bad = fmt.Sprintf("%d bytes of data with a credit of %d", len(f.Data), s.grant)
		default:
			s.grant -= len(f.Data)
			s.in = append(s.in, f.Data...)
			s.wake.Broadcast()
		}
	case wire.TypeNetWindow:
		if s.credit+int(f.Window) > wire.NetWindow {
			bad = fmt.Sprintf("a window of %d bytes over a credit of %d, past the %d a stream may have", f.Window, s.credit, wire.NetWindow)
		} else {
			s.credit += int(f.Window)
			s.wake.Broadcast()
		}
	case wire.TypeNetClose:
		if f.Abort {
			// The host freed the stream: nothing more is sent for it.
			s.dead = true
			delete(n.streams, s.num)
			s.wake.Broadcast()
			n.mu.Unlock()
			s.close(true)
			return
		}
		if s.finIn {
			bad = "a second fin"
		} else {
			s.finIn = true
			s.wake.Broadcast()
		}
	default:
		bad = "a " + m.Type + " frame"
	}
	n.mu.Unlock()
	if bad != "" {
		s.fail("the host sent " + bad)
	}
}

// closeAll ends the run's streams: it takes no more connections, closes
// every connection of the box, waits for the streams' goroutines and sends
// net_close abort for each stream still open. Once it returns nothing more
// is sent for the run's streams, so the run's answer may follow. It does
// not wait for the box: a box still running after the watchdog has the
// connections it hands over refused (take), and those it handed over
// closed.
func (n *netRun) closeAll() {
	n.mu.Lock()
	n.closed = true
	open := make([]*netStream, 0, len(n.streams))
	for _, s := range n.streams {
		open = append(open, s)
		s.wake.Broadcast()
	}
	n.turn.Broadcast()
	n.mu.Unlock()
	for _, s := range open {
		s.close(true)
	}
	n.wg.Wait()
	n.mu.Lock()
	var left []uint32 // the streams the host knows of
	for num, s := range n.streams {
		if s.opened {
			left = append(left, num)
		}
	}
	slices.Sort(left)
	clear(n.streams)
	opened, unlogged := n.next, n.notes-maxNetNotes
	n.mu.Unlock()
	for _, num := range left {
		n.send(wire.TypeNetClose, &wire.NetFrame{Stream: num, Abort: true})
	}
	if opened > 0 {
		n.logf("agent: run %s: %d connection(s) carried, %d still open at its end: aborted", n.runID, opened, len(left))
	}
	if unlogged > 0 {
		n.logf("agent: run %s: %d more problems with its streams, not logged", n.runID, unlogged)
	}
}

// send writes one frame of the run's streams to the host.
func (n *netRun) send(typ string, f *wire.NetFrame) error {
	return n.conn.send(&wire.Message{Type: typ, ID: n.id, Net: f})
}

// note logs a problem of the run's streams, up to maxNetNotes of them.
func (n *netRun) note(format string, args ...any) {
	n.mu.Lock()
	n.notes++
	k := n.notes
	n.mu.Unlock()
	if k <= maxNetNotes {
		n.logf("agent: run %s: "+format, append([]any{n.runID}, args...)...)
	}
}

// announce sends the stream's net_open, once the streams before it have
// sent theirs. It says false when the stream will not be carried: the run
// is ending, or the connection to the host failed.
func (s *netStream) announce() bool {
	n := s.run
	n.mu.Lock()
	for n.announced != s.num-1 && !n.closed {
		n.turn.Wait()
	}
	if n.closed {
		n.mu.Unlock()
		return false
	}
	// Opened before the frame is sent: the host may answer it before
	// the write returns.
	s.opened = true
	n.mu.Unlock()
	err := n.send(wire.TypeNetOpen, &wire.NetFrame{Stream: s.num})
	n.mu.Lock()
	n.announced = s.num
	n.turn.Broadcast()
	n.mu.Unlock()
	if err != nil {
		s.fail("sending its net_open: " + err.Error())
		return false
	}
	return true
}

// up announces the stream, then carries what the program writes to the
// host: it reads no more than the host's credit, in frames of at most
// wire.MaxNetChunk, and sends fin when the program has closed its side.
// It reads only with credit, so a program that closes its side just as
// its credit runs out has its fin sent when the host grants more, as it
// does once it has read what came.
func (s *netStream) up() {
	n := s.run
	defer n.wg.Done()
	defer s.exit()
	if !s.announce() {
		return
	}
	buf := make([]byte, wire.MaxNetChunk)
	for {
		n.mu.Lock()
		for s.credit == 0 && !s.dead && !n.closed {
			s.wake.Wait()
		}
		if s.dead || n.closed {
			n.mu.Unlock()
			return
		}
		want := min(s.credit, len(buf))
		n.mu.Unlock()
		k, err := s.c.Read(buf[:want])
		if k > 0 {
			n.mu.Lock()
			s.credit -= k
			n.mu.Unlock()
			if err := n.send(wire.TypeNetData, &wire.NetFrame{Stream: s.num, Data: buf[:k]}); err != nil {
				s.fail("sending its data: " + err.Error())
				return
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			if err := n.send(wire.TypeNetClose, &wire.NetFrame{Stream: s.num}); err != nil {
				s.fail("sending its fin: " + err.Error())
				return
			}
			n.mu.Lock()
			s.finOut = true
			n.mu.Unlock()
			return
		case err != nil:
			s.fail("reading from the program: " + err.Error())
			return
		}
	}
}

// down carries the host's bytes to the program, granting the host more
// credit as they are written (once a quarter of the window has been, so
// that windows are few), and half-closes the connection after the host's
// fin.
func (s *netStream) down() {
	n := s.run
	defer n.wg.Done()
	defer s.exit()
	var out []byte
	written := 0 // bytes written and not yet granted back
	for {
		n.mu.Lock()
		for len(s.in) == 0 && !s.finIn && !s.dead && !n.closed {
			s.wake.Wait()
		}
		if s.dead || n.closed {
			n.mu.Unlock()
			return
		}
		if len(s.in) == 0 {
			// The host's fin, after all it sent.
			n.mu.Unlock()
			if err := closeWrite(s.c); err != nil {
				s.fail("half-closing the program's connection: " + err.Error())
				return
			}
			n.mu.Lock()
			s.inDone = true
			n.mu.Unlock()
			return
		}
		out, s.in = s.in, out[:0]
		n.mu.Unlock()
		if _, err := s.c.Write(out); err != nil {
			s.fail("writing to the program: " + err.Error())
			return
		}
		written += len(out)
		if written >= wire.NetWindow/4 {
			n.mu.Lock()
			s.grant += written
			n.mu.Unlock()
			if err := n.send(wire.TypeNetWindow, &wire.NetFrame{Stream: s.num, Window: uint32(written)}); err != nil {
				s.fail("sending its window: " + err.Error())
				return
			}
			written = 0
		}
	}
}

// closeWrite half-closes c: the program reads the end of what the host
// sent, and may still write. The box's connections are TCP ones; a
// connection that cannot half-close stays open until the stream ends.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// fail aborts the stream from this side, for why (logged): the program's
// connection is reset, and the stream's last goroutine to end sends the
// host net_close abort. A stream already aborted, or of a run that is
// ending (closeAll aborts it), is left as it is.
func (s *netStream) fail(why string) {
	n := s.run
	n.mu.Lock()
	if s.dead || n.closed {
		n.mu.Unlock()
		return
	}
	s.dead = true
	s.wake.Broadcast()
	n.mu.Unlock()
	n.note("stream %d aborted: %s", s.num, why)
	s.close(true)
}

// exit is the end of one of the stream's goroutines. The last one ends
// the stream: closes the program's connection and frees the stream, and
// sends the host the abort this side owes it. A stream of a run that is
// ending stays for closeAll, unless it had ended both ways already.
func (s *netStream) exit() {
	n := s.run
	n.mu.Lock()
	s.running--
	if s.running > 0 {
		n.mu.Unlock()
		return
	}
	owed := false
	switch {
	case n.streams[s.num] != s:
		// The host aborted it, and freed it then.
	case s.finOut && s.inDone && !s.dead:
		delete(n.streams, s.num)
	case n.closed:
		n.mu.Unlock()
		return
	default:
		delete(n.streams, s.num)
		owed = true
	}
	owed = owed && s.opened
	n.mu.Unlock()
	s.close(owed)
	if owed {
		n.send(wire.TypeNetClose, &wire.NetFrame{Stream: s.num, Abort: true})
	}
}

// close closes the program's connection once; reset makes it an abort
// the program sees (a TCP reset), not the end of the stream.
func (s *netStream) close(reset bool) {
	s.closeOnce.Do(func() {
		if l, ok := s.c.(interface{ SetLinger(int) error }); ok && reset {
			l.SetLinger(0)
		}
		s.c.Close()
	})
}
