package mcptest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"
)

// Bounds on what the tap keeps.
const (
	// maxLine is the longest line read from the server; the rest of a
	// longer one is skipped. Results are at most 256 KiB.
	maxLine = 8 << 20
	// keptLine is how much of a line is kept for later comparison.
	keptLine = 4 << 10
	// shownLine is how much of a stray line a failure quotes.
	shownLine = 120
)

// seen is one message the server wrote.
type seen struct {
	At       time.Time
	ID       string // the id as canonical JSON; "" when there is none
	Method   string // for a request or notification
	Response bool
	IsError  bool   // a JSON-RPC error response
	ErrorMsg string // its message
	Bytes    int    // the line's length, without its newline
	Line     []byte // the line, when at most keptLine bytes
	Unasked  bool   // a response to an id the client never sent
	Late     bool   // a response to a call the client had cancelled
}

// sent is one request the client wrote.
type sent struct {
	At     time.Time
	ID     string
	Method string
	Head   []byte // the first keptLine bytes of the line
}

// tap sits between the SDK's client and the server's stdio. It is the
// io.ReadCloser the client reads the server from, and, through writer,
// the io.WriteCloser it writes to.
type tap struct {
	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every event
	got       []seen
	stray     []string // lines from the server that are not messages (cut)
	sentReqs  []sent
	ids       map[string]bool // ids the client sent
	cancelled map[string]bool // ids the client cancelled
	eof       bool            // the server closed its stdout
	queue     [][]byte        // lines for the client, not yet read
	partial   []byte          // the rest of a line the client began to read
	closed    bool            // the client closed its side
}

func newTap() *tap {
	return &tap{changed: make(chan struct{}), ids: map[string]bool{}, cancelled: map[string]bool{}}
}

// event wakes whoever waits; the caller holds mu.
func (t *tap) event() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// readFrom reads the server's stdout until it ends.
func (t *tap) readFrom(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, over, err := readLine(br)
		if len(line) > 0 || over || err == nil {
			t.fromServer(line, over)
		}
		if err != nil {
			break
		}
	}
	t.mu.Lock()
	t.eof = true
	t.event()
	t.mu.Unlock()
}

// readLine reads one line without its line ending. A line over maxLine is
// skipped to its end and reported as over.
func readLine(br *bufio.Reader) (line []byte, over bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !over {
			if len(line)+len(frag) > maxLine {
				over, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return bytes.TrimRight(line, "\r\n"), over, err
		}
	}
}

// envelope is what the tap reads of a JSON-RPC message.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// fromServer records a line and hands it to the client when the client
// can take it: never a line that is not a message (the SDK would end the
// session on it), nor a response the client is not waiting for.
func (t *tap) fromServer(line []byte, over bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.event()
	if over {
		t.stray = append(t.stray, "a line over 8 MiB")
		return
	}
	var e envelope
	if json.Unmarshal(line, &e) != nil || e.JSONRPC != "2.0" || (e.Method == nil && e.Result == nil && e.Error == nil) {
		t.stray = append(t.stray, cut(string(line), shownLine))
		return
	}
	s := seen{At: time.Now(), ID: canonicalID(e.ID), Bytes: len(line), Response: e.Method == nil, IsError: e.Error != nil}
	if e.Method != nil {
		s.Method = *e.Method
	}
	if e.Error != nil {
		s.ErrorMsg = e.Error.Message
	}
	if len(line) <= keptLine {
		s.Line = bytes.Clone(line)
	}
	if s.Response && s.ID != "null" {
		s.Unasked, s.Late = !t.ids[s.ID], t.cancelled[s.ID]
	}
	t.got = append(t.got, s)
	if s.Response && (s.Unasked || s.Late || s.ID == "null") {
		return
	}
	t.queue = append(t.queue, append(bytes.Clone(line), '\n'))
}

// canonicalID renders an id so that 7, 7.0 and 7e0 compare equal; a
// missing id is "".
func canonicalID(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Read gives the client the server's messages, one line at a time.
func (t *tap) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.partial) == 0 {
		switch {
		case t.closed:
			return 0, io.ErrClosedPipe
		case len(t.queue) > 0:
			t.partial, t.queue = t.queue[0], t.queue[1:]
		case t.eof:
			return 0, io.EOF
		default:
			ch := t.changed
			t.mu.Unlock()
			<-ch
			t.mu.Lock()
		}
	}
	n := copy(p, t.partial)
	t.partial = t.partial[n:]
	return n, nil
}

// Close is the client closing its reading side.
func (t *tap) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.event()
	return nil
}

// tapWriter is the client's way to the server's stdin. It records each
// request it passes on.
type tapWriter struct {
	t   *tap
	mu  sync.Mutex
	w   io.WriteCloser
	buf []byte
}

func (w *tapWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.t.fromClient(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	return w.w.Write(p)
}

func (w *tapWriter) Close() error { return w.w.Close() }

// raw writes one line as it is, past the SDK: for what no SDK would send.
func (w *tapWriter) raw(line []byte) error {
	_, err := w.Write(append(line, '\n'))
	return err
}

func (t *tap) fromClient(line []byte) {
	var e envelope
	if err := json.Unmarshal(line, &e); err != nil {
		// Too long or not JSON (a raw line of a check): read its head.
		e.ID, e.Method = headID(line), new(headMethod(line))
	}
	if e.Method == nil {
		return // a response to a request of the server's
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.event()
	id := canonicalID(e.ID)
	if *e.Method == "notifications/cancelled" {
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(e.Params, &p) == nil {
			t.cancelled[canonicalID(p.RequestID)] = true
		}
		return
	}
	if id == "" {
		return // a notification, or a response to the server
	}
	t.ids[id] = true
	t.sentReqs = append(t.sentReqs, sent{At: time.Now(), ID: id, Method: *e.Method, Head: bytes.Clone(line[:min(len(line), keptLine)])})
}

// headID and headMethod dig the id and method out of a line too long to
// decode whole; the client's raw lines put them first.
func headID(line []byte) json.RawMessage {
	var e struct {
		ID json.RawMessage `json:"id"`
	}
	_, rest, ok := bytes.Cut(line, []byte(`"id":`))
	if !ok {
		return nil
	}
	if end := bytes.IndexByte(rest, ','); end > 0 {
		if json.Unmarshal(append(append([]byte(`{"id":`), rest[:end]...), '}'), &e) == nil {
			return e.ID
		}
	}
	return nil
}

func headMethod(line []byte) string {
	_, rest, ok := bytes.Cut(line, []byte(`"method":"`))
	if !ok {
		return ""
	}
	m, _, _ := bytes.Cut(rest, []byte(`"`))
	return string(m)
}

// snapshot is a copy of what the tap has seen.
type snapshot struct {
	got   []seen
	stray []string
	sent  []sent
	eof   bool
}

func (t *tap) snapshot() snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return snapshot{got: append([]seen(nil), t.got...), stray: append([]string(nil), t.stray...),
		sent: append([]sent(nil), t.sentReqs...), eof: t.eof}
}

// waitFor waits until ok holds for what the tap has seen, or d passes.
func (t *tap) waitFor(d time.Duration, ok func(snapshot) bool) (snapshot, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		ch := t.changed
		t.mu.Unlock()
		s := t.snapshot()
		if ok(s) {
			return s, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return t.snapshot(), false
		}
	}
}

// requestID finds the id of the request whose line holds marker.
func (s snapshot) requestID(marker string) string {
	for _, r := range s.sent {
		if bytes.Contains(r.Head, []byte(marker)) {
			return r.ID
		}
	}
	return ""
}

// response returns the response to id, if one came.
func (s snapshot) response(id string) (seen, bool) {
	for _, m := range s.got {
		if m.Response && m.ID == id {
			return m, true
		}
	}
	return seen{}, false
}

// cut shortens s for a message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
