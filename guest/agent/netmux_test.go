package agent

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// newNetAgent is newAgent whose log stays quiet once the test is over:
// runs ended by a lost connection or the watchdog log after their answer.
func newNetAgent(t *testing.T, r *fakeRunner, watchdog time.Duration) *Agent {
	var mu sync.Mutex
	over := false
	t.Cleanup(func() {
		mu.Lock()
		over = true
		mu.Unlock()
	})
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !over {
			t.Logf(format, args...)
		}
	}
	cfg := Config{Kernel: "6.1.0-test", Images: testImages, Runner: r, Logf: logf, WriteTimeout: 2 * time.Second}
	if watchdog > 0 {
		cfg.Watchdog = func(*wire.Run) time.Duration { return watchdog }
	}
	return New(cfg)
}

func netRunReq(id string) *wire.Run {
	r := validRun(id)
	r.Net = true
	return r
}

// taker is the conns the fake runner got for run runID.
func (f *fakeRunner) taker(runID string) func(net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.takers[runID]
}

// sendNet sends a stream frame of the run whose request had ID id.
func (h *host) sendNet(id uint64, typ string, nf *wire.NetFrame) {
	h.t.Helper()
	p, err := wire.Encode(&wire.Message{Type: typ, ID: id, Net: nf})
	if err != nil {
		h.t.Fatal(err)
	}
	h.sendRaw(p)
}

// recvWithin receives one message, or nil when none comes within d.
func (h *host) recvWithin(d time.Duration) *wire.Message {
	h.t.Helper()
	h.c.SetReadDeadline(time.Now().Add(d))
	p, err := frame.Read(h.c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err != nil {
		h.t.Fatalf("host read: %v", err)
	}
	m, err := wire.Decode(p)
	if err != nil {
		h.t.Fatalf("host decode: %v", err)
	}
	return m
}

// expectNet receives a stream frame of typ for stream num of the run id.
func (h *host) expectNet(id uint64, typ string, num uint32) *wire.NetFrame {
	h.t.Helper()
	m := h.expect(id, typ)
	if m.Net.Stream != num {
		h.t.Fatalf("%s for stream %d, want %d", typ, m.Net.Stream, num)
	}
	return m.Net
}

// expectAbort receives net_close abort for stream num of the run id.
func (h *host) expectAbort(id uint64, num uint32) {
	h.t.Helper()
	if f := h.expectNet(id, wire.TypeNetClose, num); !f.Abort {
		h.t.Fatalf("stream %d: fin, want abort", num)
	}
}

// openStream hands the run a connection, as the box does, and returns
// the program's end of it once the host has its net_open.
func openStream(t *testing.T, h *host, take func(net.Conn) bool, id uint64, num uint32) net.Conn {
	t.Helper()
	boxEnd, prog := net.Pipe()
	t.Cleanup(func() { prog.Close() })
	if !take(boxEnd) {
		t.Fatal("the run did not take a connection")
	}
	h.expectNet(id, wire.TypeNetOpen, num)
	return prog
}

// tcpPair is a TCP connection on the loopback: the box's end and the
// program's, which can half-close.
func tcpPair(t *testing.T) (boxEnd, prog *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); d.Close() })
	return a.(*net.TCPConn), d.(*net.TCPConn)
}

// readN reads n bytes from c, or fails.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("the program read %d bytes: %v", n, err)
	}
	return b
}

// expectClosed says that the program's connection was closed by the agent.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the program's connection is still open")
	}
}

// waitStreams waits until run runID has n streams not ended.
func waitStreams(t *testing.T, a *Agent, runID string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		nr := a.runs[runID].net
		a.mu.Unlock()
		nr.mu.Lock()
		got := len(nr.streams)
		nr.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s has %d streams, want %d", runID, got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The agent announces that it carries streams; a run without the network
// gets no taker, and stream frames for it are dropped, not answered.
func TestNetOnlyForNetRuns(t *testing.T) {
	r := newFakeRunner()
	h := connect(t, newNetAgent(t, r, 0))
	if caps := h.hello().Capabilities; !slices.Contains(caps, wire.CapNet) {
		t.Errorf("capabilities %v lack %q", caps, wire.CapNet)
	}
	run := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("plain")})
	<-r.started
	if r.taker("plain") != nil {
		t.Fatal("a run without the network got a taker")
	}
	h.sendNet(run, wire.TypeNetData, &wire.NetFrame{Stream: 1, Data: []byte("x")})
	h.sendNet(run, wire.TypeNetOpen, &wire.NetFrame{Stream: 1})
	h.sendNet(999, wire.TypeNetClose, &wire.NetFrame{Stream: 1, Abort: true})
	id := h.send(&wire.Message{Type: wire.TypePing})
	h.expect(id, wire.TypePong)
	r.release <- struct{}{}
	h.expect(run, wire.TypeReceipt)
}

// A connection of the box is a stream both ways: opened, its bytes sent
// as data, the host's written to the program; the program's close is a
// fin, the host's fin a half-close the program reads as its end, after
// which the program may still write. A stream ended both ways is not
// aborted when the run ends: the receipt follows at once.
func TestNetStreamBothWays(t *testing.T) {
	r := newFakeRunner()
	a := newNetAgent(t, r, 0)
	h := connect(t, a)
	h.hello()
	run := h.send(&wire.Message{Type: wire.TypeRun, Run: netRunReq("n")})
	<-r.started
	take := r.taker("n")
	if take == nil {
		t.Fatal("a run with the network got no taker")
	}

	prog := openStream(t, h, take, run, 1)
	go prog.Write([]byte("ping"))
	if f := h.expectNet(run, wire.TypeNetData, 1); string(f.Data) != "ping" {
		t.Fatalf("data %q", f.Data)
	}
	h.sendNet(run, wire.TypeNetData, &wire.NetFrame{Stream: 1, Data: []byte("pong")})
	if got := readN(t, prog, 4); string(got) != "pong" {
		t.Fatalf("the program read %q", got)
	}
	prog.Close()
	if f := h.expectNet(run, wire.TypeNetClose, 1); f.Abort {
		t.Fatal("the program's close sent an abort, want fin")
	}
	h.sendNet(run, wire.TypeNetClose, &wire.NetFrame{Stream: 1})
	waitStreams(t, a, "n", 0)

	// A second connection, which can half-close.
	boxEnd, tprog := tcpPair(t)
	if !take(boxEnd) {
		t.Fatal("not taken")
	}
	h.expectNet(run, wire.TypeNetOpen, 2)
	h.sendNet(run, wire.TypeNetData, &wire.NetFrame{Stream: 2, Data: []byte("GET / HTTP/1.1\r\n\r\n")})
	h.sendNet(run, wire.TypeNetClose, &wire.NetFrame{Stream: 2})
	tprog.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(tprog); err != nil || string(got) != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("the program read %q, %v; want the host's bytes, then its end", got, err)
	}
	if _, err := tprog.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	if f := h.expectNet(run, wire.TypeNetData, 2); string(f.Data) != "after" {
		t.Fatalf("data %q", f.Data)
	}
	tprog.CloseWrite()
	if f := h.expectNet(run, wire.TypeNetClose, 2); f.Abort {
		t.Fatal("abort, want fin")
	}
	waitStreams(t, a, "n", 0)

	r.release <- struct{}{}
	h.expect(run, wire.TypeReceipt)
	if take(&net.TCPConn{}) {
		t.Fatal("a connection was taken after the run ended")
	}
}

// The agent sends no more of a stream than the host granted: NetWindow
// at first, then what each net_window adds; it grants the host more as
// the program reads, and a host that sends past its credit has the
// stream aborted.
func TestNetWindows(t *testing.T) {
	r := newFakeRunner()
	a := newNetAgent(t, r, 0)
	h := connect(t, a)
	h.hello()
	run := h.send(&wire.Message{Type: wire.TypeRun, Run: netRunReq("w")})
	<-r.started
	take := r.taker("w")

	// Guest to host.
	prog := openStream(t, h, take, run, 1)
	sent := bytes.Repeat([]byte("0123456789abcdef"), (wire.NetWindow+40<<10)/16)
	go func() {
		prog.Write(sent)
		prog.Close()
	}()
	var got []byte
	recvData := func(want int) {
		t.Helper()
		for n := 0; n < want; {
			f := h.expectNet(run, wire.TypeNetData, 1)
			if len(f.Data) > wire.MaxNetChunk {
				t.Fatalf("a frame of %d bytes", len(f.Data))
			}
			n += len(f.Data)
			if n > want {
				t.Fatalf("%d bytes sent with a credit of %d", n, want)
			}
			got = append(got, f.Data...)
		}
		if m := h.recvWithin(200 * time.Millisecond); m != nil {
			t.Fatalf("%s (%d bytes) past the credit", m.Type, len(m.Net.Data))
		}
	}
	recvData(wire.NetWindow)
	h.sendNet(run, wire.TypeNetWindow, &wire.NetFrame{Stream: 1, Window: 16 << 10})
	recvData(16 << 10)
	h.sendNet(run, wire.TypeNetWindow, &wire.NetFrame{Stream: 1, Window: 32 << 10})
	for n := 0; n < len(sent)-wire.NetWindow-16<<10; {
		f := h.expectNet(run, wire.TypeNetData, 1)
		n += len(f.Data)
		got = append(got, f.Data...)
	}
	if !bytes.Equal(got, sent) {
		t.Fatalf("the host got %d bytes, not the %d the program sent", len(got), len(sent))
	}
	h.expectNet(run, wire.TypeNetClose, 1)

	// Host to guest: the agent grants back what the program read.
	prog = openStream(t, h, take, run, 2)
	chunk := bytes.Repeat([]byte{'h'}, wire.MaxNetChunk)
	for range wire.NetWindow / wire.MaxNetChunk {
		h.sendNet(run, wire.TypeNetData, &wire.NetFrame{Stream: 2, Data: chunk})
	}
	read := make(chan []byte, 1)
	go func() {
		b := make([]byte, wire.NetWindow)
		io.ReadFull(prog, b)
		read <- b
	}()
	granted := 0
	for granted < wire.NetWindow {
		granted += int(h.expectNet(run, wire.TypeNetWindow, 2).Window)
	}
	if granted != wire.NetWindow {
		t.Fatalf("granted %d for %d read", granted, wire.NetWindow)
	}
	<-read
	// The window is whole again: NetWindow more is taken, and a byte
	// past it aborts the stream.
	for range wire.NetWindow / wire.MaxNetChunk {
		h.sendNet(run, wire.TypeNetData, &wire.NetFrame{Stream: 2, Data: chunk})
	}
	h.sendNet(run, wire.TypeNetData, &wire.NetFrame{Stream: 2, Data: []byte{'!'}})
	h.expectAbort(run, 2)
	expectClosed(t, prog)

	// Stream 1 is open still, from the host to the program.
	r.release <- struct{}{}
	h.expectAbort(run, 1)
	h.expect(run, wire.TypeReceipt)
}

// What a host sends wrong aborts that stream alone: a window past
// NetWindow, data after its fin, a second fin. A frame for a stream never
// opened is dropped, unanswered, as are frames for a stream that ended.
func TestNetHostMistakes(t *testing.T) {
	r := newFakeRunner()
	a := newNetAgent(t, r, 0)
	h := connect(t, a)
	h.hello()
	run := h.send(&wire.Message{Type: wire.TypeRun, Run: netRunReq("m")})
	<-r.started
	take := r.taker("m")

	p1 := openStream(t, h, take, run, 1)
	h.sendNet(run, wire.TypeNetWindow, &wire.NetFrame{Stream: 1, Window: 1})
	h.expectAbort(run, 1)
	expectClosed(t, p1)

	p2 := openStream(t, h, take, run, 2)
	h.sendNet(run, wire.TypeNetClose, &wire.NetFrame{Stream: 2})
	h.sendNet(run, wire.TypeNetData, &wire.NetFrame{Stream: 2, Data: []byte("late")})
	h.expectAbort(run, 2)
	expectClosed(t, p2)

	p3 := openStream(t, h, take, run, 3)
	h.sendNet(run, wire.TypeNetClose, &wire.NetFrame{Stream: 3})
	h.sendNet(run, wire.TypeNetClose, &wire.NetFrame{Stream: 3})
	h.expectAbort(run, 3)
	expectClosed(t, p3)

	p4 := openStream(t, h, take, run, 4)
	for _, f := range []*wire.NetFrame{{Stream: 99, Data: []byte("x")}, {Stream: 1, Data: []byte("x")}} {
		h.sendNet(run, wire.TypeNetData, f)
	}
	h.sendNet(run, wire.TypeNetWindow, &wire.NetFrame{Stream: 2, Window: 5})
	h.sendNet(run, wire.TypeNetClose, &wire.NetFrame{Stream: 7, Abort: true})
	id := h.send(&wire.Message{Type: wire.TypePing})
	h.expect(id, wire.TypePong)
	// Stream 4 was not touched by any of it.
	go p4.Write([]byte("ok"))
	if f := h.expectNet(run, wire.TypeNetData, 4); string(f.Data) != "ok" {
		t.Fatalf("data %q", f.Data)
	}
	r.release <- struct{}{}
	h.expectAbort(run, 4)
	h.expect(run, wire.TypeReceipt)
}

// When the run ends, every stream still open is closed in the box and
// aborted to the host, in order, before the receipt; one the host aborted
// is freed at once and not aborted again.
func TestNetStreamsEndBeforeReceipt(t *testing.T) {
	r := newFakeRunner()
	a := newNetAgent(t, r, 0)
	h := connect(t, a)
	h.hello()
	run := h.send(&wire.Message{Type: wire.TypeRun, Run: netRunReq("e")})
	<-r.started
	take := r.taker("e")
	var progs []net.Conn
	for num := uint32(1); num <= 3; num++ {
		progs = append(progs, openStream(t, h, take, run, num))
	}
	go progs[2].Write([]byte("x"))
	h.expectNet(run, wire.TypeNetData, 3)
	h.sendNet(run, wire.TypeNetClose, &wire.NetFrame{Stream: 1, Abort: true})
	expectClosed(t, progs[0])
	// A write to the program the program never reads: the run's end
	// does not wait for it.
	h.sendNet(run, wire.TypeNetData, &wire.NetFrame{Stream: 2, Data: []byte("unread")})
	waitStreams(t, a, "e", 2)

	r.release <- struct{}{}
	h.expectAbort(run, 2)
	h.expectAbort(run, 3)
	if m := h.expect(run, wire.TypeReceipt); m.Result.Receipt.Status != wire.StatusOK {
		t.Fatalf("receipt %+v", m.Result.Receipt)
	}
	expectClosed(t, progs[1])
	expectClosed(t, progs[2])
}

// A cancel ends the run's streams before its receipt, as does the loss of
// the connection it came from.
func TestNetCancelClosesStreams(t *testing.T) {
	r := newFakeRunner()
	a := newNetAgent(t, r, 0)
	h := connect(t, a)
	h.hello()
	run := h.send(&wire.Message{Type: wire.TypeRun, Run: netRunReq("c")})
	<-r.started
	prog := openStream(t, h, r.taker("c"), run, 1)
	cancel := h.send(&wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: "c"}})
	var order []string
	for len(order) < 3 {
		m := h.recv()
		switch {
		case m.ID == cancel && m.Type == wire.TypeOK:
			order = append(order, "ok")
		case m.ID == run && m.Type == wire.TypeNetClose && m.Net.Stream == 1 && m.Net.Abort:
			order = append(order, "abort")
		case m.ID == run && m.Type == wire.TypeReceipt && m.Result.Receipt.Status == wire.StatusCancelled:
			order = append(order, "receipt")
		default:
			t.Fatalf("unexpected %s %d", m.Type, m.ID)
		}
	}
	if slices.Index(order, "abort") > slices.Index(order, "receipt") {
		t.Fatalf("order %v: the abort after the receipt", order)
	}
	expectClosed(t, prog)

	// The connection lost: its run is cancelled and its streams closed.
	run = h.send(&wire.Message{Type: wire.TypeRun, Run: netRunReq("d")})
	<-r.started
	take := r.taker("d")
	prog = openStream(t, h, take, run, 1)
	h.c.Close()
	expectClosed(t, prog)
	deadline := time.Now().Add(5 * time.Second)
	for take(&net.TCPConn{}) {
		if time.Now().After(deadline) {
			t.Fatal("the run of a lost connection still takes connections")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The watchdog ends a run's streams before its answer, though the box
// has not let go: the box's later connections are not taken.
func TestNetWatchdogClosesStreams(t *testing.T) {
	r := newFakeRunner()
	r.stubborn.Store(true)
	a := newNetAgent(t, r, 300*time.Millisecond)
	h := connect(t, a)
	h.hello()
	run := h.send(&wire.Message{Type: wire.TypeRun, Run: netRunReq("s")})
	<-r.started
	take := r.taker("s")
	prog := openStream(t, h, take, run, 1)
	h.expectAbort(run, 1)
	if m := h.expect(run, wire.TypeError); !strings.Contains(m.Error.Message, "overran") {
		t.Fatalf("answer %+v", m.Error)
	}
	<-r.aborted
	expectClosed(t, prog)
	if take(&net.TCPConn{}) {
		t.Fatal("a connection was taken after the watchdog")
	}
	r.release <- struct{}{}
}
