package supervisor

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// netRun is a run that may carry streams.
func netRun(id string) *wire.Run {
	r := testRun(id)
	r.Net = true
	return r
}

// startRun sends run from c under the client's id and returns the ID the
// guest got it under.
func (h *harness) startRun(c net.Conn, id uint64, run *wire.Run) uint64 {
	h.t.Helper()
	send(h.t, c, &wire.Message{Type: wire.TypeRun, ID: id, Run: run})
	g := recv(h.t, h.guest)
	if g.Type != wire.TypeRun || g.Run.RunID != run.RunID || g.Run.Net != run.Net {
		h.t.Fatalf("the guest got %+v, want run %s", g, run.RunID)
	}
	return g.ID
}

// netFrame is a stream frame of typ for the run the receiver knows as id.
func netFrame(typ string, id uint64, f wire.NetFrame) *wire.Message {
	return &wire.Message{Type: typ, ID: id, Net: &f}
}

// expectNet reads a stream frame of typ, for id and stream, from c.
func expectNet(t *testing.T, c net.Conn, typ string, id uint64, stream uint32) *wire.NetFrame {
	t.Helper()
	m := recv(t, c)
	if m.Type != typ || m.ID != id || m.Net == nil || m.Net.Stream != stream {
		t.Fatalf("got %+v (%+v), want %s of stream %d for id %d", m, m.Net, typ, stream, id)
	}
	return m.Net
}

// expectReceipt reads the receipt of the run the client knows as id.
func expectReceipt(t *testing.T, c net.Conn, id uint64) {
	t.Helper()
	if m := recv(t, c); m.Type != wire.TypeReceipt || m.ID != id {
		t.Fatalf("got %+v, want the receipt for id %d", m, id)
	}
}

// endRun sends the receipt of the run the guest knows as gid.
func (h *harness) endRun(gid uint64, runID, status string) {
	h.t.Helper()
	rc := receipt(runID, status)
	rc.ID = gid
	send(h.t, h.guest, rc)
}

// expectCancel reads the cancel of runID from the guest's end, and
// answers it.
func (h *harness) expectCancel(runID string) {
	h.t.Helper()
	m := recv(h.t, h.guest)
	if m.Type != wire.TypeCancel || m.Cancel.RunID != runID {
		h.t.Fatalf("the guest got %+v, want cancel %s", m, runID)
	}
	send(h.t, h.guest, &wire.Message{Type: wire.TypeOK, ID: m.ID})
}

// A run's streams go both ways, each side under its own ID for the run:
// the client's to the client, the supervisor's to the guest.
func TestNetRoutedBothWays(t *testing.T) {
	h := newHarness(t)
	a, b := h.connect(), h.connect()
	h.hello(a)
	h.hello(b)
	// Both clients call their runs 5: the streams must not cross.
	ga := h.startRun(a, 5, netRun("r-net-a"))
	gb := h.startRun(b, 5, netRun("r-net-b"))
	if ga == 5 && gb == 5 {
		t.Fatal("both runs went to the guest as 5")
	}

	send(t, h.guest, netFrame(wire.TypeNetOpen, ga, wire.NetFrame{Stream: 1}))
	expectNet(t, a, wire.TypeNetOpen, 5, 1)
	send(t, h.guest, netFrame(wire.TypeNetData, gb, wire.NetFrame{Stream: 3, Data: []byte("to b")}))
	if f := expectNet(t, b, wire.TypeNetData, 5, 3); string(f.Data) != "to b" {
		t.Fatalf("b got %q", f.Data)
	}
	send(t, h.guest, netFrame(wire.TypeNetData, ga, wire.NetFrame{Stream: 1, Data: []byte("CONNECT x:443 HTTP/1.1\r\n\r\n")}))
	if f := expectNet(t, a, wire.TypeNetData, 5, 1); string(f.Data) != "CONNECT x:443 HTTP/1.1\r\n\r\n" {
		t.Fatalf("a got %q", f.Data)
	}

	send(t, a, netFrame(wire.TypeNetWindow, 5, wire.NetFrame{Stream: 1, Window: 26}))
	if f := expectNet(t, h.guest, wire.TypeNetWindow, ga, 1); f.Window != 26 {
		t.Fatalf("the guest got a window of %d", f.Window)
	}
	send(t, b, netFrame(wire.TypeNetData, 5, wire.NetFrame{Stream: 3, Data: []byte("from b")}))
	if f := expectNet(t, h.guest, wire.TypeNetData, gb, 3); string(f.Data) != "from b" {
		t.Fatalf("the guest got %q", f.Data)
	}
	send(t, a, netFrame(wire.TypeNetClose, 5, wire.NetFrame{Stream: 1}))
	if f := expectNet(t, h.guest, wire.TypeNetClose, ga, 1); f.Abort {
		t.Fatal("a fin reached the guest as an abort")
	}
	send(t, h.guest, netFrame(wire.TypeNetClose, ga, wire.NetFrame{Stream: 1, Abort: true}))
	if f := expectNet(t, a, wire.TypeNetClose, 5, 1); !f.Abort {
		t.Fatal("an abort reached the client as a fin")
	}

	h.endRun(ga, "r-net-a", wire.StatusOK)
	expectReceipt(t, a, 5)
	h.endRun(gb, "r-net-b", wire.StatusOK)
	expectReceipt(t, b, 5)
	if h.logged("dropped") || h.logged("cancelling") {
		t.Errorf("frames were dropped: %q", h.logs)
	}
}

// The guest sends every frame of a run's streams before its receipt; the
// client gets them in that order, though they wait in different queues,
// and though it reads nothing until the receipt is in the relay.
func TestNetFramesPrecedeReceipt(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	g := h.startRun(c, 2, netRun("r-order"))
	const frames = 50
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		send(t, h.guest, netFrame(wire.TypeNetOpen, g, wire.NetFrame{Stream: 1}))
		for i := range frames {
			send(t, h.guest, netFrame(wire.TypeNetData, g, wire.NetFrame{Stream: 1, Data: []byte{byte(i)}}))
		}
		send(t, h.guest, netFrame(wire.TypeNetClose, g, wire.NetFrame{Stream: 1, Abort: true}))
		h.endRun(g, "r-order", wire.StatusOK)
	}()
	<-sent
	time.Sleep(100 * time.Millisecond) // the receipt is queued too
	expectNet(t, c, wire.TypeNetOpen, 2, 1)
	for i := range frames {
		if f := expectNet(t, c, wire.TypeNetData, 2, 1); !bytes.Equal(f.Data, []byte{byte(i)}) {
			t.Fatalf("frame %d: %v", i, f.Data)
		}
	}
	expectNet(t, c, wire.TypeNetClose, 2, 1)
	expectReceipt(t, c, 2)
}

// Stream frames for a run that may not reach the network, for no run in
// flight, or for another client's run go nowhere, and are counted in the
// log; neither the channel nor the client's connection ends for them.
func TestNetFramesDropped(t *testing.T) {
	h := newHarness(t)
	a, b := h.connect(), h.connect()
	h.hello(a)
	h.hello(b)
	ga := h.startRun(a, 5, netRun("r-net"))
	gb := h.startRun(b, 5, testRun("r-plain"))

	// From the guest.
	send(t, h.guest, netFrame(wire.TypeNetOpen, gb, wire.NetFrame{Stream: 1}))
	send(t, h.guest, netFrame(wire.TypeNetData, 999, wire.NetFrame{Stream: 1, Data: []byte("x")}))
	h.endRun(gb, "r-plain", wire.StatusOK)
	expectReceipt(t, b, 5) // the next thing b got, on a channel still read
	// The run has ended: what comes after its receipt finds no run.
	send(t, h.guest, netFrame(wire.TypeNetData, gb, wire.NetFrame{Stream: 1, Data: []byte("x")}))
	waitFor(t, func() bool { return h.logged("may not reach the network") && h.logged("for id 999, which is no run") })

	// From clients: b's own plain run, and b's frames under a's run's
	// number, which is a's and not b's; then a stream frame of a, which
	// must be the first thing the guest gets.
	gp := h.startRun(b, 6, testRun("r-plain-2"))
	send(t, b, netFrame(wire.TypeNetData, 6, wire.NetFrame{Stream: 1, Data: []byte("x")}))
	send(t, b, netFrame(wire.TypeNetWindow, 5, wire.NetFrame{Stream: 1, Window: 1}))
	send(t, b, netFrame(wire.TypeNetClose, 77, wire.NetFrame{Stream: 1}))
	send(t, a, netFrame(wire.TypeNetWindow, 5, wire.NetFrame{Stream: 1, Window: 9}))
	if f := expectNet(t, h.guest, wire.TypeNetWindow, ga, 1); f.Window != 9 {
		t.Fatalf("the guest got a window of %d", f.Window)
	}
	waitFor(t, func() bool {
		h.relay.mu.Lock()
		defer h.relay.mu.Unlock()
		return h.relay.netDropped == 3
	})
	if !h.logged("for run r-plain-2, which may not reach the network") || !h.logged("for its id 77") {
		t.Errorf("the client's dropped frames were not logged: %q", h.logs)
	}
	// Both connections still work.
	h.endRun(gp, "r-plain-2", wire.StatusOK)
	expectReceipt(t, b, 6)
	h.endRun(ga, "r-net", wire.StatusOK)
	expectReceipt(t, a, 5)
	select {
	case err := <-h.readErr:
		t.Fatalf("the guest channel ended: %v", err)
	default:
	}
}

// A client may not open a stream (the box does), nor send one's frame
// malformed, nor before its hello: each ends its connection with a
// protocol error, as any frame it had no right to send.
func TestNetClientFramesRefused(t *testing.T) {
	for name, p := range map[string][]byte{
		"open":      wire.EncodeRaw(wire.TypeNetOpen, 5, []byte{0, 0, 0, 1}),
		"stream 0":  wire.EncodeRaw(wire.TypeNetData, 5, []byte{0, 0, 0, 0, 'x'}),
		"no data":   wire.EncodeRaw(wire.TypeNetData, 5, []byte{0, 0, 0, 1}),
		"window 0":  wire.EncodeRaw(wire.TypeNetWindow, 5, []byte{0, 0, 0, 1, 0, 0, 0, 0}),
		"close how": wire.EncodeRaw(wire.TypeNetClose, 5, []byte{0, 0, 0, 1, 2}),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			c := h.connect()
			h.hello(c)
			h.startRun(c, 5, netRun("r-refused"))
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if err := frame.Write(c, p); err != nil {
				t.Fatal(err)
			}
			if m := recv(t, c); m.Type != wire.TypeError || m.Error.Code != wire.ErrProtocol || m.ID != 5 {
				t.Fatalf("got %+v, want a protocol error", m)
			}
			expectClosed(t, c)
			h.expectCancel("r-refused") // the client left
		})
	}
	t.Run("before hello", func(t *testing.T) {
		h := newHarness(t)
		c := h.connect()
		send(t, c, netFrame(wire.TypeNetData, 5, wire.NetFrame{Stream: 1, Data: []byte("x")}))
		if m := recv(t, c); m.Type != wire.TypeError || m.Error.Code != wire.ErrProtocol || !strings.Contains(m.Error.Message, "hello") {
			t.Fatalf("got %+v, want say hello first", m)
		}
		expectClosed(t, c)
	})
}

// A client that stops reading holds up only its own run's streams: the
// guest's reader goes on, and another client's streams and receipt get
// through at once. Its run is not cancelled while the guest keeps within
// the windows, and once it reads again it gets every frame in order.
func TestNetSlowClientHoldsOnlyItsOwn(t *testing.T) {
	h := newHarness(t)
	slow, other := h.connect(), h.connect()
	h.hello(slow)
	h.hello(other)
	gs := h.startRun(slow, 1, netRun("r-slow"))
	gn := h.startRun(other, 1, netRun("r-other"))
	gp := h.startRun(other, 2, testRun("r-other-plain"))

	// As much as the windows allow: MaxNetOpen streams, a window each.
	chunk := bytes.Repeat([]byte("s"), wire.MaxNetChunk)
	perStream := wire.NetWindow / wire.MaxNetChunk
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for s := range uint32(wire.MaxNetOpen) {
			send(t, h.guest, netFrame(wire.TypeNetOpen, gs, wire.NetFrame{Stream: s + 1}))
			for range perStream {
				send(t, h.guest, netFrame(wire.TypeNetData, gs, wire.NetFrame{Stream: s + 1, Data: chunk}))
			}
		}
	}()
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("the guest's reader stalled behind a client that does not read")
	}
	start := time.Now()
	send(t, h.guest, netFrame(wire.TypeNetData, gn, wire.NetFrame{Stream: 1, Data: []byte("other")}))
	expectNet(t, other, wire.TypeNetData, 1, 1)
	h.endRun(gp, "r-other-plain", wire.StatusOK)
	expectReceipt(t, other, 2)
	if d := time.Since(start); d > time.Second {
		t.Errorf("the other client waited %v", d)
	}
	if h.logged("cancelling") || h.logged("not reading") {
		t.Fatalf("a run within its windows was cut off: %q", h.logs)
	}

	h.endRun(gs, "r-slow", wire.StatusOK)
	for s := range uint32(wire.MaxNetOpen) {
		expectNet(t, slow, wire.TypeNetOpen, 1, s+1)
		for range perStream {
			expectNet(t, slow, wire.TypeNetData, 1, s+1)
		}
	}
	expectReceipt(t, slow, 1)
}

// A guest that pushes a run's streams past their windows to a client that
// does not read gets that run cancelled; the guest's reader never waits,
// so another client's receipt still comes at once. The run's later stream
// frames are dropped, and it still ends with its receipt.
func TestNetFloodCancelsRun(t *testing.T) {
	h := newHarness(t)
	slow, other := h.connect(), h.connect()
	h.hello(slow)
	h.hello(other)
	gs := h.startRun(slow, 1, netRun("r-flood"))
	gp := h.startRun(other, 1, testRun("r-bystander"))

	chunk := bytes.Repeat([]byte("f"), wire.MaxNetChunk)
	flood := 2 * netBudgetBytes / wire.MaxNetChunk
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		send(t, h.guest, netFrame(wire.TypeNetOpen, gs, wire.NetFrame{Stream: 1}))
		for range flood {
			send(t, h.guest, netFrame(wire.TypeNetData, gs, wire.NetFrame{Stream: 1, Data: chunk}))
		}
	}()
	h.expectCancel("r-flood")
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("the guest's reader stalled behind the flood")
	}
	start := time.Now()
	h.endRun(gp, "r-bystander", wire.StatusOK)
	expectReceipt(t, other, 1)
	if d := time.Since(start); d > time.Second {
		t.Errorf("the other client's receipt took %v", d)
	}
	if !h.logged("run r-flood: the guest sent more of its streams than their windows allow") ||
		!h.logged("for run r-flood after it was cancelled") {
		t.Errorf("the flood was not logged: %q", h.logs)
	}

	// The client gets what was queued before the run went past its
	// budget, then nothing more of its streams, then the receipt.
	h.endRun(gs, "r-flood", wire.StatusCancelled)
	expectNet(t, slow, wire.TypeNetOpen, 1, 1)
	got := 0
	for {
		m := recv(t, slow)
		if m.Type == wire.TypeReceipt {
			break
		}
		if m.Type != wire.TypeNetData {
			t.Fatalf("got %+v", m)
		}
		got++
	}
	if got*wire.MaxNetChunk > netBudgetBytes+wire.MaxNetChunk || got < wire.MaxNetOpen*wire.NetWindow/wire.MaxNetChunk {
		t.Errorf("the client got %d chunks of the flood; the budget is %d bytes", got, netBudgetBytes)
	}
}

// A malformed stream frame from the guest is dropped and its run
// cancelled: not the channel, which goes on for the other runs' streams.
func TestNetMalformedGuestFrameCancelsRun(t *testing.T) {
	for name, body := range map[string][]byte{
		"stream 0":  {0, 0, 0, 0, 'x'},
		"no data":   {0, 0, 0, 1},
		"too long":  append([]byte{0, 0, 0, 1}, make([]byte, wire.MaxNetChunk+1)...),
		"window":    {0, 0, 0, 1, 0, 1, 0, 1},
		"close how": {0, 0, 0, 1, 9},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			bad, good := h.connect(), h.connect()
			h.hello(bad)
			h.hello(good)
			gb := h.startRun(bad, 1, netRun("r-bad"))
			gg := h.startRun(good, 1, netRun("r-good"))
			typ := wire.TypeNetData
			switch name {
			case "window":
				typ = wire.TypeNetWindow
			case "close how":
				typ = wire.TypeNetClose
			}
			h.guest.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if err := frame.Write(h.guest, wire.EncodeRaw(typ, gb, body)); err != nil {
				t.Fatal(err)
			}
			h.expectCancel("r-bad")
			if !h.logged("run r-bad: the guest sent a malformed stream frame") {
				t.Errorf("not logged: %q", h.logs)
			}
			send(t, h.guest, netFrame(wire.TypeNetOpen, gg, wire.NetFrame{Stream: 1}))
			expectNet(t, good, wire.TypeNetOpen, 1, 1)
			send(t, h.guest, netFrame(wire.TypeNetOpen, gb, wire.NetFrame{Stream: 1}))
			h.endRun(gb, "r-bad", wire.StatusCancelled)
			expectReceipt(t, bad, 1) // and not the open that came after the bad frame
			h.endRun(gg, "r-good", wire.StatusOK)
			expectReceipt(t, good, 1)
			select {
			case err := <-h.readErr:
				t.Fatalf("the guest channel ended: %v", err)
			default:
			}
		})
	}
}

// A run's budget is its own: each frame taken off as the client's writer
// writes it, so a run that streams for long never runs out.
func TestNetQueueBudget(t *testing.T) {
	var q netQueue
	for range netBudgetFrames {
		if !q.take(1) {
			t.Fatal("a frame within the budget was refused")
		}
	}
	if q.take(1) {
		t.Fatal("a frame past the budget was taken")
	}
	q.give(1)
	if !q.take(netBudgetBytes - netBudgetFrames + 1) {
		t.Fatal("the bytes left in the budget were refused")
	}
	q.give(netBudgetBytes - netBudgetFrames + 1)
	if q.take(netBudgetBytes) {
		t.Fatal("a frame past the byte budget was taken")
	}
	if f, b := q.frames.Load(), q.bytes.Load(); f != netBudgetFrames-1 || b != netBudgetFrames-1 {
		t.Fatalf("after refusals the count is %d frames, %d bytes", f, b)
	}
}
