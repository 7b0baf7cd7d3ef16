package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/client"
	"pybox/host/egress"
	"pybox/shared/wire"
)

// fakeVM stands in for the VM in unit tests. By default a run prints its
// code; code "block" runs until it is cancelled (then its receipt says
// cancelled, cleanup REMOVED), code "wait" until release is closed.
type fakeVM struct {
	down    bool
	refuse  error // when set, dial fails with it though the VM is up
	release chan struct{}
	// result, when set, answers every run.
	result func(r *wire.Run) (*wire.Result, error)
	// deliver, when set, answers every run that asks for delivery.
	deliver func(r *wire.Run, output func(*wire.OutputChunk)) (*wire.Result, error)
	// network, when set, is the network section of the receipt of every
	// run with a gate, as host/client makes it from the gate's records.
	network func(g *egress.Gate) *wire.Network
	// cleanup is how long a cancelled run takes to answer: the guest
	// kills the box and removes it first.
	cleanup time.Duration

	mu        sync.Mutex
	runs      []*wire.Run
	gates     []*egress.Gate // each run's, nil for a run without one
	cancelled []string
	started   chan string // run ids as they start
	stopping  chan string // run ids as their cancellation reaches them
}

func newFakeVM() *fakeVM {
	return &fakeVM{release: make(chan struct{}), started: make(chan string, 64), stopping: make(chan string, 64)}
}

func (v *fakeVM) dial(context.Context) (VM, error) {
	if v.down {
		return nil, errors.New("the VM is not running: start it with `pybox vm start`")
	}
	if v.refuse != nil {
		return nil, v.refuse
	}
	return fakeConn{v}, nil
}

func (v *fakeVM) Runs() []*wire.Run {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]*wire.Run(nil), v.runs...)
}

func (v *fakeVM) Gates() []*egress.Gate {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]*egress.Gate(nil), v.gates...)
}

func (v *fakeVM) Cancelled() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.cancelled...)
}

type fakeConn struct{ v *fakeVM }

func (c fakeConn) Close() error { return nil }

// RunWith hands on the fake guest's answer as host/client does: bounded,
// and with the network section from the gate (host/client refuses a run
// whose Net and gate disagree).
func (c fakeConn) RunWith(ctx context.Context, checked *client.Checked, opts client.RunOptions) (*client.Result, error) {
	run := checked.Run()
	c.v.mu.Lock()
	c.v.gates = append(c.v.gates, opts.Net)
	c.v.mu.Unlock()
	if run.Net != (opts.Net != nil) {
		return nil, &wire.Error{Code: wire.ErrBadRequest, Message: "the run's Net and its gate disagree", Cleanup: wire.NothingRan()}
	}
	res, err := c.answer(ctx, checked, opts.Output)
	if res == nil {
		return nil, err
	}
	out := taken(res)
	if opts.Net != nil {
		out.Receipt.Network = &wire.Network{Allowed: opts.Net.Allow.String(), Connections: []wire.NetConnection{}}
		if c.v.network != nil {
			out.Receipt.Network = c.v.network(opts.Net)
		}
	}
	return out, err
}

// answer is what the fake guest answers to a run.
func (c fakeConn) answer(ctx context.Context, checked *client.Checked, output func(*wire.OutputChunk)) (*wire.Result, error) {
	run := checked.Run()
	r := &run
	v := c.v
	v.mu.Lock()
	v.runs = append(v.runs, r)
	v.mu.Unlock()
	v.started <- r.RunID
	if v.deliver != nil && r.Deliver != nil {
		return v.deliver(r, output)
	}
	if v.result != nil {
		return v.result(r)
	}
	rec := receipt(r.RunID, wire.StatusOK, wire.CleanupRemoved)
	rec.Capture.Stdout = r.Code
	switch r.Code {
	case "block":
		<-ctx.Done()
	case "wait":
		select {
		case <-v.release:
		case <-ctx.Done():
		}
	}
	if ctx.Err() != nil {
		v.stopping <- r.RunID
		time.Sleep(v.cleanup)
		v.mu.Lock()
		v.cancelled = append(v.cancelled, r.RunID)
		v.mu.Unlock()
		rec.Status, rec.Reason = wire.StatusCancelled, "the host cancelled the run"
	}
	return &wire.Result{Receipt: rec}, nil
}

// logBuf collects the server's log lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// waitLog waits for a log line holding all of words.
func (l *logBuf) waitLog(t *testing.T, words ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(l.String(), "\n") {
			ok := true
			for _, w := range words {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no log line with %q; log:\n%s", words, l)
}

// waitCount waits for n log lines holding word.
func (l *logBuf) waitCount(t *testing.T, word string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(l.String(), word) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d log lines with %q; log:\n%s", n, word, l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// session is a server serving one session over pipes, as over stdio.
type session struct {
	t      *testing.T
	srv    *Server
	vm     *fakeVM
	log    *logBuf
	in     *io.PipeWriter // the client's end of the server's stdin
	out    *io.PipeReader // the client's end of the server's stdout
	served chan error
	stop   context.CancelFunc
}

func startSession(t *testing.T, opts Options, vm *fakeVM, lim Limits) *session {
	t.Helper()
	log := &logBuf{}
	srv, err := NewServer(opts, vm.dial, log.logf)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, stop := context.WithCancel(context.Background())
	s := &session{t: t, srv: srv, vm: vm, log: log, in: inW, out: outR, served: make(chan error, 1), stop: stop}
	go func() {
		s.served <- srv.Serve(ctx, &Transport{In: inR, Out: outW, Limits: lim, Log: log.logf})
	}()
	t.Cleanup(func() {
		stop()
		inW.Close()
		outR.Close()
		select {
		case <-s.served:
		case <-time.After(10 * time.Second):
			t.Error("the server did not stop")
		}
	})
	return s
}

// ended waits for Serve to return.
func (s *session) ended() error {
	s.t.Helper()
	select {
	case err := <-s.served:
		s.served <- err
		return err
	case <-time.After(10 * time.Second):
		s.t.Fatalf("the session did not end; log:\n%s", s.log)
		return nil
	}
}

// client connects the Go SDK's client to the session.
func (s *session) client(version string) *sdk.ClientSession {
	s.t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.IOTransport{Reader: s.out, Writer: s.in}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { cs.Close() })
	return cs
}

// raw is a client that speaks JSON lines by hand. Lines the server sends
// are read in the background (unless paused) and queued.
type raw struct {
	s      *session
	lines  chan []byte
	paused chan struct{} // closed: stop reading
}

// pause stops reading what the server sends, like a stalled client.
func (r *raw) pause() { close(r.paused) }

// pausable reads from r until paused is closed, then never returns: a
// reader that stopped, not one that went away.
type pausable struct {
	r            io.Reader
	paused, quit chan struct{}
}

func (p pausable) Read(b []byte) (int, error) {
	select {
	case <-p.paused:
		<-p.quit
		return 0, io.EOF
	default:
		return p.r.Read(b)
	}
}

func (s *session) raw(initialize bool) *raw {
	r := &raw{s: s, lines: make(chan []byte, 1024), paused: make(chan struct{})}
	quit := make(chan struct{})
	s.t.Cleanup(func() { close(quit) })
	go func() {
		br := bufio.NewReaderSize(pausable{s.out, r.paused, quit}, 16)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				r.lines <- line
			}
			if err != nil {
				close(r.lines)
				return
			}
		}
	}()
	if initialize {
		r.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
		r.reply("init")
		r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	}
	return r
}

func (r *raw) send(line string) {
	r.s.t.Helper()
	if _, err := io.WriteString(r.s.in, line+"\n"); err != nil {
		r.s.t.Fatalf("send: %v", err)
	}
}

// message is a JSON-RPC message from the server.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	line []byte
}

// next returns the next message, or nil when the server closed its end.
func (r *raw) next() *message {
	r.s.t.Helper()
	select {
	case line, ok := <-r.lines:
		if !ok {
			return nil
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			r.s.t.Fatalf("the server sent a line that is not JSON: %v: %.200q", err, line)
		}
		m.line = line
		return &m
	case <-time.After(10 * time.Second):
		r.s.t.Fatalf("no message from the server; log:\n%s", r.s.log)
		return nil
	}
}

// reply returns the response to id, failing on any other response first.
func (r *raw) reply(id string) *message {
	r.s.t.Helper()
	for {
		m := r.next()
		if m == nil {
			r.s.t.Fatalf("the server closed before answering %s", id)
		}
		if m.Method != "" {
			continue // a notification
		}
		if got := strings.Trim(string(m.ID), `"`); got != id {
			r.s.t.Fatalf("response to %s while waiting for %s: %.300s", got, id, m.line)
		}
		return m
	}
}

// closed checks that the server closes its end with no more messages
// than the ones allowed.
func (r *raw) closed() {
	r.s.t.Helper()
	if m := r.next(); m != nil {
		r.s.t.Fatalf("a message where the end was expected: %.300s", m.line)
	}
}

// call sends a tools/call with raw arguments.
func (r *raw) call(id, args string) {
	r.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"run_python","arguments":` + args + `}}`)
}

// toolResult checks and decodes a tools/call response as it came.
func toolResult(t *testing.T, m *message) *decoded {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("a JSON-RPC error where a tool result was expected: %d %s", m.Error.Code, m.Error.Message)
	}
	return checkEncoded(t, m.Result, len(m.line))
}

// fromClient decodes a result the Go SDK's client got. The client decoded
// structuredContent into a map, so its bytes are gone: check that it says
// what the text says, then decode the text.
func fromClient(t *testing.T, res *sdk.CallToolResult) *decoded {
	t.Helper()
	if len(res.Content) == 0 {
		t.Fatal("no content")
	}
	text := res.Content[0].(*sdk.TextContent).Text
	var fromText any
	if err := json.Unmarshal([]byte(text), &fromText); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromText, res.StructuredContent) {
		t.Fatal("structuredContent and the text differ")
	}
	content := []any{map[string]string{"type": "text", "text": text}}
	for _, c := range res.Content[1:] {
		im, ok := c.(*sdk.ImageContent)
		if !ok {
			t.Fatalf("a %T after the text", c)
		}
		content = append(content, im)
	}
	result, _ := json.Marshal(struct {
		Content           []any           `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}{content, json.RawMessage(text), res.IsError})
	d := checkEncoded(t, result, 0)
	return d
}

// noLeaks checks, when the test ends, that its goroutines are gone.
func noLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines left behind:\n%s", n-before, buf[:runtime.Stack(buf, true)])
		}
	})
}

// cancelByContext makes a call that blocks, cancels it by the Go client's
// context once its run has started, and waits until the cancel has
// reached the run: the client gets no result, the run one cancel.
func cancelByContext(t *testing.T, cs *sdk.ClientSession, vm *fakeVM) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-vm.started; cancel() }()
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "block"}}); err == nil {
		t.Fatal("a cancelled call returned a result")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(vm.Cancelled()) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(vm.Cancelled()) != 1 {
		t.Fatal("the client's cancel did not reach the run")
	}
}
