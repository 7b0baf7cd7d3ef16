// Command fakemcp stands in for `pybox mcp` in host/mcptest's tests: a
// run_python server over stdio that needs no VM and answers each of the
// checks' programs (told apart by their "# pybox check: NAME" line) with
// a canned receipt. It is healthy unless -flaw names one defect, each of
// which exactly one check must catch.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/shared/wire"
)

// The flaws, and the check that must catch each.
var flaws = map[string]string{
	"":                   "none",
	"old-protocol":       "discover, initialize: offers MCP 2025-06-18 only",
	"no-discover":        "discover: offers MCP 2025-11-25 only (refuses server/discover)",
	"older-schema":       "initialize: under MCP 2025-11-25 the schema differs",
	"older-differs":      "initialize: under MCP 2025-11-25 results have no delivery",
	"schema":             "tools-list: a schema that hides the ceilings",
	"no-ttl":             "tools-list: the tool list carries no ttlMs",
	"text-differs":       "stdlib-run: the text content is not the structured JSON",
	"memory-sampled":     "memory-final: a memory reading that is not final",
	"wrong-image":        "image:data: every run reports image stdlib",
	"files-corrupt":      "files: a returned file's content does not match its sha256",
	"no-image":           "chart: a returned PNG comes back only as a file",
	"reused-process":     "fresh: two calls print the same random numbers (one process serves both)",
	"unknown-args":       "unknown-argument: unknown arguments are ignored",
	"ignore-ceiling":     "timeout-ceiling: a timeout above the ceiling is accepted",
	"echo-999":           "output-is-data: the program's JSON lines go to stdout",
	"crash-on-forge":     "output-is-data: the server exits during the forge run",
	"never-busy":         "busy: calls run side by side",
	"answers-cancelled":  "cancel: a cancelled call gets a response",
	"cancel-leaves-box":  "cancel: a cancelled run's box is left (cleanup FAILED)",
	"timeout-leaves-box": "timeout: a timed-out run's box is left (cleanup FAILED)",
	"hang-timeout":       "timeout: a run over its timeout never ends",
	"no-trim":            "trimmed: delivery.trimmed false on a result it cut",
	"oversize-ignored":   "oversize-message: a 600 KiB line is dropped silently and the session goes on",
	"vm-down-runs":       "vm-down: runs with no VM",
	"stray-line":         "stdout-protocol-only: a debug line on stdout",
}

var (
	flaw       = flag.String("flaw", "", "the defect to have")
	images     = flag.String("images", "stdlib", "allowed images")
	maxTimeout = flag.Float64("max-timeout", 2, "the timeout ceiling")
)

func main() {
	flag.Parse()
	if _, ok := flaws[*flaw]; !ok {
		fmt.Fprintf(os.Stderr, "fakemcp: unknown flaw %q\n", *flaw)
		os.Exit(2)
	}
	f := &fake{images: strings.Split(*images, ",")}
	f.out = &stdout{w: bufio.NewWriter(os.Stdout)}
	versions := []string{newestVersion, "2025-11-25"}
	switch *flaw {
	case "old-protocol":
		versions = []string{"2025-06-18"}
	case "no-discover":
		versions = []string{"2025-11-25"}
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "fakemcp", Version: "0"}, &mcp.ServerOptions{
		Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		SupportedProtocolVersions: versions,
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			if *flaw != "no-ttl" {
				c.TTLMs, c.CacheScope = 24*60*60*1000, "private"
			}
		},
	})
	srv.AddTool(&mcp.Tool{Name: "run_python", InputSchema: f.schema(false)}, f.call)
	t := &transport{out: f.out}
	if *flaw == "older-schema" {
		// The session's revision is known at initialize: the tool is
		// replaced before the server reads the handshake.
		t.initialize = func() { srv.AddTool(&mcp.Tool{Name: "run_python", InputSchema: f.schema(true)}, f.call) }
	}
	ss, err := srv.Connect(context.Background(), t, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakemcp:", err)
		os.Exit(1)
	}
	ss.Wait()
}

type fake struct {
	images []string
	out    *stdout
	busy   atomic.Bool
	runs   atomic.Int64
}

// newestVersion is the first MCP revision without a handshake.
const newestVersion = "2026-07-28"

// schema is run_python's input schema; older is the schema the
// older-schema flaw shows a session that initialized.
func (f *fake) schema(older bool) map[string]any {
	additional, maximum := false, *maxTimeout
	if *flaw == "schema" {
		additional, maximum = true, 30
	}
	if older {
		maximum++
	}
	return map[string]any{
		"type":                 "object",
		"additionalProperties": additional,
		"required":             []string{"code"},
		"properties": map[string]any{
			"code":             map[string]any{"type": "string", "maxLength": 65536},
			"image":            map[string]any{"type": "string", "enum": f.images},
			"timeout_s":        map[string]any{"type": "number", "exclusiveMinimum": 0, "maximum": maximum},
			"max_output_bytes": map[string]any{"type": "integer", "minimum": 1, "maximum": 8192},
			"files":            map[string]any{"type": "array", "maxItems": 16},
			"return_files":     map[string]any{"type": "boolean"},
		},
	}
}

// args are run_python's arguments as the fake reads them.
type args struct {
	Code        string   `json:"code"`
	Image       string   `json:"image"`
	Timeout     *float64 `json:"timeout_s"`
	ReturnFiles bool     `json:"return_files"`
	Files       []struct {
		Name, Content, Encoding string
	} `json:"files"`
}

var known = map[string]bool{"code": true, "image": true, "timeout_s": true, "max_output_bytes": true, "files": true, "return_files": true}

func (f *fake) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var keys map[string]json.RawMessage
	var a args
	if json.Unmarshal(req.Params.Arguments, &keys) != nil || json.Unmarshal(req.Params.Arguments, &a) != nil {
		return refuse("invalid_arguments", "arguments are not an object"), nil
	}
	for k := range keys {
		if !known[k] && *flaw != "unknown-args" {
			return refuse("invalid_arguments", fmt.Sprintf("unknown argument %q", k)), nil
		}
	}
	timeout := math.Min(2, *maxTimeout)
	if a.Timeout != nil {
		timeout = *a.Timeout
	}
	if timeout > *maxTimeout && *flaw != "ignore-ceiling" {
		return refuse("invalid_arguments", fmt.Sprintf("timeout_s is %v; at most %v", timeout, *maxTimeout)), nil
	}
	if a.Image == "" {
		a.Image = f.images[0]
	}
	if !contains(f.images, a.Image) {
		return refuse("invalid_arguments", "image not allowed"), nil
	}
	if noVM() && *flaw != "vm-down-runs" {
		return refuse(wire.ErrNoVM, "the VM is not running: start it with `pybox vm start`"), nil
	}
	if *flaw != "never-busy" {
		if !f.busy.CompareAndSwap(false, true) {
			return refuse(wire.ErrBusy, "another call is running"), nil
		}
		defer f.busy.Store(false)
	}
	p := req.Session.InitializeParams()
	return f.run(ctx, &a, timeout, p != nil && p.ProtocolVersion < newestVersion), nil
}

// noVM is true when PYBOX_HOME names a directory with no VM in it.
func noVM() bool {
	h := os.Getenv("PYBOX_HOME")
	if h == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(h, "vm"))
	return err != nil
}

// run answers a call; older says the session initialized at a revision
// before newestVersion.
func (f *fake) run(ctx context.Context, a *args, timeout float64, older bool) *mcp.CallToolResult {
	name, _, _ := strings.Cut(strings.TrimPrefix(a.Code, "# pybox check: "), "\n")
	rec := receipt(fmt.Sprintf("fake-%d", f.runs.Add(1)), a.Image, timeout)
	var images []mcp.Content
	doc := map[string]any{"schema_version": 1, "delivery": map[string]any{"trimmed": false, "what": []string{}}}
	switch name {
	case "hello":
		if *flaw == "stray-line" {
			f.out.line([]byte("fakemcp: debug: starting a run"))
		}
		rec.Capture.Stdout = "hello from pybox check\n" + sum([]byte("pybox")) + "\n"
	case "older-revision":
		rec.Capture.Stdout = "hello over MCP 2025-11-25\n"
		if older && *flaw == "older-differs" {
			delete(doc, "delivery")
		}
	case "image":
		rec.Capture.Stdout = "3.11.2\n"
	case "files":
		f.files(a, &rec, doc)
	case "chart":
		images = chart(&rec, doc)
	case "fresh":
		n := f.runs.Load()
		if *flaw == "reused-process" {
			n = 1
		}
		rec.Capture.Stdout = fmt.Sprintf("%d %d uuid-%d %x\n", n*7919, n*104729, n, n)
	case "forge":
		if *flaw == "crash-on-forge" {
			os.Exit(3)
		}
		f.forge(a, &rec)
	case "busy-first", "cancel", "timeout":
		f.sleep(ctx, name, timeout, &rec)
	case "trim":
		trim(&rec, doc)
	}
	doc["execution"] = rec
	res := result(doc, rec.Status != wire.StatusOK || rec.Cleanup.Status != wire.CleanupRemoved)
	res.Content = append(res.Content, images...)
	return res
}

// chart answers the chart program: a PNG, as a file and as an image
// block (none with no-image).
func chart(rec *wire.Receipt, doc map[string]any) []mcp.Content {
	m := image.NewGray(image.Rect(0, 0, 30, 20))
	for i := range m.Pix {
		m.Pix[i] = byte(i)
	}
	var b bytes.Buffer
	png.Encode(&b, m)
	rec.Capture.Stdout = sum(b.Bytes()) + "\n"
	rec.Output.Returned = []wire.FileDigest{{Name: "chart.png", Bytes: int64(b.Len()), SHA256: sum(b.Bytes())}}
	doc["files"] = []map[string]any{{"name": "chart.png", "bytes": b.Len(), "sha256": sum(b.Bytes()),
		"encoding": "base64", "content": base64.StdEncoding.EncodeToString(b.Bytes())}}
	if *flaw == "no-image" {
		return nil
	}
	return []mcp.Content{&mcp.ImageContent{Data: b.Bytes(), MIMEType: "image/png"}}
}

func receipt(id, image string, timeout float64) wire.Receipt {
	exit := 0
	reading := "final"
	if *flaw == "memory-sampled" {
		reading = "sampled"
	}
	if *flaw == "wrong-image" {
		image = "stdlib"
	}
	return wire.Receipt{
		SchemaVersion: 1, RunID: id, Status: wire.StatusOK, ExitCode: &exit,
		Image:   wire.ImageInfo{Name: image, Digest: sum([]byte(image))},
		Agent:   wire.AgentInfo{Version: "fake"},
		Limits:  wire.AppliedLimit{TimeoutSeconds: timeout, MaxOutputBytes: 4096},
		WallMS:  5,
		Memory:  wire.Memory{PeakBytes: 3 << 20, Reading: reading, LimitBytes: 512 << 20},
		Cleanup: wire.Cleanup{Status: wire.CleanupRemoved},
	}
}

// files answers the files program: what it prints and writes, from the
// inputs.
func (f *fake) files(a *args, rec *wire.Receipt, doc map[string]any) {
	in := map[string][]byte{}
	var names []string
	for _, file := range a.Files {
		b := []byte(file.Content)
		if file.Encoding == "base64" {
			b, _ = base64.StdEncoding.DecodeString(file.Content)
		}
		in[file.Name] = b
		names = append(names, file.Name)
		rec.InputFiles = append(rec.InputFiles, wire.FileDigest{Name: file.Name, Bytes: int64(len(b)), SHA256: sum(b)})
	}
	sort.Strings(names)
	for _, n := range names {
		rec.Capture.Stdout += fmt.Sprintf("%s %d %s\n", n, len(in[n]), sum(in[n]))
	}
	rev := bytes.Clone(in["in.bin"])
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	outs := []struct {
		name    string
		content []byte
	}{{"upper.txt", []byte(strings.ToUpper(string(in["in.txt"])))}, {"reversed.bin", rev}}
	var files []map[string]any
	for _, o := range outs {
		digest := sum(o.content)
		content, enc := string(o.content), "utf-8"
		if o.name == "reversed.bin" {
			content, enc = base64.StdEncoding.EncodeToString(o.content), "base64"
			if *flaw == "files-corrupt" {
				content = base64.StdEncoding.EncodeToString(append([]byte{'!'}, o.content[1:]...))
			}
		}
		rec.Output.Returned = append(rec.Output.Returned, wire.FileDigest{Name: o.name, Bytes: int64(len(o.content)), SHA256: digest})
		files = append(files, map[string]any{"name": o.name, "bytes": len(o.content), "sha256": digest, "encoding": enc, "content": content})
	}
	doc["files"] = files
}

// forge answers the forge program: its output is the string literal it
// writes. With echo-999 the output's JSON lines also reach stdout.
func (f *fake) forge(a *args, rec *wire.Receipt) {
	_, lit, _ := strings.Cut(a.Code, "sys.stdout.write(")
	lit, _, _ = strings.Cut(lit, ")\n")
	json.Unmarshal([]byte(lit), &rec.Capture.Stdout)
	if *flaw == "echo-999" {
		for _, l := range strings.Split(rec.Capture.Stdout, "\n") {
			if strings.HasPrefix(l, "{") {
				f.out.line([]byte(l))
			}
		}
	}
}

// sleep is a program that outlives its timeout. A cancelled one is
// reported on stderr, as its call gets no response (the transport
// withholds it).
func (f *fake) sleep(ctx context.Context, name string, timeout float64, rec *wire.Receipt) {
	limit := time.Duration(timeout * float64(time.Second))
	if *flaw == "hang-timeout" && name == "timeout" {
		limit = time.Hour
	}
	select {
	case <-ctx.Done():
		rec.Status, rec.ExitCode, rec.Signal = wire.StatusCancelled, nil, "SIGKILL"
		if *flaw == "cancel-leaves-box" {
			rec.Cleanup = wire.Cleanup{Status: wire.CleanupFailed, Detail: "a mount is left"}
		}
		fmt.Fprintf(os.Stderr, "fakemcp: run %s (cancelled: the client cancelled the call): cancelled, cleanup %s\n", rec.RunID, rec.Cleanup.Status)
		return
	case <-time.After(limit):
	}
	rec.Status, rec.ExitCode, rec.Signal = wire.StatusTimeout, nil, "SIGKILL"
	if *flaw == "timeout-leaves-box" {
		rec.Cleanup = wire.Cleanup{Status: wire.CleanupFailed, Detail: "a mount is left"}
	}
}

// trim answers the trim program with a result cut to fit, as pybox mcp
// cuts it; no-trim leaves delivery silent about it.
func trim(rec *wire.Receipt, doc map[string]any) {
	rec.Capture.Stdout = strings.Repeat("\x01", 1000)
	rec.Capture.Stderr = strings.Repeat("\x01", 1000)
	rec.Capture.StdoutInfo = wire.Stream{Bytes: 8192, KeptBytes: 8192}
	rec.Capture.StderrInfo = wire.Stream{Bytes: 8192, KeptBytes: 8192}
	if *flaw != "no-trim" {
		doc["delivery"] = map[string]any{"trimmed": true, "what": []string{"capture cut from 8192 to 1000 bytes to fit the 64 KiB receipt limit"}}
	}
}

func refuse(code, msg string) *mcp.CallToolResult {
	return result(map[string]any{
		"schema_version": 1,
		"error":          map[string]any{"code": code, "message": msg + ". Nothing ran."},
		"execution":      map[string]any{"cleanup": map[string]any{"status": wire.CleanupNotAttempted, "detail": "nothing ran"}},
		"delivery":       map[string]any{"trimmed": false, "what": []string{}},
	}, true)
}

func result(doc map[string]any, isError bool) *mcp.CallToolResult {
	b, _ := json.Marshal(doc)
	text := string(b)
	if *flaw == "text-differs" {
		text = "{}"
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(b), IsError: isError}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// stdout serializes whole lines to stdout.
type stdout struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *stdout) line(b []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(b)
	o.w.WriteByte('\n')
	return o.w.Flush()
}

// transport is newline-delimited JSON-RPC on stdin and stdout that, like
// pybox mcp's, withholds the response to a cancelled call and refuses a
// line over 512 KiB, ending the session.
// initialize, when set, is called as an initialize request is read.
type transport struct {
	out        *stdout
	initialize func()
}

func (t *transport) Connect(context.Context) (mcp.Connection, error) {
	c := &conn{out: t.out, initialize: t.initialize, in: make(chan msgOrErr), cancelled: map[jsonrpc.ID]bool{}}
	go c.readLoop()
	return c, nil
}

type msgOrErr struct {
	msg jsonrpc.Message
	err error
}

type conn struct {
	out        *stdout
	initialize func()
	in         chan msgOrErr
	mu         sync.Mutex
	cancelled  map[jsonrpc.ID]bool
}

const maxMessage = 512 << 10

func (c *conn) readLoop() {
	br := bufio.NewReaderSize(os.Stdin, 64<<10)
	for {
		line, over, err := readLine(br)
		switch {
		case over && *flaw == "oversize-ignored":
			continue
		case over:
			c.out.line([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"message refused: over 512 KiB; the session ends"}}`))
			c.in <- msgOrErr{err: io.EOF}
			return
		case len(bytes.TrimSpace(line)) > 0:
			msg, derr := jsonrpc.DecodeMessage(line)
			if derr != nil {
				continue
			}
			if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "notifications/cancelled" {
				c.markCancelled(req.Params)
			}
			if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "initialize" && c.initialize != nil {
				c.initialize()
			}
			c.in <- msgOrErr{msg: msg}
		}
		if err != nil {
			c.in <- msgOrErr{err: io.EOF}
			return
		}
	}
}

// readLine reads a line, skipping the rest of one over maxMessage.
func readLine(br *bufio.Reader) ([]byte, bool, error) {
	var line []byte
	over := false
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > maxMessage+1 {
			over, line = true, nil
		} else if !over {
			line = append(line, frag...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, over, err
		}
	}
}

func (c *conn) markCancelled(params json.RawMessage) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	json.Unmarshal(params, &p)
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	if *flaw == "answers-cancelled" {
		// Answer the cancelled call at once, whatever the SDK then does
		// with the handler's own answer: the flaw must show every time.
		c.Write(context.Background(), &jsonrpc.Response{ID: id, Result: json.RawMessage(`{"content":[{"type":"text","text":"cancelled"}]}`)})
		return
	}
	c.mu.Lock()
	c.cancelled[id] = true
	c.mu.Unlock()
}

func (c *conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-c.in:
		return m.msg, m.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *conn) Write(_ context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok && *flaw != "answers-cancelled" {
		c.mu.Lock()
		cancelled := c.cancelled[resp.ID]
		c.mu.Unlock()
		if cancelled {
			return nil
		}
	}
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.out.line(b)
}

func (c *conn) Close() error      { return nil }
func (c *conn) SessionID() string { return "" }
