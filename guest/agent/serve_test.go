package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// fakeRunner holds each run until the test releases it or it is
// cancelled. It admits as many runs at once as it has room for.
type fakeRunner struct {
	started chan *wire.Run
	release chan struct{}
	panics  bool
	calls   atomic.Int32
	// stubborn runs ignore their cancel: only release ends them, as a
	// box stuck in the kernel would.
	stubborn atomic.Bool
	aborted  chan string

	mu       sync.Mutex
	room     int // runs admitted at once
	admitted map[string]*wire.Run
	refuse   error // Admit's answer when set
	aside    []string
	takers   map[string]func(net.Conn) bool // each run's conns, as Run got it
}

func newFakeRunner() *fakeRunner {
	return &fakeRunner{started: make(chan *wire.Run, 8), release: make(chan struct{}, 8), aborted: make(chan string, 8),
		room: 1, admitted: map[string]*wire.Run{}, takers: map[string]func(net.Conn) bool{}}
}

// fullError is the fake's refusal for memory.
type fullError struct{}

func (fullError) Error() string  { return "no memory for another run (test)" }
func (fullError) NoMemory() bool { return true }

func (f *fakeRunner) Admit(r *wire.Run) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.refuse != nil:
		return f.refuse
	case len(f.admitted) >= f.room:
		return fullError{}
	}
	f.admitted[r.RunID] = r
	return nil
}

func (f *fakeRunner) Cancel(runID string) {
	f.mu.Lock()
	delete(f.admitted, runID)
	f.mu.Unlock()
}

func (f *fakeRunner) Run(ctx context.Context, r *wire.Run, _ func(*wire.OutputChunk) error, conns func(net.Conn) bool) *wire.Result {
	f.calls.Add(1)
	defer f.Cancel(r.RunID)
	if f.panics {
		panic("box bug")
	}
	f.mu.Lock()
	f.takers[r.RunID] = conns
	f.mu.Unlock()
	f.started <- r
	status := wire.StatusOK
	done := ctx.Done()
	if f.stubborn.Load() {
		done = nil
	}
	select {
	case <-done:
		status = wire.StatusCancelled
	case <-f.release:
	}
	return &wire.Result{Receipt: wire.Receipt{RunID: r.RunID, Status: status, WallMS: 7,
		Cleanup: wire.Cleanup{Status: wire.CleanupRemoved}}}
}

func (f *fakeRunner) Runs() []wire.RunProgress {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []wire.RunProgress
	for _, r := range f.admitted {
		out = append(out, wire.RunProgress{RunID: r.RunID, Image: r.Image, Phase: "program", PhaseMS: 1, RunMS: 2, BoundMS: 3})
	}
	slices.SortFunc(out, func(x, y wire.RunProgress) int { return strings.Compare(x.RunID, y.RunID) })
	return out
}

func (f *fakeRunner) Room() *wire.Room {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &wire.Room{Total: int64(f.room), Runs: int64(len(f.admitted)), Left: int64(f.room - len(f.admitted)), RunsAtOnce: f.room}
}

func (f *fakeRunner) SetAside() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.aside)
}

func (f *fakeRunner) Warm() []wire.WarmBox { return []wire.WarmBox{{Image: "stdlib", State: "ready"}} }

func (f *fakeRunner) Close() {}

func (f *fakeRunner) Abort(runID string) wire.Cleanup {
	f.aborted <- runID
	return wire.Cleanup{Status: wire.CleanupRemoved, Detail: "torn down by the test"}
}

var testImages = []wire.ImageInfo{{Name: "stdlib", Digest: strings.Repeat("ab", 32)}}

// host is the test's side of a connection to the agent.
type host struct {
	t      *testing.T
	c      net.Conn
	served chan error // what Serve returned
	nextID uint64
}

func newAgent(t *testing.T, r *fakeRunner, powerOff func()) *Agent {
	return New(Config{Kernel: "6.1.0-test", Images: testImages, Runner: r, Logf: t.Logf, PowerOff: powerOff,
		WriteTimeout: 2 * time.Second})
}

func connect(t *testing.T, a *Agent) *host {
	t.Helper()
	hc, ac := net.Pipe()
	h := &host{t: t, c: hc, served: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.served <- a.Serve(ac)
	}()
	t.Cleanup(func() {
		hc.Close()
		<-done // Serve logs through t until it returns
	})
	return h
}

func (h *host) sendRaw(p []byte) {
	h.t.Helper()
	h.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := frame.Write(h.c, p); err != nil {
		h.t.Fatalf("host write: %v", err)
	}
}

func (h *host) send(m *wire.Message) uint64 {
	h.t.Helper()
	h.nextID++
	m.ID = h.nextID
	p, err := wire.Encode(m)
	if err != nil {
		h.t.Fatal(err)
	}
	h.sendRaw(p)
	return m.ID
}

func (h *host) recv() *wire.Message {
	h.t.Helper()
	h.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	p, err := frame.Read(h.c)
	if err != nil {
		h.t.Fatalf("host read: %v", err)
	}
	m, err := wire.Decode(p)
	if err != nil {
		h.t.Fatalf("host decode: %v", err)
	}
	return m
}

// expect receives one message of type typ answering id.
func (h *host) expect(id uint64, typ string) *wire.Message {
	h.t.Helper()
	m := h.recv()
	if m.Type != typ || m.ID != id {
		h.t.Fatalf("got %s id %d (%+v), want %s id %d", m.Type, m.ID, m.Error, typ, id)
	}
	return m
}

func (h *host) expectError(id uint64, code string) *wire.Error {
	h.t.Helper()
	m := h.expect(id, wire.TypeError)
	if m.Error.Code != code {
		h.t.Fatalf("error %q (%s), want %q", m.Error.Code, m.Error.Message, code)
	}
	refusedRun := code == wire.ErrBusy || code == wire.ErrBadRequest || code == wire.ErrNoImage || code == wire.ErrUnhealthy || code == wire.ErrNoMemory
	if refusedRun && (m.Error.Cleanup == nil || m.Error.Cleanup.Status != wire.CleanupNotAttempted) {
		h.t.Fatalf("a refused run (%s) says cleanup %+v, want %s", code, m.Error.Cleanup, wire.CleanupNotAttempted)
	}
	return m.Error
}

func (h *host) hello() *wire.Hello {
	h.t.Helper()
	id := h.send(&wire.Message{Type: wire.TypeHello, Hello: &wire.Hello{Protocol: wire.ProtocolVersion}})
	return h.expect(id, wire.TypeHello).Hello
}

func validRun(id string) *wire.Run {
	return &wire.Run{RunID: id, Code: "print(1)", Image: "stdlib", TimeoutSeconds: 2, MaxOutputBytes: 4096}
}

func TestHello(t *testing.T) {
	h := connect(t, newAgent(t, newFakeRunner(), nil))
	got := h.hello()
	if got.Protocol != wire.ProtocolVersion || got.AgentVersion != Version || got.AgentCommit != Commit ||
		got.Kernel != "6.1.0-test" || len(got.Images) != 1 || got.Images[0] != testImages[0] {
		t.Fatalf("hello %+v", got)
	}
	for _, c := range []string{"run", "cancel", "ping", "shutdown"} {
		if !strings.Contains(strings.Join(got.Capabilities, ","), c) {
			t.Errorf("capabilities %v lack %q", got.Capabilities, c)
		}
	}
	// A second hello (a new host on the same stream) is answered too.
	h.hello()
}

func TestHelloFirst(t *testing.T) {
	h := connect(t, newAgent(t, newFakeRunner(), nil))
	id := h.send(&wire.Message{Type: wire.TypePing})
	h.expectError(id, wire.ErrProtocol)
	id = h.send(&wire.Message{Type: wire.TypeHello, Hello: &wire.Hello{Protocol: wire.ProtocolVersion + 1}})
	if e := h.expectError(id, wire.ErrProtocol); !strings.Contains(e.Message, "same release") {
		t.Errorf("message %q does not say what to do", e.Message)
	}
	id = h.send(&wire.Message{Type: wire.TypePing})
	h.expectError(id, wire.ErrProtocol)
	h.hello()
	id = h.send(&wire.Message{Type: wire.TypePing})
	h.expect(id, wire.TypePong)
}

// A host from an older pybox, which frames its hello as plain JSON, is
// refused in its own framing, with what to do; a hello in the current
// framing then works.
func TestOlderHostIsToldToRebuild(t *testing.T) {
	h := connect(t, newAgent(t, newFakeRunner(), nil))
	h.sendRaw([]byte(`{"type":"hello","id":7,"hello":{"protocol":2}}`))
	h.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	p, err := frame.Read(h.c)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := wire.LegacyHello(p)
	if !ok || m.Type != wire.TypeError || m.ID != 7 || m.Error.Code != wire.ErrProtocol || !strings.Contains(m.Error.Message, "protocol 2") || !strings.Contains(m.Error.Message, "rebuild") {
		t.Fatalf("the refusal %q", p)
	}
	h.hello()
}

func TestGarbageIsRefusedAndServingGoesOn(t *testing.T) {
	h := connect(t, newAgent(t, newFakeRunner(), nil))
	h.hello()
	h.sendRaw([]byte("this is no frame"))
	h.expectError(0, wire.ErrProtocol)
	h.sendRaw(wire.EncodeRaw(wire.TypeCancel, 41, []byte(`{"run_id":"a","shell":true}`))) // unknown field
	h.expectError(41, wire.ErrProtocol)
	h.sendRaw(wire.EncodeRaw(wire.TypeRun, 42, nil)) // run without its body
	h.expectError(42, wire.ErrProtocol)
	h.sendRaw(wire.EncodeRaw(wire.TypePong, 43, nil)) // not a host's message
	h.expectError(43, wire.ErrProtocol)
	h.sendRaw(wire.EncodeRaw("launch", 44, nil)) // no such kind
	h.expectError(0, wire.ErrProtocol)
	id := h.send(&wire.Message{Type: wire.TypePing})
	h.expect(id, wire.TypePong)
}

// A frame that declares too much leaves the stream at an unknown place:
// the connection is dropped without allocating for it.
func TestTooLargeFrameDropsConnection(t *testing.T) {
	h := connect(t, newAgent(t, newFakeRunner(), nil))
	h.hello()
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], frame.Max+1)
	h.c.Write(hdr[:])
	select {
	case err := <-h.served:
		if !errors.Is(err, frame.ErrTooLarge) {
			t.Fatalf("Serve returned %v, want frame.ErrTooLarge", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("connection not dropped")
	}
	h.c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := h.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the agent's side is still open")
	}
}

func TestRunBusyCancel(t *testing.T) {
	r := newFakeRunner()
	h := connect(t, newAgent(t, r, nil))
	h.hello()
	runA := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("a")})
	<-r.started
	again := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("a")})
	if e := h.expectError(again, wire.ErrBusy); !strings.Contains(e.Message, "nothing was queued") {
		t.Errorf("busy message %q", e.Message)
	}
	full := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("b")})
	if e := h.expectError(full, wire.ErrNoMemory); !strings.Contains(e.Message, "no memory") {
		t.Errorf("no_memory message %q", e.Message)
	}
	id := h.send(&wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: "a"}})
	// The ok and the receipt may come in either order.
	got := map[uint64]*wire.Message{}
	for range 2 {
		m := h.recv()
		got[m.ID] = m
	}
	if got[id] == nil || got[id].Type != wire.TypeOK {
		t.Fatalf("cancel answered %+v", got[id])
	}
	if m := got[runA]; m == nil || m.Type != wire.TypeReceipt || m.Result.Receipt.Status != wire.StatusCancelled {
		t.Fatalf("run a answered %+v", m)
	}
	// Not left busy; a cancel for a finished or unknown run is harmless.
	for _, runID := range []string{"a", "nobody"} {
		id = h.send(&wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: runID}})
		h.expect(id, wire.TypeOK)
	}
	runC := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("c")})
	<-r.started
	r.release <- struct{}{}
	if m := h.expect(runC, wire.TypeReceipt); m.Result.Receipt.Status != wire.StatusOK {
		t.Fatalf("run c: %+v", m.Result.Receipt)
	}
	if n := r.calls.Load(); n != 2 {
		t.Fatalf("runner called %d times, want 2", n)
	}
}

func TestRunRefusedBeforeTheBox(t *testing.T) {
	r := newFakeRunner()
	a := newAgent(t, r, nil)
	h := connect(t, a)
	h.hello()
	bad := validRun("x")
	bad.TimeoutSeconds = 0
	id := h.send(&wire.Message{Type: wire.TypeRun, Run: bad})
	h.expectError(id, wire.ErrBadRequest)
	bad = validRun("../x")
	id = h.send(&wire.Message{Type: wire.TypeRun, Run: bad})
	h.expectError(id, wire.ErrBadRequest)

	noImg := validRun("y")
	noImg.Image = "data"
	id = h.send(&wire.Message{Type: wire.TypeRun, Run: noImg})
	if e := h.expectError(id, wire.ErrNoImage); !strings.Contains(e.Message, "stdlib") {
		t.Errorf("no_image message %q does not list the images", e.Message)
	}

	r.refuse = errors.New("box: /sys/fs/cgroup is not a cgroup2 hierarchy")
	id = h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("z")})
	h.expectError(id, wire.ErrUnhealthy)
	if n := r.calls.Load(); n != 0 {
		t.Fatalf("runner called %d times; nothing may run", n)
	}
}

func TestCancelBeforeRun(t *testing.T) {
	r := newFakeRunner()
	h := connect(t, newAgent(t, r, nil))
	h.hello()
	id := h.send(&wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: "early"}})
	h.expect(id, wire.TypeOK)
	id = h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("early")})
	<-r.started
	if m := h.expect(id, wire.TypeReceipt); m.Result.Receipt.Status != wire.StatusCancelled {
		t.Fatalf("a run whose cancel came first: %+v", m.Result.Receipt)
	}
}

func TestShutdownCancelsThenPowersOff(t *testing.T) {
	r := newFakeRunner()
	off := make(chan struct{})
	h := connect(t, newAgent(t, r, func() { close(off) }))
	h.hello()
	run := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("s")})
	<-r.started
	id := h.send(&wire.Message{Type: wire.TypeShutdown})
	h.expect(id, wire.TypeOK)
	if m := h.expect(run, wire.TypeReceipt); m.Result.Receipt.Status != wire.StatusCancelled {
		t.Fatalf("run during shutdown: %+v", m.Result.Receipt)
	}
	select {
	case <-off:
	case <-time.After(5 * time.Second):
		t.Fatal("not powered off")
	}
}

func TestClosedConnectionCancelsItsRun(t *testing.T) {
	r := newFakeRunner()
	a := newAgent(t, r, nil)
	h := connect(t, a)
	h.hello()
	h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("orphan")})
	<-r.started
	h.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		idle := len(a.runs) == 0 && len(a.history) == 1 && a.history[0].status == wire.StatusCancelled
		a.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run of a closed connection was not cancelled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Another connection may run now.
	h2 := connect(t, a)
	h2.hello()
	id := h2.send(&wire.Message{Type: wire.TypeRun, Run: validRun("next")})
	<-r.started
	r.release <- struct{}{}
	h2.expect(id, wire.TypeReceipt)
}

func TestPanickingBoxMakesAgentUnhealthy(t *testing.T) {
	r := newFakeRunner()
	r.panics = true
	h := connect(t, newAgent(t, r, nil))
	h.hello()
	id := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("p")})
	e := h.expectError(id, wire.ErrInternal)
	if e.Cleanup == nil || e.Cleanup.Status != wire.CleanupFailed {
		t.Fatalf("cleanup after a panic: %+v", e.Cleanup)
	}
	id = h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("q")})
	h.expectError(id, wire.ErrUnhealthy)
}

// A host that stops reading is dropped after the write timeout; the
// agent does not hang on it.
func TestStalledHostIsDropped(t *testing.T) {
	a := newAgent(t, newFakeRunner(), nil)
	a.cfg.WriteTimeout = 50 * time.Millisecond
	h := connect(t, a)
	h.hello()
	h.send(&wire.Message{Type: wire.TypePing}) // never read
	select {
	case <-h.served:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still blocked on a host that does not read")
	}
}

// A pong says what the agent is doing: its health and where the run in
// progress is.
func TestPongCarriesStatus(t *testing.T) {
	r := newFakeRunner()
	h := connect(t, newAgent(t, r, nil))
	h.hello()
	id := h.send(&wire.Message{Type: wire.TypePing})
	if st := h.expect(id, wire.TypePong).Status; st == nil || st.Health != "healthy" || len(st.Runs) != 0 || st.Room == nil {
		t.Fatalf("idle pong status %+v", st)
	}
	runA := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("a")})
	<-r.started
	r.mu.Lock()
	r.aside = []string{"r0: cgroup /sys/fs/cgroup/runs/r0"}
	r.mu.Unlock()
	id = h.send(&wire.Message{Type: wire.TypePing})
	st := h.expect(id, wire.TypePong).Status
	if st == nil || len(st.Runs) != 1 || st.Runs[0].RunID != "a" || st.Runs[0].Phase != "program" || st.Room.Left != 0 {
		t.Fatalf("pong during a run: %+v", st)
	}
	if len(st.SetAside) != 1 || !strings.Contains(st.Health, "set aside") {
		t.Errorf("a box set aside: health %q, set aside %q", st.Health, st.SetAside)
	}
	r.release <- struct{}{}
	h.expect(runA, wire.TypeReceipt)
}

// A run that does not end by its bound (a box stuck in the kernel, which
// no cancel reaches) is torn down by the watchdog: the host gets an
// answer with the cleanup the runner could confirm; the stuck run keeps its
// room and is named in the health until the runner lets go, while other
// runs go on.
func TestWatchdogTearsDownAStuckRun(t *testing.T) {
	r := newFakeRunner()
	r.room = 2
	r.stubborn.Store(true)
	a := New(Config{Kernel: "6.1.0-test", Images: testImages, Runner: r, Logf: t.Logf,
		WriteTimeout: 2 * time.Second, Watchdog: func(r *wire.Run) time.Duration {
			if r.RunID == "a" {
				return 200 * time.Millisecond
			}
			return time.Minute
		}})
	h := connect(t, a)
	h.hello()
	t0 := time.Now()
	runA := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("a")})
	<-r.started
	m := h.expect(runA, wire.TypeError)
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("the watchdog answered after %v", took)
	}
	if m.Error.Code != wire.ErrInternal || !strings.Contains(m.Error.Message, "overran its bound") ||
		m.Error.Cleanup == nil || m.Error.Cleanup.Status != wire.CleanupRemoved {
		t.Fatalf("watchdog answer %+v (cleanup %+v)", m.Error, m.Error.Cleanup)
	}
	if got := <-r.aborted; got != "a" {
		t.Fatalf("aborted %q", got)
	}
	id := h.send(&wire.Message{Type: wire.TypePing})
	if st := h.expect(id, wire.TypePong).Status; !strings.Contains(st.Health, "run a overran") || len(st.Runs) != 1 {
		t.Errorf("status while stuck: %q, runs %+v", st.Health, st.Runs)
	}
	r.stubborn.Store(false)
	runB := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("b")})
	<-r.started
	full := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("x")})
	h.expectError(full, wire.ErrNoMemory) // a's room is still held
	// b is cancelled (the stuck a ignores cancels; a release could be
	// a's).
	cancel := h.send(&wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: "b"}})
	got := map[uint64]*wire.Message{}
	for range 2 {
		m := h.recv()
		got[m.ID] = m
	}
	if m := got[runB]; m == nil || m.Type != wire.TypeReceipt || m.Result.Receipt.Status != wire.StatusCancelled || got[cancel] == nil {
		t.Fatalf("run b beside the stuck run: %+v", m)
	}
	r.release <- struct{}{} // the runner lets go of a at last
	deadline := time.Now().Add(5 * time.Second)
	for {
		id := h.send(&wire.Message{Type: wire.TypePing})
		if h.expect(id, wire.TypePong).Status.Health == "healthy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still unhealthy after the runner let go")
		}
		time.Sleep(10 * time.Millisecond)
	}
	runC := h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("c")})
	<-r.started
	r.release <- struct{}{}
	if m := h.expect(runC, wire.TypeReceipt); m.Result.Receipt.Status != wire.StatusOK {
		t.Fatalf("run c: %+v", m.Result.Receipt)
	}
}

// Runs go on at once, as many as the runner admits: each receipt goes to
// the connection its run came from, a cancel or a closed connection ends
// only its own runs, and a run past the room is refused for memory.
func TestRunsAtOnce(t *testing.T) {
	r := newFakeRunner()
	r.room = 3
	a := newAgent(t, r, nil)
	h1, h2 := connect(t, a), connect(t, a)
	h1.hello()
	h2.hello()
	runA := h1.send(&wire.Message{Type: wire.TypeRun, Run: validRun("a")})
	runB := h2.send(&wire.Message{Type: wire.TypeRun, Run: validRun("b")})
	runC := h2.send(&wire.Message{Type: wire.TypeRun, Run: validRun("c")})
	for range 3 {
		<-r.started
	}
	h1.expectError(h1.send(&wire.Message{Type: wire.TypeRun, Run: validRun("d")}), wire.ErrNoMemory)
	id := h2.send(&wire.Message{Type: wire.TypePing})
	if st := h2.expect(id, wire.TypePong).Status; len(st.Runs) != 3 {
		t.Fatalf("pong lists %d runs, want 3: %+v", len(st.Runs), st.Runs)
	}

	cancel := h2.send(&wire.Message{Type: wire.TypeCancel, Cancel: &wire.Cancel{RunID: "b"}})
	got := map[uint64]*wire.Message{}
	for range 2 {
		m := h2.recv()
		got[m.ID] = m
	}
	if m := got[runB]; m == nil || m.Type != wire.TypeReceipt || m.Result.Receipt.RunID != "b" || m.Result.Receipt.Status != wire.StatusCancelled || got[cancel] == nil {
		t.Fatalf("cancelled b: %+v", got)
	}
	h1.c.Close() // a's connection: a is cancelled, c goes on
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		_, aRuns := a.runs["a"]
		_, cRuns := a.runs["c"]
		a.mu.Unlock()
		if !aRuns {
			if !cRuns {
				t.Fatal("c ended with a's connection")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run of a closed connection was not cancelled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.release <- struct{}{}
	if m := h2.expect(runC, wire.TypeReceipt); m.Result.Receipt.RunID != "c" || m.Result.Receipt.Status != wire.StatusOK {
		t.Fatalf("run c: %+v", m.Result.Receipt)
	}
	_ = runA
}
