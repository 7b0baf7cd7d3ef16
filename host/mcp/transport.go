package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Limits are what one session may send and how long it may stall.
type Limits struct {
	MaxMessageBytes int           // one message in, without its newline
	MaxMessages     int           // messages in per session
	MaxCalls        int           // tools/call requests per session
	StallTimeout    time.Duration // a write to the client blocked this long ends the session
}

// DefaultLimits are the documented ones (docs/limits.md).
func DefaultLimits() Limits {
	return Limits{MaxMessageBytes: 512 << 10, MaxMessages: 256, MaxCalls: 32, StallTimeout: 5 * time.Second}
}

// JSON-RPC error codes the transport answers with.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeInternalError  = -32603
)

const (
	methodToolsCall = "tools/call"
	methodCancelled = "notifications/cancelled"
)

var (
	errTooLarge     = errors.New("mcp: a message over the size limit")
	errTooMany      = errors.New("mcp: the session sent more messages than its limit")
	errStalled      = errors.New("mcp: the client stopped reading")
	errConnClosed   = errors.New("mcp: connection closed")
	errOversizedOut = errors.New("mcp: a response over 256 KiB was withheld")
)

// Transport is the stdio transport of `pybox mcp`: newline-delimited
// JSON-RPC on In and Out, like the SDK's StdioTransport, but it keeps the
// session's limits where only the transport can: a message over the size
// limit is refused before it is decoded, messages and tools/call requests
// are counted as they arrive, a client that stops reading is cut off, and
// a call the client cancelled gets no response.
type Transport struct {
	In     io.ReadCloser
	Out    io.WriteCloser
	Limits Limits
	// Log receives one line per event worth telling the user (never
	// stdout). Nil is silent.
	Log func(format string, args ...any)
}

// Connect implements sdk.Transport. A Transport connects once.
func (t *Transport) Connect(context.Context) (sdk.Connection, error) {
	lim := t.Limits
	if lim == (Limits{}) {
		lim = DefaultLimits()
	}
	c := &conn{
		in: t.In, out: t.Out, lim: lim, logf: t.Log,
		incoming: make(chan msgOrErr),
		closed:   make(chan struct{}),
		pending:  map[jsonrpc.ID]bool{},
	}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	go c.readLoop()
	return c, nil
}

type msgOrErr struct {
	msg jsonrpc.Message
	err error
}

type conn struct {
	in   io.ReadCloser
	out  io.WriteCloser
	lim  Limits
	logf func(format string, args ...any)

	incoming  chan msgOrErr
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error

	writeMu sync.Mutex

	mu sync.Mutex
	// pending holds the calls read and not yet answered; true once the
	// client cancelled one, so that its response is withheld.
	pending map[jsonrpc.ID]bool
}

func (c *conn) SessionID() string { return "" }

func (c *conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case v := <-c.incoming:
		return v.msg, v.err
	case <-c.closed:
		return nil, io.EOF
	}
}

// Write sends msg, unless it answers a call the client cancelled: the
// protocol says such a call gets no response.
func (c *conn) Write(_ context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok && c.answered(resp.ID) {
		c.logf("request %v was cancelled by the client: its response is withheld", resp.ID.Raw())
		return nil
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("mcp: encoding a message: %w", err)
	}
	if len(data)+1 > MaxResponseBytes {
		// Results are shaped to fit; this is the net under that.
		c.logf("a message of %d bytes is over the %d-byte limit and was withheld (a bug in pybox mcp)", len(data), MaxResponseBytes)
		resp, ok := msg.(*jsonrpc.Response)
		if !ok {
			return errOversizedOut
		}
		data = errorLine(resp.ID.Raw(), codeInternalError, "the response was over the 256 KiB limit and was withheld (a bug in pybox mcp)")
		return c.writeLine(data)
	}
	return c.writeLine(append(data, '\n'))
}

// writeLine writes one line, giving up (and closing the session) when the
// client has not taken it within the stall timeout. Closing is what
// unblocks the write: the pipe is non-blocking (see cmd/pybox) or an
// io.Pipe in tests.
func (c *conn) writeLine(line []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	select {
	case <-c.closed:
		return errConnClosed
	default:
	}
	stalled := time.AfterFunc(c.lim.StallTimeout, func() {
		c.logf("the client has not read for %v: closing the session", c.lim.StallTimeout)
		c.Close()
	})
	_, err := c.out.Write(line)
	if !stalled.Stop() {
		return errStalled
	}
	return err
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = errors.Join(c.in.Close(), c.out.Close())
	})
	return c.closeErr
}

// readLoop reads lines, keeps the limits, and hands messages to Read.
// It is the only reader of In and the only one to touch the counters.
func (c *conn) readLoop() {
	br := bufio.NewReaderSize(c.in, 64<<10)
	messages, calls := 0, 0
	for {
		line, err := readLine(br, c.lim.MaxMessageBytes)
		if errors.Is(err, errTooLarge) {
			c.logf("a message over %d bytes was refused before decoding: closing the session", c.lim.MaxMessageBytes)
			c.writeLine(errorLine(nil, codeInvalidRequest, fmt.Sprintf("message refused: over %d KiB; the session ends", c.lim.MaxMessageBytes>>10)))
			c.deliver(nil, err)
			return
		}
		if len(bytes.TrimSpace(line)) > 0 {
			messages++
			if messages > c.lim.MaxMessages {
				c.logf("the client sent more than %d messages: closing the session", c.lim.MaxMessages)
				c.writeLine(errorLine(requestID(line), codeInvalidRequest, fmt.Sprintf("this session has sent %d messages, its limit; the session ends: reconnect to go on", c.lim.MaxMessages)))
				c.deliver(nil, errTooMany)
				return
			}
			if msg, reply := c.admit(line, &calls); reply != nil {
				c.writeLine(reply)
			} else if !c.deliver(msg, nil) {
				return
			}
		}
		if err != nil {
			c.deliver(nil, err)
			return
		}
	}
}

// admit decodes one message and applies the per-message rules. It returns
// either the message to hand on, or a reply that answers it here.
func (c *conn) admit(line []byte, calls *int) (jsonrpc.Message, []byte) {
	if bytes.HasPrefix(bytes.TrimSpace(line), []byte("[")) {
		return nil, errorLine(nil, codeInvalidRequest, "JSON-RPC batches are not supported (MCP 2025-06-18 and later)")
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		return nil, errorLine(nil, codeParseError, "not a JSON-RPC message: "+err.Error())
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return msg, nil // a response to a request of ours
	}
	if !req.IsCall() {
		if req.Method == methodCancelled {
			c.cancelled(req.Params)
		}
		return msg, nil
	}
	if id, _ := json.Marshal(req.ID.Raw()); len(id) > maxIDBytes {
		return nil, errorLine(nil, codeInvalidRequest, fmt.Sprintf("request id over %d bytes refused", maxIDBytes))
	}
	if req.Method == methodToolsCall {
		if *calls++; *calls > c.lim.MaxCalls {
			c.logf("tools/call %d refused: the limit is %d a session", *calls, c.lim.MaxCalls)
			return nil, callLimitLine(req.ID, c.lim.MaxCalls, requestVersion(req.Params))
		}
	}
	c.mu.Lock()
	if _, dup := c.pending[req.ID]; !dup {
		c.pending[req.ID] = false
	}
	c.mu.Unlock()
	return msg, nil
}

// cancelled marks a pending call as cancelled. A cancellation for a call
// that is not pending (unknown, already answered) changes nothing.
func (c *conn) cancelled(params json.RawMessage) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil || !id.IsValid() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[id]; ok {
		c.pending[id] = true
	}
}

// answered forgets a pending call and reports whether it was cancelled.
func (c *conn) answered(id jsonrpc.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cancelled := c.pending[id]
	delete(c.pending, id)
	return cancelled
}

func (c *conn) deliver(msg jsonrpc.Message, err error) bool {
	select {
	case c.incoming <- msgOrErr{msg, err}:
		return true
	case <-c.closed:
		return false
	}
}

// readLine reads one line of at most max bytes (not counting its line
// ending), holding no more than that in memory. The rest of an oversized
// line is never read: the session ends.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(bytes.TrimRight(frag, "\r\n"))+len(line) > max {
			return nil, errTooLarge
		}
		line = append(line, frag...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

// requestID digs the id out of a line, for an error that answers it, or
// nil. The line is within the size limit.
func requestID(line []byte) any {
	var m struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	if id, _ := json.Marshal(m.ID); len(id) > maxIDBytes {
		return nil
	}
	return m.ID
}

// errorLine is a JSON-RPC error response, written by hand because the
// SDK's encoder leaves out a null id, which JSON-RPC requires when the
// request's id could not be read.
func errorLine(id any, code int, msg string) []byte {
	line, _ := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg}})
	return append(line, '\n')
}

// callLimitLine answers a tools/call over the session's limit with a tool
// error, as the handler would: the agent sees it like any other refusal,
// under the request's version (see requestVersion).
func callLimitLine(id jsonrpc.ID, max int, version string) []byte {
	modern := version >= newestVersion
	var w wireExtras
	if modern {
		w = wireExtras{serverInfo: serverInfo, resultType: true}
	}
	res := shapeFor(refused(codeSessionLimit, fmt.Sprintf(
		"this connection has made %d run_python calls, its limit; nothing ran: reconnect the server (start a new session) to run more", max)), w)
	raw, err := json.Marshal(res)
	if err != nil {
		return errorLine(id.Raw(), codeInternalError, "session limit reached")
	}
	if modern {
		// As the SDK writes every complete result under 2026-07-28; the
		// SDK's own setter is not exported.
		raw = append(raw[:len(raw)-1], `,"resultType":"complete"}`...)
	}
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Result: raw})
	if err != nil {
		return errorLine(id.Raw(), codeInternalError, "session limit reached")
	}
	return append(data, '\n')
}

// requestVersion is the protocol version a request names in its _meta
// (MCP 2026-07-28 and later name it in every request), or "" for a
// request of a client that initialized.
func requestVersion(params json.RawMessage) string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	var v string
	if json.Unmarshal(params, &p) == nil {
		json.Unmarshal(p.Meta[sdk.MetaKeyProtocolVersion], &v)
	}
	return v
}
