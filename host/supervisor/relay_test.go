package supervisor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// harness is a relay with a fake guest on the other end of a pipe.
type harness struct {
	t       *testing.T
	relay   *Relay
	guest   net.Conn // the fake guest's end
	readErr chan error

	mu   sync.Mutex
	logs []string
}

var guestHello = wire.Hello{Protocol: wire.ProtocolVersion, AgentVersion: "v-test", Kernel: "6.1-test"}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, readErr: make(chan error, 1)}
	hostEnd, guestEnd := net.Pipe()
	h.guest = guestEnd
	h.relay = NewRelay(hostEnd, guestHello, func(format string, args ...any) {
		h.mu.Lock()
		h.logs = append(h.logs, fmt.Sprintf(format, args...))
		h.mu.Unlock()
	})
	go func() { h.readErr <- h.relay.ReadGuest() }()
	t.Cleanup(func() {
		h.relay.Close()
		guestEnd.Close()
	})
	return h
}

// connect adds a client and returns its end.
func (h *harness) connect() net.Conn {
	mine, theirs := net.Pipe()
	h.relay.admit(theirs)
	h.t.Cleanup(func() { mine.Close() })
	return mine
}

func (h *harness) hello(c net.Conn) {
	h.t.Helper()
	send(h.t, c, &wire.Message{Type: wire.TypeHello, ID: 7, Hello: &wire.Hello{Protocol: wire.ProtocolVersion}})
	m := recv(h.t, c)
	if m.Type != wire.TypeHello || m.ID != 7 || m.Hello.AgentVersion != "v-test" {
		h.t.Fatalf("hello answer = %+v", m)
	}
}

func (h *harness) logged(sub string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.logs {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

func send(t *testing.T, c net.Conn, m *wire.Message) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := writeMessage(c, m); err != nil {
		t.Fatalf("send %s: %v", m.Type, err)
	}
}

func recv(t *testing.T, c net.Conn) *wire.Message {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	m, err := readMessage(c)
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return m
}

func testRun(id string) *wire.Run {
	return &wire.Run{RunID: id, Code: "print(1)", Image: "stdlib", TimeoutSeconds: 2, MaxOutputBytes: 4096}
}

func receipt(runID, status string) *wire.Message {
	return &wire.Message{Type: wire.TypeReceipt, Result: &wire.Result{Receipt: wire.Receipt{
		RunID: runID, Status: status, Cleanup: wire.Cleanup{Status: wire.CleanupRemoved}}}}
}

func TestHelloAnsweredBySupervisor(t *testing.T) {
	h := newHarness(t)
	h.hello(h.connect())
}

func TestTwoClientsSameIDs(t *testing.T) {
	h := newHarness(t)
	a, b := h.connect(), h.connect()
	h.hello(a)
	h.hello(b)
	send(t, a, &wire.Message{Type: wire.TypePing, ID: 1})
	first := recv(t, h.guest)
	send(t, b, &wire.Message{Type: wire.TypePing, ID: 1})
	second := recv(t, h.guest)
	if first.Type != wire.TypePing || second.Type != wire.TypePing || first.ID == second.ID {
		t.Fatalf("the guest saw %+v and %+v: want two pings with distinct IDs", first, second)
	}
	// Answer in reverse order: each pong must still reach its own client.
	send(t, h.guest, &wire.Message{Type: wire.TypePong, ID: second.ID})
	if m := recv(t, b); m.Type != wire.TypePong || m.ID != 1 {
		t.Fatalf("b got %+v", m)
	}
	send(t, h.guest, &wire.Message{Type: wire.TypePong, ID: first.ID})
	if m := recv(t, a); m.Type != wire.TypePong || m.ID != 1 {
		t.Fatalf("a got %+v", m)
	}
}

func TestRequestBeforeHello(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	send(t, c, &wire.Message{Type: wire.TypePing, ID: 3})
	m := recv(t, c)
	if m.Type != wire.TypeError || m.Error.Code != wire.ErrProtocol || m.ID != 3 {
		t.Fatalf("got %+v, want a protocol error", m)
	}
	expectClosed(t, c)
}

func TestClientMayNotSendAnswers(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	send(t, c, receipt("r1", wire.StatusOK))
	if m := recv(t, c); m.Type != wire.TypeError || m.Error.Code != wire.ErrProtocol {
		t.Fatalf("got %+v, want a protocol error", m)
	}
	expectClosed(t, c)
}

func TestWrongProtocolRefused(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	send(t, c, &wire.Message{Type: wire.TypeHello, ID: 1, Hello: &wire.Hello{Protocol: wire.ProtocolVersion + 1}})
	if m := recv(t, c); m.Type != wire.TypeError || m.Error.Code != wire.ErrProtocol {
		t.Fatalf("got %+v, want a protocol error", m)
	}
	expectClosed(t, c)
}

// The relay does not check runs (the client sends only checked ones, and
// the guest checks each): a run breaking a rule goes to the guest, whose
// refusal comes back to the client, and the connection stays usable.
func TestRunCheckedByTheGuestNotTheRelay(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	bad := testRun("../x")
	bad.TimeoutSeconds = 1e9 // the relay's own expiry stays bounded
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 4, Run: bad})
	g := recv(t, h.guest)
	if g.Type != wire.TypeRun || g.Run.RunID != "../x" || g.Run.TimeoutSeconds != 1e9 {
		t.Fatalf("the guest got %+v", g)
	}
	send(t, h.guest, &wire.Message{Type: wire.TypeError, ID: g.ID, Error: &wire.Error{Code: wire.ErrBadRequest, Message: "run_id: bad",
		Cleanup: &wire.Cleanup{Status: wire.CleanupNotAttempted}}})
	m := recv(t, c)
	if m.Type != wire.TypeError || m.ID != 4 || m.Error.Code != wire.ErrBadRequest || m.Error.Cleanup.Status != wire.CleanupNotAttempted {
		t.Fatalf("got %+v, want the guest's bad_request with cleanup NOT_ATTEMPTED", m)
	}
	send(t, c, &wire.Message{Type: wire.TypePing, ID: 5})
	if g := recv(t, h.guest); g.Type != wire.TypePing {
		t.Fatalf("the guest got %+v", g)
	}
}

// A run frame whose own header cannot be read is refused as nothing ran,
// before the guest; the connection goes on.
func TestRunHeaderUnreadable(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	frame.Write(c, wire.EncodeRaw(wire.TypeRun, 4, []byte{0, 1, 2}))
	m := recv(t, c)
	if m.Type != wire.TypeError || m.ID != 4 || m.Error.Code != wire.ErrBadRequest || *m.Error.Cleanup != *wire.NothingRan() {
		t.Fatalf("got %+v, want bad_request, nothing ran", m)
	}
	send(t, c, &wire.Message{Type: wire.TypePing, ID: 5})
	if g := recv(t, h.guest); g.Type != wire.TypePing {
		t.Fatalf("the guest got %+v, want the ping", g)
	}
}

func TestRunAndReceipt(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 9, Run: testRun("r1")})
	g := recv(t, h.guest)
	if g.Type != wire.TypeRun || g.Run.RunID != "r1" {
		t.Fatalf("the guest got %+v", g)
	}
	rc := receipt("r1", wire.StatusOK)
	rc.ID = g.ID
	send(t, h.guest, rc)
	m := recv(t, c)
	if m.Type != wire.TypeReceipt || m.ID != 9 || m.Result.Receipt.RunID != "r1" {
		t.Fatalf("got %+v", m)
	}
}

func TestClientLeavesMidRun(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 1, Run: testRun("r2")})
	run := recv(t, h.guest)
	c.Close()
	cancel := recv(t, h.guest)
	if cancel.Type != wire.TypeCancel || cancel.Cancel.RunID != "r2" || cancel.ID == run.ID {
		t.Fatalf("after the client left the guest got %+v, want cancel r2", cancel)
	}
	send(t, h.guest, &wire.Message{Type: wire.TypeOK, ID: cancel.ID})
	rc := receipt("r2", wire.StatusCancelled)
	rc.ID = run.ID
	send(t, h.guest, rc)
	waitFor(t, func() bool { return h.logged("run r2 ended after its client left") })
	// The relay still serves others.
	d := h.connect()
	h.hello(d)
}

func TestGuestAnswersUnasked(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	send(t, h.guest, &wire.Message{Type: wire.TypePong, ID: 12345})
	waitFor(t, func() bool { return h.logged("nobody asked for") })
	send(t, c, &wire.Message{Type: wire.TypePing, ID: 2})
	g := recv(t, h.guest)
	send(t, h.guest, &wire.Message{Type: wire.TypePong, ID: g.ID})
	if m := recv(t, c); m.Type != wire.TypePong || m.ID != 2 {
		t.Fatalf("got %+v", m)
	}
}

func TestGuestAnswersWithWrongType(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	send(t, c, &wire.Message{Type: wire.TypePing, ID: 2})
	g := recv(t, h.guest)
	rc := receipt("r9", wire.StatusOK)
	rc.ID = g.ID
	send(t, h.guest, rc)
	if m := recv(t, c); m.Type != wire.TypeError || m.Error.Code != wire.ErrProtocol || m.ID != 2 {
		t.Fatalf("got %+v, want a protocol error", m)
	}
}

// The relay routes a guest's answer by its header and passes its body as
// it came: a receipt for another run than the one asked reaches the
// client, which is the one to check it (host/client refuses it).
func TestGuestAnswerPassesAsItCame(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 1, Run: testRun("mine")})
	g := recv(t, h.guest)
	rc := receipt("theirs", wire.StatusOK)
	rc.ID = g.ID
	send(t, h.guest, rc)
	m := recv(t, c)
	if m.Type != wire.TypeReceipt || m.ID != 1 || m.Result.Receipt.RunID != "theirs" {
		t.Fatalf("got %+v, want the receipt as it came", m)
	}
}

func TestGuestGarbageIsFatal(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 1, Run: testRun("r3")})
	recv(t, h.guest)
	h.guest.Write([]byte{0, 0, 0, 5, '{', 'x', 'x', 'x', '}'})
	m := recv(t, c)
	if m.Type != wire.TypeError || m.Error.Code != wire.ErrNoVM || m.Error.Cleanup.Status != wire.CleanupUnknown {
		t.Fatalf("got %+v, want no_vm with cleanup UNKNOWN", m)
	}
	select {
	case err := <-h.readErr:
		if err == nil || errors.Is(err, errEOF) {
			t.Fatalf("ReadGuest = %v, want a decode error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadGuest did not return")
	}
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 2, Run: testRun("r4")})
	if m := recv(t, c); m.Type != wire.TypeError || m.Error.Code != wire.ErrNoVM || m.Error.Cleanup.Status != wire.CleanupNotAttempted {
		t.Fatalf("after the guest is gone, got %+v", m)
	}
}

func TestGuestOversizedFrameIsFatal(t *testing.T) {
	h := newHarness(t)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 1<<31)
	h.guest.Write(hdr[:])
	select {
	case err := <-h.readErr:
		if !errors.Is(err, frame.ErrTooLarge) {
			t.Fatalf("ReadGuest = %v, want ErrTooLarge", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadGuest did not return")
	}
}

func TestOversizedClientFrame(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 0xFFFFFFF0)
	c.Write(hdr[:])
	m := recv(t, c)
	runtime.ReadMemStats(&after)
	if m.Type != wire.TypeError || m.Error.Code != wire.ErrProtocol {
		t.Fatalf("got %+v, want a protocol error", m)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("refusing the frame allocated %d bytes", grew)
	}
	expectClosed(t, c)
}

func TestGarbageClientFrame(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	c.Write([]byte{0, 0, 0, 4, 0xff, 0xfe, 0, 1})
	if m := recv(t, c); m.Type != wire.TypeError || m.Error.Code != wire.ErrProtocol {
		t.Fatalf("got %+v, want a protocol error", m)
	}
	expectClosed(t, c)
}

func TestShutdownStopsNewRequests(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	send(t, c, &wire.Message{Type: wire.TypeShutdown, ID: 1})
	g := recv(t, h.guest)
	if g.Type != wire.TypeShutdown {
		t.Fatalf("the guest got %+v", g)
	}
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 2, Run: testRun("late")})
	if m := recv(t, c); m.Type != wire.TypeError || m.Error.Code != wire.ErrNoVM || m.ID != 2 {
		t.Fatalf("got %+v, want no_vm", m)
	}
	send(t, h.guest, &wire.Message{Type: wire.TypeOK, ID: g.ID})
	if m := recv(t, c); m.Type != wire.TypeOK || m.ID != 1 {
		t.Fatalf("got %+v, want ok", m)
	}
}

func TestTooManyInFlight(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	go func() {
		for {
			if _, err := readMessage(h.guest); err != nil {
				return
			}
		}
	}()
	for i := 1; i <= maxPending; i++ {
		send(t, c, &wire.Message{Type: wire.TypePing, ID: uint64(i)})
	}
	send(t, c, &wire.Message{Type: wire.TypePing, ID: 99})
	if m := recv(t, c); m.Type != wire.TypeError || m.Error.Code != wire.ErrBusy || m.ID != 99 {
		t.Fatalf("got %+v, want busy", m)
	}
}

func TestHandshake(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	go func() {
		m, err := readMessage(guest)
		if err != nil || m.Type != wire.TypeHello {
			return
		}
		h := guestHello
		writeMessage(guest, &wire.Message{Type: wire.TypeHello, ID: m.ID, Hello: &h})
	}()
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	got, err := Handshake(ctx, host)
	if err != nil || got.AgentVersion != "v-test" {
		t.Fatalf("Handshake = %+v, %v", got, err)
	}
}

func TestHandshakeTimesOut(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	go func() { readMessage(guest) }() // reads the hello, never answers
	ctx, cancel := contextWithTimeout(200 * time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Handshake(ctx, host); err == nil || !strings.Contains(err.Error(), "no hello") {
		t.Fatalf("Handshake = %v, want no hello", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestHandshakeWrongProtocol(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	go func() {
		m, _ := readMessage(guest)
		writeMessage(guest, &wire.Message{Type: wire.TypeHello, ID: m.ID, Hello: &wire.Hello{Protocol: 99}})
	}()
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	if _, err := Handshake(ctx, host); err == nil || !strings.Contains(err.Error(), "protocol 99") {
		t.Fatalf("Handshake = %v", err)
	}
}

// An agent from before protocol 3 cannot read this hello and answers in
// its own framing: the supervisor says to install or rebuild the guest.
func TestHandshakeOlderAgent(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	go func() {
		frame.Read(guest)
		frame.Write(guest, []byte(`{"type":"error","id":0,"error":{"code":"protocol","message":"wire: invalid character"}}`))
	}()
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	_, err := Handshake(ctx, host)
	if err == nil || !strings.Contains(err.Error(), "older protocol") || !strings.Contains(err.Error(), "rebuild them (`make`)") {
		t.Fatalf("Handshake = %v", err)
	}
}

// A client from before protocol 3 is refused in its own framing, with
// what to do.
func TestOlderClientToldWhatToDo(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	frame.Write(c, []byte(`{"type":"hello","id":3,"hello":{"protocol":2}}`))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	p, err := frame.Read(c)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := wire.LegacyHello(p)
	if !ok || m.Type != wire.TypeError || m.ID != 3 || !strings.Contains(m.Error.Message, "restart the VM with yours") {
		t.Fatalf("got %q", p)
	}
	expectClosed(t, c)
}

func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if m, err := readMessage(c); err == nil {
		t.Fatalf("connection still open: got %+v", m)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met in 5 s")
}

// A guest that reads requests but never answers: each request expires
// with its own deadline (a run's cleanup UNKNOWN), so neither the call
// nor the table of pending requests waits on it; other clients are
// still served.
func TestGuestStopsAnswering(t *testing.T) {
	h := newHarness(t)
	a := h.connect()
	h.hello(a)
	send(t, a, &wire.Message{Type: wire.TypeRun, ID: 3, Run: testRun("r-deaf")})
	recv(t, h.guest) // taken, never answered
	h.relay.expire(time.Now().Add(wire.HostDeadline(2) - time.Second))
	a.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := readMessage(a); err == nil {
		t.Fatal("the run expired before its deadline")
	}
	h.relay.expire(time.Now().Add(wire.HostDeadline(2) + time.Second))
	m := recv(t, a)
	if m.Type != wire.TypeError || m.ID != 3 || m.Error.Code != wire.ErrNoReceipt ||
		m.Error.Cleanup == nil || m.Error.Cleanup.Status != wire.CleanupUnknown {
		t.Fatalf("the expired run was answered %+v", m)
	}
	h.relay.mu.Lock()
	left := len(h.relay.pending)
	h.relay.mu.Unlock()
	if left != 0 {
		t.Errorf("%d requests left pending", left)
	}
	b := h.connect()
	h.hello(b)
	send(t, b, &wire.Message{Type: wire.TypePing, ID: 4})
	g := recv(t, h.guest)
	send(t, h.guest, &wire.Message{Type: wire.TypePong, ID: g.ID})
	if m := recv(t, b); m.Type != wire.TypePong || m.ID != 4 {
		t.Fatalf("ping answered %+v", m)
	}
}

// A guest that stops reading: the write to it times out, the channel is
// closed as wedged (a frame may be half written), the request that could
// not be sent is refused as never started, and every later one fails at
// once instead of hanging.
func TestGuestStopsReading(t *testing.T) {
	defer func(d time.Duration) { guestWriteLimit = d }(guestWriteLimit)
	guestWriteLimit = 200 * time.Millisecond
	h := newHarness(t)
	a := h.connect()
	h.hello(a)
	t0 := time.Now()
	send(t, a, &wire.Message{Type: wire.TypeRun, ID: 5, Run: testRun("r-stuck")})
	m := recv(t, a)
	if m.Type != wire.TypeError || m.ID != 5 || m.Error.Cleanup == nil || m.Error.Cleanup.Status != wire.CleanupNotAttempted {
		t.Fatalf("the unsent run was answered %+v", m)
	}
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("the answer took %v", took)
	}
	select {
	case err := <-h.readErr:
		if !errors.Is(err, ErrWedged) {
			t.Errorf("ReadGuest ended with %v, want ErrWedged", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the relay did not end")
	}
	b := h.connect()
	h.hello(b)
	send(t, b, &wire.Message{Type: wire.TypePing, ID: 6})
	if m := recv(t, b); m.Type != wire.TypeError || m.Error.Code != wire.ErrNoVM {
		t.Fatalf("a ping to a wedged guest was answered %+v", m)
	}
}

// The supervisor's own ping gets the agent's status back.
func TestSupervisorPing(t *testing.T) {
	h := newHarness(t)
	go func() {
		g, err := readMessage(h.guest)
		if err != nil {
			return
		}
		writeMessage(h.guest, &wire.Message{Type: wire.TypePong, ID: g.ID, Status: &wire.AgentStatus{Health: "healthy",
			Runs: []wire.RunProgress{{RunID: "r7", Phase: "output", PhaseMS: 1200}}}})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := h.relay.Ping(ctx)
	if err != nil || len(st.Runs) != 1 || st.Runs[0].Phase != "output" {
		t.Fatalf("Ping = %+v, %v", st, err)
	}
	// Unanswered, a ping ends with its context.
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	go readMessage(h.guest)
	if _, err := h.relay.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an unanswered Ping = %v", err)
	}
}

// While the health check finds the guest silent, runs are refused at once
// (never started), and pings still go through to probe it.
func TestSilentGuestRefusesRuns(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	h.relay.SetSilent("not answering since a moment ago")
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 8, Run: testRun("r-silent")})
	m := recv(t, c)
	if m.Type != wire.TypeError || m.Error.Code != wire.ErrUnhealthy || !strings.Contains(m.Error.Message, "not answering") ||
		m.Error.Cleanup == nil || m.Error.Cleanup.Status != wire.CleanupNotAttempted {
		t.Fatalf("a run to a silent guest was answered %+v", m)
	}
	send(t, c, &wire.Message{Type: wire.TypePing, ID: 9})
	g := recv(t, h.guest)
	if g.Type != wire.TypePing {
		t.Fatalf("the guest got %+v, want the ping", g)
	}
	h.relay.SetSilent("")
	send(t, h.guest, &wire.Message{Type: wire.TypePong, ID: g.ID})
	recv(t, c)
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 10, Run: testRun("r-again")})
	if g := recv(t, h.guest); g.Type != wire.TypeRun {
		t.Fatalf("the guest got %+v, want the run", g)
	}
}

// readMessage reads and decodes one frame.
func readMessage(r io.Reader) (*wire.Message, error) {
	p, err := frame.Read(r)
	if err != nil {
		return nil, err
	}
	return wire.Decode(p)
}

// A receipt that comes while the client is still taking the run's output
// waits for room, as the output does: a client busy writing files is not
// a client that stopped reading.
func TestReceiptWaitsBehindOutput(t *testing.T) {
	h := newHarness(t)
	c := h.connect()
	h.hello(c)
	run := testRun("r8")
	run.Deliver = &wire.Deliver{MaxBytes: 1 << 20}
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 3, Run: run})
	g := recv(t, h.guest)
	// As many parts as the client's queue and its writer hold, then the
	// receipt, all while the client reads nothing.
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range clientQueue + 1 {
			send(t, h.guest, &wire.Message{Type: wire.TypeOutput, ID: g.ID, Output: &wire.OutputChunk{RunID: "r8", Name: "f", Offset: int64(i), Data: []byte("x")}})
		}
		rc := receipt("r8", wire.StatusOK)
		rc.ID = g.ID
		send(t, h.guest, rc)
	}()
	time.Sleep(300 * time.Millisecond) // the client is busy
	for i := range clientQueue + 1 {
		if m := recv(t, c); m.Type != wire.TypeOutput || m.Output.Offset != int64(i) {
			t.Fatalf("part %d: got %+v", i, m)
		}
	}
	if m := recv(t, c); m.Type != wire.TypeReceipt || m.ID != 3 {
		t.Fatalf("got %+v, want the receipt", m)
	}
	<-sent
	if h.logged("not reading") {
		t.Error("the client was dropped")
	}
}

// A client that leaves while the guest streams its run's output: the
// guest's reader and leave both touch the run's client, so the reader
// must read it under the relay's lock. Unlocked, -race reports the two
// (and, at worst, the reader passes the part to a client just cleared
// to nil and the supervisor panics). Each round hits the window only
// by chance, hence the rounds.
func TestClientLeavesWhileOutputStreams(t *testing.T) {
	h := newHarness(t)
	for i := range 200 {
		leaveWhileOutputStreams(t, h, fmt.Sprintf("r-left-%d", i))
	}
}

// leaveWhileOutputStreams is one round: a client starts runID, asking
// for its output, and leaves while the guest streams it; the guest gets
// the cancel, and then ends the run.
func leaveWhileOutputStreams(t *testing.T, h *harness, runID string) {
	t.Helper()
	c := h.connect()
	h.hello(c)
	run := testRun(runID)
	run.Deliver = &wire.Deliver{MaxBytes: 1 << 20}
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 1, Run: run})
	g := recv(t, h.guest)
	stop, streamed := make(chan struct{}), make(chan struct{})
	var part bytes.Buffer // encoded once: the guest streams as fast as the relay reads
	if err := writeMessage(&part, &wire.Message{Type: wire.TypeOutput, ID: g.ID, Output: &wire.OutputChunk{RunID: runID, Name: "f", Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(streamed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := h.guest.Write(part.Bytes()); err != nil {
				return
			}
		}
	}()
	flowing := make(chan struct{})
	go func() {
		// The client reads on until it leaves, so that the guest's
		// reader is passing parts, not waiting for room, when it does.
		for n := 0; ; n++ {
			if _, err := readMessage(c); err != nil {
				return
			}
			if n == 2 {
				close(flowing)
			}
		}
	}()
	select {
	case <-flowing:
	case <-time.After(5 * time.Second):
		t.Fatal("no output reached the client")
	}
	c.Close()
	cancel := recv(t, h.guest)
	close(stop)
	<-streamed
	if cancel.Type != wire.TypeCancel || cancel.Cancel.RunID != runID {
		t.Fatalf("after the client left the guest got %+v, want cancel %s", cancel, runID)
	}
	send(t, h.guest, &wire.Message{Type: wire.TypeOK, ID: cancel.ID})
	rc := receipt(runID, wire.StatusCancelled)
	rc.ID = g.ID
	send(t, h.guest, rc)
}

// A host that is full says so, and what is true of the run: nothing
// ran. A connection that never says hello does not keep its place: it is
// dropped, and the next client gets in.
func TestFullHost(t *testing.T) {
	defer func(d time.Duration) { helloLimit = d }(helloLimit)
	helloLimit = 300 * time.Millisecond
	h := newHarness(t)
	var idle []net.Conn
	for range maxClients {
		idle = append(idle, h.connect()) // they never say hello
	}
	extra := h.connect()
	m := recv(t, extra)
	if m.Type != wire.TypeError || m.Error.Code != wire.ErrBusy || m.Error.Cleanup == nil ||
		m.Error.Cleanup.Status != wire.CleanupNotAttempted || !strings.Contains(m.Error.Message, "nothing ran") {
		t.Fatalf("a client past the limit got %+v (cleanup %+v)", m.Error, m.Error.Cleanup)
	}
	// The silent ones are told why and let go; then there is room.
	for _, c := range idle {
		if m := recv(t, c); m.Type != wire.TypeError || !strings.Contains(m.Error.Message, "no hello") {
			t.Fatalf("a silent client got %+v", m)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		h.relay.mu.Lock()
		n := len(h.relay.clients)
		h.relay.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.hello(h.connect())
	if !h.logged("no hello within") {
		t.Error("the supervisor's log does not say why it dropped the silent clients")
	}
}

// Runs of two clients, each naming a data folder, go to the guest at once:
// the relay prepares them side by side (the second while the first is in
// flight), calls beforeRun for each, and routes each receipt to its own
// client.
func TestRunsOfTwoClientsAtOnce(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	prepared, before := 0, 0
	h.relay.SetPrepare(func(run *wire.RunHeader) ([]wire.DataFolder, *wire.Error) {
		mu.Lock()
		prepared++
		mu.Unlock()
		return []wire.DataFolder{{Name: run.Data[0], HostPath: "/host/" + run.RunID}}, nil
	})
	h.relay.SetBeforeRun(func() {
		mu.Lock()
		before++
		mu.Unlock()
	})
	a, b := h.connect(), h.connect()
	h.hello(a)
	h.hello(b)
	runA, runB := testRun("a"), testRun("b")
	runA.Data, runB.Data = []wire.DataFolder{{Name: "d"}}, []wire.DataFolder{{Name: "d"}}
	send(t, a, &wire.Message{Type: wire.TypeRun, ID: 1, Run: runA})
	ga := recv(t, h.guest)
	send(t, b, &wire.Message{Type: wire.TypeRun, ID: 1, Run: runB})
	gb := recv(t, h.guest)
	if ga.Run.RunID != "a" || gb.Run.RunID != "b" {
		t.Fatalf("the guest got %+v and %+v", ga.Run, gb.Run)
	}
	// b ends first; each receipt reaches its own client.
	for _, g := range []*wire.Message{gb, ga} {
		m := receipt(g.Run.RunID, wire.StatusOK)
		m.ID = g.ID
		send(t, h.guest, m)
	}
	for name, c := range map[string]net.Conn{"a": a, "b": b} {
		facts := recv(t, c)
		m := recv(t, c)
		if facts.Type != wire.TypeFacts || facts.Facts.Data[0].HostPath != "/host/"+name || m.Type != wire.TypeReceipt || m.Result.Receipt.RunID != name {
			t.Errorf("client %s got %+v then %+v", name, facts, m)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if prepared != 2 || before != 2 {
		t.Errorf("prepared %d runs, beforeRun called %d times; want 2 and 2", prepared, before)
	}
}
