package e2e

// End-to-end tests of `pybox mcp`: the real binary spoken to over stdio by
// MCP clients nobody here wrote (the Go SDK's, through its
// CommandTransport, and the official TypeScript SDK's, 1.x and 2.x, under
// node), and by a raw client for what an SDK will not send (a 600 KiB
// message, a client that stops reading). The Go client and the raw one
// speak both revisions the server does, 2026-07-28 and 2025-11-25 (see
// mcp_versions_e2e_test.go). The tests that need no VM run everywhere;
// the rest share one VM with `pybox check`'s and the agents' (see
// startMCPVM).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/client"
	"pybox/shared/needs"
	"pybox/shared/wire"
)

// mcpVMStartArgs are the `pybox vm start` flags of the VM the MCP tests
// share: it needs the stdlib and data images.
var mcpVMStartArgs = []string{"--images", "stdlib,data"}

// mcpVM is the VM that the tests of `pybox mcp`, `pybox check` and the
// agent CLIs share: started by the first of them, stopped after the last
// test (see TestMain's atExit).
var mcpVM struct {
	once sync.Once
	env  *vmEnv // its t is the test that started it: use startMCPVM(t)
	skip string // why it cannot start here (a skip, or a failure in CI)
	err  error
}

// startMCPVM returns the VM the MCP tests share. With PYBOX_HOME set to a
// home whose VM is running, it uses that VM (and leaves it running):
// handy while working on `pybox mcp`. Otherwise the first call starts one
// in a fresh home, which needs what newVMEnv needs (kernel, initramfs,
// QEMU) and the images stdlib and data where `make images` put them.
func startMCPVM(t testing.TB) *vmEnv {
	if home := os.Getenv("PYBOX_HOME"); home != "" {
		if c, err := client.Dial(home); err == nil {
			c.Close()
			t.Logf("using the VM running under PYBOX_HOME=%s", home)
			return &vmEnv{t: t, bin: pyboxBin(t), home: home, env: os.Environ()}
		}
	}
	guestArtifactsForTest(t)
	mcpVM.once.Do(func() { bootMCPVM(t) })
	if mcpVM.skip != "" {
		needs.Unavailable(t, mcpVM.skip)
	}
	if mcpVM.err != nil {
		t.Fatal(mcpVM.err)
	}
	e := *mcpVM.env
	e.t = t
	return &e
}

func bootMCPVM(t testing.TB) {
	// Until the VM answers, later tests see why it did not.
	mcpVM.err = fmt.Errorf("the shared MCP VM did not start: see the log of %s", t.Name())
	k, i := guestArtifactsForTest(t)
	home, err := os.MkdirTemp("", "pybox-mcp")
	if err != nil {
		mcpVM.err = err
		return
	}
	e := &vmEnv{t: t, bin: pyboxBin(t), home: home, arch: guestArch}
	e.env = append(os.Environ(), "PYBOX_HOME="+home, "PYBOX_KERNEL="+k, "PYBOX_INITRAMFS="+i)
	atExit = append(atExit, func() { stopSharedVM(e) })
	missing, err := linkImagesInto(home, guestArch, "stdlib", "data")
	if missing != "" || err != nil {
		mcpVM.skip, mcpVM.err = missing, err
		return
	}
	e.mustStart(mcpVMStartArgs...)
	mcpVM.env, mcpVM.err = e, nil
}

// needImage stops a test that needs an image the VM does not have: a
// skip with the fix, or a failure in CI.
func needImage(t *testing.T, e *vmEnv, name string) {
	t.Helper()
	c, err := client.Dial(e.home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, im := range c.Hello().Images {
		if im.Name == name {
			return
		}
	}
	needs.Unavailable(t, fmt.Sprintf("the VM has no %s image: build it (make images) and start the VM with it", name))
}

// noVMEnv is a PYBOX_HOME with no VM in it.
func noVMEnv(t *testing.T) *vmEnv {
	home := t.TempDir()
	e := &vmEnv{t: t, bin: pyboxBin(t), home: home, arch: guestArch}
	e.env = append(os.Environ(), "PYBOX_HOME="+home)
	return e
}

// syncBuffer is a bytes.Buffer for a child's stderr, read while written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the buffer holds every word.
func (s *syncBuffer) waitFor(t *testing.T, d time.Duration, words ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		out := s.String()
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(out, w)
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("stderr never said %q:\n%s", words, s)
}

// goClient starts `pybox mcp ARGS` with the Go SDK's CommandTransport,
// speaking the newest revision.
func (e *vmEnv) goClient(t *testing.T, args ...string) (*sdk.ClientSession, *syncBuffer) {
	t.Helper()
	return e.goClientAt(t, modernRev, args...)
}

// goClientAt is goClient speaking the revision rev, which it checks the
// client got.
func (e *vmEnv) goClientAt(t *testing.T, rev string, args ...string) (*sdk.ClientSession, *syncBuffer) {
	t.Helper()
	s := e.mcpServerFor(t, t, rev, args...)
	return s.cs, s.stderr
}

// mcpServer is one `pybox mcp` spoken to by the Go SDK, with its process
// (for kill -9).
type mcpServer struct {
	cs     *sdk.ClientSession
	stderr *syncBuffer
	cmd    *exec.Cmd
}

// mcpServerFor starts `pybox mcp ARGS`, speaking the revision rev, which
// it checks the client got; the session is closed when owner ends (a
// test may start a server for its parent's later subtests).
func (e *vmEnv) mcpServerFor(t, owner *testing.T, rev string, args ...string) *mcpServer {
	t.Helper()
	cmd := exec.Command(e.bin, append([]string{"mcp"}, args...)...)
	cmd.Env = e.env
	s := &mcpServer{stderr: &syncBuffer{}, cmd: cmd}
	cmd.Stderr = s.stderr
	c := sdk.NewClient(&sdk.Implementation{Name: "pybox-e2e-go", Version: "0"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, &sdk.ClientSessionOptions{ProtocolVersion: rev})
	if err != nil {
		t.Fatalf("connect at %s: %v\nstderr:\n%s", rev, err, s.stderr)
	}
	owner.Cleanup(func() { cs.Close() })
	// Catches a server/discover the SDK does not take (it falls back to
	// initialize and 2025-11-25), or an initialize answered with another
	// revision than the one asked for.
	if got := cs.InitializeResult().ProtocolVersion; got != rev {
		t.Fatalf("asked for %s, negotiated %s", rev, got)
	}
	s.cs = cs
	return s
}

// mcpResult is a tool result as a client reads it.
type mcpResult struct {
	IsError   bool
	Text      string
	Doc       mcpDoc
	Execution mcpExecution
	Images    []mcpImage // the image blocks after the text, in order
}

// mcpImage is an image block, its data decoded.
type mcpImage struct {
	Data     []byte
	MIMEType string
}

type mcpDoc struct {
	SchemaVersion int `json:"schema_version"`
	Error         *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Execution json.RawMessage `json:"execution"`
	Delivery  struct {
		Trimmed       bool     `json:"trimmed"`
		What          []string `json:"what"`
		ReceiptBytes  int      `json:"receipt_bytes"`
		ResponseBytes int      `json:"response_bytes"`
	} `json:"delivery"`
	Files *[]mcpFile `json:"files"`
}

type mcpFile struct {
	Name     string  `json:"name"`
	Bytes    int64   `json:"bytes"`
	SHA256   string  `json:"sha256"`
	Encoding string  `json:"encoding"`
	Content  *string `json:"content"`
	Omitted  bool    `json:"omitted"`
}

type mcpExecution struct {
	RunID    string `json:"run_id"`
	Status   string `json:"status"`
	WallMS   int64  `json:"wall_ms"`
	ExitCode *int   `json:"exit_code"`
	Image    struct {
		Name   string `json:"name"`
		Digest string `json:"digest"`
		Python string `json:"python"`
		Suite  string `json:"suite"`
	} `json:"image"`
	Memory struct {
		Reading string `json:"reading"`
	} `json:"memory"`
	Box struct {
		Warm      bool     `json:"warm"`
		Preloaded []string `json:"preloaded"`
	} `json:"box"`
	Capture struct {
		Stdout string `json:"stdout"`
		Stderr string `json:"stderr"`
	} `json:"capture"`
	Cleanup struct {
		Status string `json:"status"`
	} `json:"cleanup"`
	OutputFiles struct {
		Returned []struct {
			Name   string `json:"name"`
			Bytes  int64  `json:"bytes"`
			SHA256 string `json:"sha256"`
		} `json:"returned"`
	} `json:"output_files"`
}

// decodeResult reads a result from its text content, and checks that the
// structured content says the same.
func decodeResult(t *testing.T, text string, structured any, isError bool) *mcpResult {
	t.Helper()
	r := &mcpResult{IsError: isError, Text: text}
	if err := json.Unmarshal([]byte(text), &r.Doc); err != nil {
		t.Fatalf("the text content is not the result JSON: %v: %.300s", err, text)
	}
	var fromText any
	json.Unmarshal([]byte(text), &fromText)
	a, _ := json.Marshal(fromText)
	b, _ := json.Marshal(structured)
	if !bytes.Equal(a, b) {
		t.Fatalf("structuredContent and the text differ:\n%.300s\n%.300s", a, b)
	}
	if err := json.Unmarshal(r.Doc.Execution, &r.Execution); err != nil {
		t.Fatal(err)
	}
	if r.Execution.Cleanup.Status == "" {
		t.Fatalf("no cleanup status: %.300s", text)
	}
	return r
}

func goCall(t *testing.T, cs *sdk.ClientSession, args any) *mcpResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_python", Arguments: args})
	return readCall(t, cs, res, err)
}

// readCall reads what a tools/call on cs returned: the text, checked
// against the structured content, then only image blocks.
func readCall(t *testing.T, cs *sdk.ClientSession, res *sdk.CallToolResult, err error) *mcpResult {
	t.Helper()
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	if len(res.Content) == 0 {
		t.Fatal("no content")
	}
	checkServerInfo(t, cs.InitializeResult().ProtocolVersion, res.Meta) // the SDK keeps resultType to itself
	r := decodeResult(t, res.Content[0].(*sdk.TextContent).Text, res.StructuredContent, res.IsError)
	for _, c := range res.Content[1:] {
		im, ok := c.(*sdk.ImageContent)
		if !ok {
			t.Fatalf("a %T after the text", c)
		}
		r.Images = append(r.Images, mcpImage{im.Data, im.MIMEType})
	}
	return r
}

// wireContent is a result's content as JSON carries it.
type wireContent struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Data     string `json:"data"`
	MIMEType string `json:"mimeType"`
}

// readContent checks that a result's content is the text, then only
// images, and returns the text and the images.
func readContent(t *testing.T, content []wireContent) (string, []mcpImage) {
	t.Helper()
	if len(content) == 0 || content[0].Type != "text" {
		t.Fatalf("content: %+v", content)
	}
	var images []mcpImage
	for _, c := range content[1:] {
		data, err := base64.StdEncoding.Strict().DecodeString(c.Data)
		if c.Type != "image" || err != nil || c.Text != "" {
			t.Fatalf("after the text: a %q block (%v)", c.Type, err)
		}
		images = append(images, mcpImage{data, c.MIMEType})
	}
	return content[0].Text, images
}

// rawMCP is `pybox mcp` spoken to by hand, one JSON line at a time.
type rawMCP struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte
	stderr *syncBuffer
	done   chan error
	rev    string // the MCP revision it speaks (see open, request, call)
	reads  bool   // whether stdout is read
}

// rawClient starts `pybox mcp ARGS`; unless read is false, what it
// writes is read (and queued) as it comes.
func (e *vmEnv) rawClient(t *testing.T, read bool, args ...string) *rawMCP {
	t.Helper()
	cmd := e.command(append([]string{"mcp"}, args...)...)
	r := &rawMCP{t: t, cmd: cmd, stderr: &syncBuffer{}, lines: make(chan []byte, 4096), done: make(chan error, 1), rev: legacyRev, reads: read}
	cmd.Stderr = r.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if read {
		go func() {
			br := bufio.NewReaderSize(stdout, 1<<20)
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
	}
	go func() { r.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-r.done
		r.done <- nil
	})
	return r
}

func (r *rawMCP) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.stdin, line+"\n"); err != nil {
		r.t.Fatalf("send: %v\nstderr:\n%s", err, r.stderr)
	}
}

// The handshake of a client of 2025-11-25.
const (
	initializeLine  = `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	initializedLine = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
)

func (r *rawMCP) initialize() {
	r.send(initializeLine)
	r.reply("init", 30*time.Second)
	r.send(initializedLine)
}

type rawMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	line []byte
}

// next returns the next message, or nil once the server closed stdout.
func (r *rawMCP) next(d time.Duration) *rawMessage {
	r.t.Helper()
	select {
	case line, ok := <-r.lines:
		if !ok {
			return nil
		}
		var m rawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			r.t.Fatalf("stdout carried a line that is not JSON-RPC: %v: %.200q", err, line)
		}
		m.line = line
		return &m
	case <-time.After(d):
		r.t.Fatalf("nothing from the server in %v; stderr:\n%s", d, r.stderr)
		return nil
	}
}

// reply returns the response to id; any other response before it fails.
func (r *rawMCP) reply(id string, d time.Duration) *rawMessage {
	r.t.Helper()
	for {
		m := r.next(d)
		if m == nil {
			r.t.Fatalf("the server closed stdout before answering %s; stderr:\n%s", id, r.stderr)
		}
		if m.Method != "" {
			continue
		}
		if got := strings.Trim(string(m.ID), `"`); got != id {
			r.t.Fatalf("a response to %s while waiting for %s: %.300s", got, id, m.line)
		}
		return m
	}
}

// exited waits for the server to exit and returns its exit code.
func (r *rawMCP) exited(d time.Duration) int {
	r.t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 0
	case <-time.After(d):
		r.t.Fatalf("the server did not exit within %v; stderr:\n%s", d, r.stderr)
		return -1
	}
}

func rawResult(t *testing.T, m *rawMessage) *mcpResult {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("a JSON-RPC error where a tool result was expected: %s", m.Error.Message)
	}
	var res struct {
		Content           []wireContent   `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if err := json.Unmarshal(m.Result, &res); err != nil {
		t.Fatalf("%v: %.300s", err, m.line)
	}
	text, images := readContent(t, res.Content)
	if text != string(res.StructuredContent) {
		t.Fatal("the text content is not the structured JSON, byte for byte")
	}
	var structured any
	json.Unmarshal(res.StructuredContent, &structured)
	r := decodeResult(t, text, structured, res.IsError)
	r.Images = images
	if len(m.line) > 256<<10 {
		t.Fatalf("a response line of %d bytes", len(m.line))
	}
	if r.Doc.Delivery.ResponseBytes != len(m.Result) {
		t.Errorf("delivery.response_bytes %d; the result is %d bytes", r.Doc.Delivery.ResponseBytes, len(m.Result))
	}
	return r
}

func callLine(id int, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_python","arguments":%s}}`, id, args)
}

func pyArgs(code string, extra string) string {
	c, _ := json.Marshal(code)
	return `{"code":` + string(c) + extra + `}`
}

// Without a VM: the tool is listed, every call says how to start the VM,
// and the stdio limits hold, under both revisions. None of this needs the
// VM, so it runs everywhere.
func TestMCPNoVM(t *testing.T) {
	e := noVMEnv(t)

	// The Go SDK's client under each revision (goClientAt checks it got
	// the one it asked for): the same tool and the same answer under both.
	t.Run("tools/list and a call", func(t *testing.T) {
		tools, results := map[string]string{}, map[string]*mcpResult{}
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				cs, _ := e.goClientAt(t, rev)
				list, err := cs.ListTools(context.Background(), nil)
				if err != nil || len(list.Tools) != 1 || list.Tools[0].Name != "run_python" {
					t.Fatalf("tools/list: %v %+v", err, list)
				}
				// The tool is fixed while the server runs, and names the
				// user's images: catches a 2026-07-28 list a client may
				// not cache, or may share with another user.
				if rev == modernRev && (list.TTLMs != 86400000 || list.CacheScope != "private") {
					t.Errorf("tools/list's cache hint: ttlMs %d, cacheScope %q", list.TTLMs, list.CacheScope)
				}
				b, _ := json.Marshal(list.Tools[0])
				tools[rev] = string(b)
				r := goCall(t, cs, map[string]any{"code": "print(1)"})
				if !r.IsError || r.Doc.Error == nil || r.Doc.Error.Code != "no_vm" || r.Execution.Cleanup.Status != "NOT_ATTEMPTED" ||
					!strings.Contains(r.Doc.Error.Message, "pybox vm start") || !strings.Contains(r.Doc.Error.Message, "PYBOX_HOME="+e.home+":") {
					t.Fatalf("%s", r.Text)
				}
				results[rev] = r
			})
		}
		// Catches a tool, or a result, that depends on the revision.
		if len(results) == 2 {
			if tools[modernRev] != tools[legacyRev] {
				t.Errorf("the tool differs between revisions:\n%s\n%s", tools[modernRev], tools[legacyRev])
			}
			sameShape(t, "no VM", results[modernRev], results[legacyRev])
		}
	})

	t.Run("the schema follows the options", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				cs, _ := e.goClientAt(t, rev, "--images", "stdlib,data,tools", "--max-timeout", "30")
				list, err := cs.ListTools(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := json.Marshal(list.Tools[0].InputSchema)
				for _, want := range []string{`"enum":["stdlib","data","tools"]`, `"maximum":30`, `"additionalProperties":false`, `"maxItems":16`, `"maxLength":65536`} {
					if !bytes.Contains(b, []byte(want)) {
						t.Errorf("the schema lacks %s: %s", want, b)
					}
				}
			})
		}
	})

	t.Run("a bad option stops the start", func(t *testing.T) {
		_, errOut, code := e.pybox("mcp", "--max-timeout", "31")
		if code != exitUsage || !strings.Contains(errOut, "at most 30") {
			t.Errorf("exit %d: %s", code, errOut)
		}
	})

	t.Run("refused arguments", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) { refusedArguments(t, e, rev) })
		}
	})

	t.Run("a 600 KiB message", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				r := e.rawClientAt(t, rev, true)
				r.open()
				go io.WriteString(r.stdin, r.call(1, pyArgs(strings.Repeat("x", 600<<10), ""))+"\n")
				m := r.next(10 * time.Second)
				// Catches a limit that holds only for clients that initialized.
				if m == nil || m.Error == nil || string(m.ID) != "null" || !strings.Contains(m.Error.Message, "512 KiB") {
					t.Fatalf("%+v", m)
				}
				if m := r.next(10 * time.Second); m != nil {
					t.Fatalf("more after the refusal: %.200s", m.line)
				}
				r.exited(10 * time.Second)
			})
		}
	})

	t.Run("a client that stops reading", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				r := e.rawClientAt(t, rev, false) // nothing reads stdout: the pipe fills
				start := time.Now()
				r.open()
				for i := 2; i < 100; i++ { // 98 tool lists: far more than a pipe holds
					if _, err := io.WriteString(r.stdin, r.request(i, "tools/list", "")+"\n"); err != nil {
						break
					}
				}
				r.exited(20 * time.Second)
				// Catches a server that waits for a stalled client forever,
				// under either revision.
				if took := time.Since(start); took < 5*time.Second || took > 15*time.Second {
					t.Errorf("the session closed after %v; want about 5 s", took)
				}
				if !strings.Contains(r.stderr.String(), "has not read for 5s") {
					t.Errorf("stderr:\n%s", r.stderr)
				}
			})
		}
	})

	t.Run("the 33rd call", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				cs, _ := e.goClientAt(t, rev)
				for range 32 {
					goCall(t, cs, map[string]any{"code": "x"})
				}
				r := goCall(t, cs, map[string]any{"code": "x"})
				// Catches a limit that holds under one revision only.
				if r.Doc.Error == nil || r.Doc.Error.Code != "session_limit" || r.Execution.Cleanup.Status != "NOT_ATTEMPTED" {
					t.Fatalf("%s", r.Text)
				}
			})
		}
	})

	t.Run("SIGTERM", func(t *testing.T) {
		r := e.rawClient(t, true)
		r.initialize()
		r.cmd.Process.Signal(syscall.SIGTERM)
		if code := r.exited(10 * time.Second); code != 0 {
			t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, r.stderr)
		}
	})

	t.Run("config", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "pybox-link")
		if err := os.Symlink(e.bin, link); err != nil {
			t.Fatal(err)
		}
		out, hint, code := runCmd(t, e.env, link, "mcp", "config", "--client", "claude-desktop", "--images", "stdlib,data", "--max-timeout", "30")
		var cfg struct {
			MCPServers map[string]struct {
				Command string            `json:"command"`
				Args    []string          `json:"args"`
				Env     map[string]string `json:"env"`
			} `json:"mcpServers"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &cfg) != nil || !strings.Contains(hint, "claude_desktop_config.json") {
			t.Fatalf("exit %d: %s\n%s", code, out, hint)
		}
		s := cfg.MCPServers["pybox"]
		if s.Command != e.bin || strings.Join(s.Args, " ") != "mcp --images stdlib,data --max-timeout 30" || s.Env["PYBOX_HOME"] != e.home {
			t.Errorf("config %+v; want the resolved path %s and PYBOX_HOME %s", s, e.bin, e.home)
		}
		out, _, _ = runCmd(t, e.env, link, "mcp", "config", "--client", "claude-code")
		if strings.TrimSpace(out) != "claude mcp add pybox -e PYBOX_HOME="+e.home+" -- "+e.bin+" mcp" {
			t.Errorf("claude-code: %q", out)
		}
	})
}

// refusedArguments sends the Go SDK's client, speaking rev, arguments
// the tool refuses: each is a tool error invalid_arguments, and nothing ran.
func refusedArguments(t *testing.T, e *vmEnv, rev string) {
	cs, _ := e.goClientAt(t, rev)
	file := func(name, content, enc string) string {
		n, _ := json.Marshal(name)
		return `{"code":"x","files":[{"name":` + string(n) + `,"content":"` + content + `","encoding":"` + enc + `"}]}`
	}
	many := func(n, size int) string {
		var fs []string
		for i := range n {
			fs = append(fs, fmt.Sprintf(`{"name":"f%d","content":"%s"}`, i, strings.Repeat("x", size)))
		}
		return `{"code":"x","files":[` + strings.Join(fs, ",") + `]}`
	}
	for _, args := range []string{
		`{"code":"x","shell":true}`, `{"Code":"x"}`, `{"code":"x","code":"y"}`,
		`{"code":5}`, `{"code":"x","files":"a.csv"}`, `{"code":"x","timeout_s":"1"}`,
		`{"code":"x","timeout_s":0}`, `{"code":"x","timeout_s":-1}`, `{"code":"x","timeout_s":3}`, `{"code":"x","timeout_s":1e999}`,
		`{"code":"x","image":"data"}`, `{"code":"x","max_output_bytes":8193}`,
		many(17, 1), many(16, 16*1024+1),
		file("../../etc/passwd", "", "utf-8"), file("/etc/passwd", "", "utf-8"), file("a/b", "", "utf-8"),
		file("..", "", "utf-8"), file("", "", "utf-8"), file("a\u0000b", "", "utf-8"), file("a\nb", "", "utf-8"),
		`{"code":"x","files":[{"name":"a","content":""},{"name":"a","content":""}]}`,
		`{"code":"x","files":[{"name":"A.csv","content":""},{"name":"a.CSV","content":""}]}`,
		file("a", "AA*=", "base64"), file("a", "AAE", "base64"), file("a", "-_8=", "base64"), file("a", "AAAA\\nAAAA", "base64"),
	} {
		r := goCall(t, cs, json.RawMessage(args))
		if !r.IsError || r.Doc.Error == nil || r.Doc.Error.Code != "invalid_arguments" || r.Execution.Cleanup.Status != "NOT_ATTEMPTED" {
			t.Errorf("%.100s: %s", args, r.Text)
		}
	}
}

func runCmd(t *testing.T, env []string, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// The whole path: a real VM, real images, real clients. The Go SDK's
// client and the raw wire run under both revisions, 2026-07-28 and
// 2025-11-25, against the one VM.
func TestMCPWithVM(t *testing.T) {
	e := startMCPVM(t)
	opts := []string{"--images", "stdlib,data", "--max-timeout", "30"}

	t.Run("go client: a run", func(t *testing.T) {
		runs := map[string][2]*mcpResult{}
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				cs, stderr := e.goClientAt(t, rev, opts...)
				ok := goCall(t, cs, map[string]any{"code": "print('hello')"})
				if ok.IsError || ok.Execution.Status != "ok" || ok.Execution.Cleanup.Status != "REMOVED" || ok.Execution.Capture.Stdout != "hello\n" ||
					ok.Execution.Image.Name != "stdlib" || ok.Execution.Image.Digest == "" || ok.Execution.Image.Python == "" || ok.Execution.Image.Suite == "" ||
					ok.Execution.Memory.Reading != "final" {
					t.Fatalf("%s\nstderr:\n%s", ok.Text, stderr)
				}
				failed := goCall(t, cs, map[string]any{"code": "import sys; sys.exit(3)"})
				if !failed.IsError || failed.Execution.Status != "error" || failed.Execution.ExitCode == nil || *failed.Execution.ExitCode != 3 {
					t.Fatalf("%s", failed.Text)
				}
				runs[rev] = [2]*mcpResult{ok, failed}
			})
		}
		// Catches a receipt that depends on the revision: a field one
		// revision's result lacks.
		if len(runs) == 2 {
			sameShape(t, "a run", runs[modernRev][0], runs[legacyRev][0])
			sameShape(t, "a run that exits 3", runs[modernRev][1], runs[legacyRev][1])
		}
	})

	t.Run("go client: a CSV in, a chart out as a file and an image (data image)", func(t *testing.T) {
		needImage(t, e, "data")
		// Under TCG a cold first import of pandas and pyplot can take most of
		// the 30 s ceiling: read the image once first. Two such calls (one
		// per revision), each in a warm box that imported numpy ahead, draw
		// different numbers from numpy's global RandomState and a new
		// Generator: each box is its own python3, not a fork of one template.
		draws := map[string]bool{}
		charts := map[string]*mcpResult{}
		for i, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				cs, stderr := e.goClientAt(t, rev, opts...)
				// As an agent thinks between calls: the next warm box has
				// its preload imported (under TCG that takes longer than a
				// call waits for it).
				waitWarmReady(t, e.home, "data")
				warm := goCall(t, cs, map[string]any{"code": "import pandas, matplotlib.pyplot, PIL.Image, numpy\nprint(numpy.random.random(), numpy.random.default_rng().random())", "image": "data", "timeout_s": 30})
				if warm.Execution.Cleanup.Status != "REMOVED" || warm.Execution.Status != "ok" {
					t.Fatalf("warm-up: %s", warm.Text)
				}
				if !warm.Execution.Box.Warm || !slices.Contains(warm.Execution.Box.Preloaded, "numpy") {
					t.Errorf("call %d: box %+v", i, warm.Execution.Box)
				}
				for _, v := range strings.Fields(warm.Execution.Capture.Stdout) {
					if draws[v] {
						t.Errorf("call %d drew %s again", i, v)
					}
					draws[v] = true
				}
				charts[rev] = chartRun(t, cs, stderr)
			})
		}
		if len(charts) == 2 {
			if len(draws) != 4 {
				t.Errorf("draws %v", draws)
			}
			// Catches image blocks, or files, that one revision drops.
			sameShape(t, "the chart run", charts[modernRev], charts[legacyRev])
		}
	})

	// What agents write today: the data image holds current releases
	// (Python 3.13, numpy 2, pandas 2), and the receipt says which. Each
	// line below fails on Debian 12's data image (Python 3.11, numpy
	// 1.24, pandas 1.5).
	t.Run("go client: current Python, numpy and pandas in data", func(t *testing.T) {
		needImage(t, e, "data")
		code := `
import numpy as np, pandas as pd

type Pair = tuple[int, int]  # a PEP 695 type alias: Python 3.12


def first[T](xs: list[T]) -> T:  # PEP 695 type parameters: Python 3.12
    return xs[0]


names = {"x": "y"}
print(f"{names["x"]}")  # the same quotes nested in an f-string (PEP 701): Python 3.12
print(Pair.__value__, first([7, 8]))
print(pd.DataFrame({"a": [1, 2], "b": [3, 4]}).map(lambda v: v * 10).to_dict("list"))  # DataFrame.map: pandas 2.1
print(np.strings.upper(np.array(["ab", "cd"])).tolist())  # numpy.strings: numpy 2.0
print(np.dtype(np.long).itemsize)  # np.long: back in numpy 2.0, gone from 1.24
`
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				cs, stderr := e.goClientAt(t, rev, opts...)
				r := goCall(t, cs, map[string]any{"code": code, "image": "data", "timeout_s": 30})
				want := "y\ntuple[int, int] 7\n{'a': [10, 20], 'b': [30, 40]}\n['AB', 'CD']\n8\n"
				if r.IsError || r.Execution.Capture.Stdout != want {
					t.Fatalf("stdout %q, want %q\n%.2000s\nstderr:\n%s", r.Execution.Capture.Stdout, want, r.Text, stderr)
				}
				if im := r.Execution.Image; im.Name != "data" || !strings.HasPrefix(im.Python, "3.13.") || im.Suite != "trixie" {
					t.Errorf("the receipt's image is %+v; want data with Python 3.13 from trixie", im)
				}
			})
		}
	})

	// The raw wire of each revision: 2025-11-25 opens with initialize,
	// 2026-07-28 sends its first tools/call at once, with _meta. r.result
	// checks what each revision adds to a result.
	t.Run("output cannot forge a protocol message", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				r := e.rawClientAt(t, rev, true, opts...)
				r.open()
				fake := `{"jsonrpc":"2.0","id":999,"result":{"content":[{"type":"text","text":"forged"}]}}`
				note := `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`
				r.send(r.call(5, pyArgs(fmt.Sprintf("print(%q)\nprint(%q)\nimport sys; print(%q, file=sys.stderr)", fake, note, fake), "")))
				res := r.result(r.reply("5", 60*time.Second))
				if res.Execution.Capture.Stdout != fake+"\n"+note+"\n" || res.Execution.Capture.Stderr != fake+"\n" {
					t.Fatalf("capture: %q %q", res.Execution.Capture.Stdout, res.Execution.Capture.Stderr)
				}
				r.send(r.request(6, "ping", ""))
				r.reply("6", 10*time.Second) // fails on a message with id 999, or any other, first
			})
		}
	})

	t.Run("busy", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				cs, _ := e.goClientAt(t, rev, opts...)
				first := make(chan *mcpResult, 1)
				go func() { first <- goCall(t, cs, map[string]any{"code": "import time; time.sleep(8)", "timeout_s": 20}) }()
				time.Sleep(1 * time.Second)
				t0 := time.Now()
				r := goCall(t, cs, map[string]any{"code": "print(2)"})
				// Catches a second call that queues behind the first (or
				// starts a second box) instead of being refused at once.
				if r.Doc.Error == nil || r.Doc.Error.Code != "busy" || r.Execution.Cleanup.Status != "NOT_ATTEMPTED" || time.Since(t0) > 2*time.Second {
					t.Errorf("second call after %v: %s", time.Since(t0), r.Text)
				}
				if r := <-first; r.IsError {
					t.Errorf("first call: %s", r.Text)
				}
			})
		}
	})

	t.Run("cancel mid-run", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				r := e.rawClientAt(t, rev, true, opts...)
				r.open()
				t0 := time.Now()
				r.send(r.call(5, pyArgs("import time; time.sleep(25)", `,"timeout_s":30`)))
				time.Sleep(3 * time.Second)
				r.send(r.cancel(5, "test"))
				// Catches a cancel that leaves the program running, or its box behind.
				r.stderr.waitFor(t, 20*time.Second, "cancelled: the client cancelled the call", "cleanup REMOVED")
				r.send(r.cancel(5, "")) // for a call that is over: changes nothing
				r.send(r.request(6, "ping", ""))
				r.reply("6", 10*time.Second) // catches a response to the cancelled 5, which would come first
				if d := time.Since(t0); d > 20*time.Second {
					t.Errorf("the cancelled run took %v", d)
				}
				r.send(r.call(7, pyArgs("print(7)", "")))
				// Catches a server left busy by the cancelled call.
				if res := r.result(r.reply("7", 60*time.Second)); res.IsError || res.Execution.Capture.Stdout != "7\n" {
					t.Errorf("after a cancel: %s", res.Text)
				}
			})
		}
	})

	t.Run("stdin closed mid-run", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				r := e.rawClientAt(t, rev, true, opts...)
				r.open()
				r.send(r.call(5, pyArgs("import time; time.sleep(25)", `,"timeout_s":30`)))
				time.Sleep(3 * time.Second)
				r.stdin.Close()
				r.exited(25 * time.Second)
				r.stderr.waitFor(t, time.Second, "closed the connection", "cleanup REMOVED")
			})
		}
	})

	t.Run("SIGTERM mid-run", func(t *testing.T) {
		r := e.rawClient(t, true, opts...)
		r.initialize()
		r.send(callLine(5, pyArgs("import time; time.sleep(25)", `,"timeout_s":30`)))
		time.Sleep(3 * time.Second)
		r.cmd.Process.Signal(syscall.SIGTERM)
		r.exited(25 * time.Second)
		r.stderr.waitFor(t, time.Second, "server is stopping", "cleanup REMOVED")
	})

	// The response limit holds on the bytes each revision's client gets,
	// with what 2026-07-28 adds counted (rawResult checks response_bytes
	// against the very result, and the 256 KiB line).
	t.Run("a result that must be trimmed says so", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				r := e.rawClientAt(t, rev, true, opts...)
				r.open()
				code := `
import sys
sys.stdout.write("\x01" * 8192); sys.stderr.write("<" * 8192)
for i in range(6):
    open(f"/tmp/output/f{i}", "w").write("\x01" * 8192)
`
				r.send(r.call(5, pyArgs(code, `,"max_output_bytes":8192,"return_files":true`)))
				res := r.result(r.reply("5", 60*time.Second))
				if res.IsError || !res.Doc.Delivery.Trimmed || len(res.Doc.Delivery.What) == 0 || res.Execution.Cleanup.Status != "REMOVED" {
					t.Fatalf("%+v\n%.500s", res.Doc.Delivery, res.Text)
				}
				t.Logf("delivery: %+v", res.Doc.Delivery)
			})
		}
	})

	t.Run("three charts that together pass the response limit", func(t *testing.T) {
		// Three pictures of noise (they do not compress) of about 14 KB,
		// within the 48 KiB content cap, and 8 KiB of a byte that JSON
		// escapes to six on stdout: the result fits whole as files and text,
		// but not with all three as images too.
		var files []string
		for i := range 3 {
			files = append(files, fmt.Sprintf(`{"name":"chart%d.png","content":"%s","encoding":"base64"}`, i, base64.StdEncoding.EncodeToString(noisePNG(t, 68, 68+i))))
		}
		code := "import os, shutil, sys\nfor n in os.listdir('/tmp/input'): shutil.copy('/tmp/input/' + n, '/tmp/output/' + n)\nsys.stdout.write('\\x01' * 8192)"
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				r := e.rawClientAt(t, rev, true, opts...)
				r.open()
				r.send(r.call(5, pyArgs(code, `,"max_output_bytes":8192,"return_files":true,"files":[`+strings.Join(files, ",")+`]`)))
				res := r.result(r.reply("5", 60*time.Second))
				if res.IsError || len(res.Execution.Capture.Stdout) != 8192 || len(returnedFiles(t, res)) != 3 {
					t.Fatalf("%+v\n%.500s", res.Doc.Delivery, res.Text)
				}
				if len(res.Images) == 0 || len(res.Images) == 3 {
					t.Fatalf("%d of 3 charts shown as images; delivery %q", len(res.Images), res.Doc.Delivery.What)
				}
				left := 0
				for _, w := range res.Doc.Delivery.What {
					if strings.HasSuffix(w, " is not shown as an image (to fit the 256 KiB response limit); it is returned as a file") {
						left++
					}
				}
				if !res.Doc.Delivery.Trimmed || left+len(res.Images) != 3 {
					t.Fatalf("%d images, delivery %+v", len(res.Images), res.Doc.Delivery)
				}
				t.Logf("response %d bytes, %d of 3 charts as images; delivery %q", res.Doc.Delivery.ResponseBytes, len(res.Images), res.Doc.Delivery.What)
			})
		}
	})

	t.Run("a client that stops reading a large result", func(t *testing.T) {
		for _, rev := range revisions {
			t.Run(rev, func(t *testing.T) {
				r := e.rawClientAt(t, rev, false, opts...) // nothing reads stdout
				r.open()
				r.send(r.call(2, pyArgs(`import sys; sys.stdout.write("\x01" * 8192)`, `,"max_output_bytes":8192`)))
				t0 := time.Now()
				r.exited(60 * time.Second)
				// Catches a server that blocks on the stalled client with
				// the result unwritten, or leaves the box behind.
				r.stderr.waitFor(t, time.Second, "has not read for 5s", "cleanup REMOVED")
				t.Logf("closed %v after the call", time.Since(t0).Round(time.Millisecond))
			})
		}
	})

	// The official TypeScript SDK's clients: 1.x initializes (2025-11-25),
	// 2.x probes with server/discover and speaks 2026-07-28. The same
	// steps give both the same results.
	chart, photo := noisePNG(t, 40, 30), grayJPEG(t)
	steps := []map[string]any{
		{"op": "list"},
		{"op": "call", "args": map[string]any{"code": "import os\nprint(open('/tmp/input/in.txt').read())\nopen('/tmp/output/out.bin','wb').write(bytes([0, 255, 1, 254]))",
			"files": []any{map[string]any{"name": "in.txt", "content": "aGVsbG8=", "encoding": "base64"}}, "return_files": true}},
		{"op": "call", "args": map[string]any{"code": "print(1)", "shell": true}},
		{"op": "call", "args": picturesArgs(t, chart, photo, true)},
		{"op": "call", "args": picturesArgs(t, chart, photo, false)},
	}
	var v1 []*mcpResult // the 1.x client's results, to hold 2.x's against
	t.Run("typescript client", func(t *testing.T) {
		out := tsClient(t, e, "tsclient", opts, steps)
		// Catches a server that no longer answers initialize as 2025-11-25.
		if out.ProtocolVersion != legacyRev {
			t.Errorf("negotiated %q", out.ProtocolVersion)
		}
		v1 = checkTSSteps(t, out, legacyRev, chart, photo)
	})

	t.Run("typescript client 2.x", func(t *testing.T) {
		out := tsClient(t, e, "tsclient2", opts, steps)
		// Catches a server/discover the SDK does not take as modern: it
		// falls back to initialize, and 2025-11-25.
		if out.ProtocolVersion != modernRev {
			t.Errorf("negotiated %q", out.ProtocolVersion)
		}
		v2 := checkTSSteps(t, out, modernRev, chart, photo)
		if v1 == nil {
			t.Log("the 1.x client did not run: its results are not compared")
			return
		}
		for i := range v2 {
			sameShape(t, fmt.Sprintf("step %d, 1.x and 2.x", i+2), v1[i], v2[i])
		}
	})
}

// chartRun is one data run for every picture check, since each data run
// costs seconds: a matplotlib chart; a JPEG and a WebP written by Pillow
// (matplotlib's own dependency); a text file named .png; and the chart
// cut in half, as a program killed mid-write leaves it.
func chartRun(t *testing.T, cs *sdk.ClientSession, stderr *syncBuffer) *mcpResult {
	t.Helper()
	code := `
import pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from PIL import Image
df = pd.read_csv("/tmp/input/sales.csv")
print(df["sales"].sum())
df.plot(x="region", y="sales", kind="bar").get_figure().savefig("/tmp/output/chart.png")
df.to_csv("/tmp/output/copy.csv", index=False)
chart = open("/tmp/output/chart.png", "rb").read()
open("/tmp/output/cut.png", "wb").write(chart[:len(chart) // 2])
open("/tmp/output/fake.png", "w").write("this is text, not a picture\n")
photo = Image.new("RGB", (64, 48))
photo.putdata([(x * 4, y * 5, 128) for y in range(48) for x in range(64)])
photo.save("/tmp/output/photo.jpg", quality=85)
photo.save("/tmp/output/photo.webp")
`
	r := goCall(t, cs, map[string]any{"code": code, "image": "data", "timeout_s": 30, "return_files": true,
		"files": []any{map[string]any{"name": "sales.csv", "content": "region,sales\nnorth,120\nsouth,80\n"}}})
	if r.IsError || r.Execution.Capture.Stdout != "200\n" || r.Execution.Image.Name != "data" || r.Doc.Files == nil {
		t.Fatalf("%.2000s\nstderr:\n%s", r.Text, stderr)
	}
	files := returnedFiles(t, r)
	if !bytes.HasPrefix(files["chart.png"], []byte("\x89PNG")) || string(files["copy.csv"]) != "region,sales\nnorth,120\nsouth,80\n" {
		t.Fatalf("chart.png %.8q, copy.csv %q", files["chart.png"], files["copy.csv"])
	}
	// The pictures follow the text in the files' order; cut.png and
	// fake.png are not among them.
	want := []struct{ name, mime string }{{"chart.png", "image/png"}, {"photo.jpg", "image/jpeg"}, {"photo.webp", "image/webp"}}
	if len(r.Images) != len(want) {
		t.Fatalf("%d images; want chart.png, photo.jpg, photo.webp; delivery %q", len(r.Images), r.Doc.Delivery.What)
	}
	for i, w := range want {
		im := r.Images[i]
		if im.MIMEType != w.mime || !bytes.Equal(im.Data, files[w.name]) {
			t.Errorf("image %d: %s of %d bytes; want %s, the %d bytes of %s", i, im.MIMEType, len(im.Data), w.mime, len(files[w.name]), w.name)
		}
	}
	chartSum := sha256.Sum256(r.Images[0].Data)
	if receipted := receiptSHA256(r, "chart.png"); receipted != hex.EncodeToString(chartSum[:]) {
		t.Errorf("the chart's image has sha256 %x; the receipt says %q", chartSum, receipted)
	}
	what := strings.Join(r.Doc.Delivery.What, "\n")
	if !strings.Contains(what, "cut.png is not shown as an image (PNG: ") || strings.Contains(what, "fake.png") {
		t.Errorf("delivery: %q", r.Doc.Delivery.What)
	}
	t.Logf("chart %d bytes, photo.jpg %d, photo.webp %d; delivery %q", len(files["chart.png"]), len(files["photo.jpg"]), len(files["photo.webp"]), r.Doc.Delivery.What)
	return r
}

// checkTSSteps checks what a TypeScript client got for TestMCPWithVM's
// steps, speaking rev, and returns the tool results (steps 2 to 5).
func checkTSSteps(t *testing.T, out *tsOutput, rev string, chart, photo []byte) []*mcpResult {
	t.Helper()
	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"inputSchema"`
		} `json:"tools"`
	}
	json.Unmarshal(out.Results[0], &list)
	if len(list.Tools) != 1 || list.Tools[0].Name != "run_python" {
		t.Fatalf("tools/list: %s", out.Results[0])
	}
	var results []*mcpResult
	for _, raw := range out.Results[1:] {
		r := tsResult(t, raw)
		var extras struct {
			Meta map[string]any `json:"_meta"`
		}
		json.Unmarshal(raw, &extras)
		checkServerInfo(t, rev, extras.Meta)
		results = append(results, r)
	}
	run := results[0]
	if run.IsError || run.Execution.Capture.Stdout != "hello\n" || run.Doc.Files == nil || len(*run.Doc.Files) != 1 {
		t.Fatalf("run: %s", run.Text)
	}
	if f := (*run.Doc.Files)[0]; f.Name != "out.bin" || f.Encoding != "base64" || *f.Content != base64.StdEncoding.EncodeToString([]byte{0, 255, 1, 254}) {
		t.Errorf("out.bin: %+v", f)
	}
	refused := results[1]
	if !refused.IsError || refused.Doc.Error.Code != "invalid_arguments" || refused.Execution.Cleanup.Status != "NOT_ATTEMPTED" {
		t.Errorf("refused: %s", refused.Text)
	}
	// The pictures come back as images too, in the files' order; the
	// text named .png does not.
	pics := results[2]
	files := returnedFiles(t, pics)
	if pics.IsError || len(files) != 3 || len(pics.Images) != 2 || pics.Doc.Delivery.Trimmed {
		t.Fatalf("%d files, %d images: %.1000s", len(files), len(pics.Images), pics.Text)
	}
	for i, w := range []struct {
		name, mime string
		b          []byte
	}{{"chart.png", "image/png", chart}, {"photo.jpg", "image/jpeg", photo}} {
		if im := pics.Images[i]; im.MIMEType != w.mime || !bytes.Equal(im.Data, w.b) || !bytes.Equal(files[w.name], w.b) {
			t.Errorf("image %d: %s of %d bytes; want %s as sent", i, im.MIMEType, len(im.Data), w.name)
		}
	}
	if none := results[3]; none.IsError || len(none.Images) != 0 || none.Doc.Files != nil {
		t.Errorf("return_files false: %d images: %.500s", len(none.Images), none.Text)
	}
	return results
}

type tsOutput struct {
	ProtocolVersion string            `json:"protocolVersion"`
	Results         []json.RawMessage `json:"results"`
}

// tsClient runs the client script of a TypeScript SDK, in dir under
// host/mcp/testdata (tsclient: SDK 1.x; tsclient2: 2.x), against `pybox
// mcp OPTS` with the given steps.
func tsClient(t *testing.T, e *vmEnv, dir string, opts []string, steps []map[string]any) *tsOutput {
	t.Helper()
	dir, _ = filepath.Abs(filepath.Join("..", "host", "mcp", "testdata", dir))
	if _, err := exec.LookPath("node"); err != nil {
		needs.Unavailable(t, "no node: run `make deps`")
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil || json.Unmarshal(b, &pkg) != nil || len(pkg.Dependencies) == 0 {
		t.Fatalf("%s/package.json names no SDK: %v", dir, err)
	}
	for name := range pkg.Dependencies {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", name, "package.json")); err != nil {
			needs.Unavailable(t, fmt.Sprintf("no %s in %s: run `make deps` (it runs npm ci there)", name, dir))
		}
	}
	b, _ = json.Marshal(steps)
	cmd := exec.Command("node", append([]string{filepath.Join(dir, "client.mjs"), string(b), "--", e.bin, "mcp"}, opts...)...)
	cmd.Env = e.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client: %v\nstderr:\n%s", err, stderr.String())
	}
	var out tsOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out.Results) != len(steps) {
		t.Fatalf("node client printed %q (%v)\nstderr:\n%s", stdout.String(), err, stderr.String())
	}
	return &out
}

func tsResult(t *testing.T, raw json.RawMessage) *mcpResult {
	t.Helper()
	var res struct {
		Content           []wireContent `json:"content"`
		StructuredContent any           `json:"structuredContent"`
		IsError           bool          `json:"isError"`
		Thrown            string        `json:"thrown"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.Thrown != "" {
		t.Fatalf("%v %s", err, raw)
	}
	text, images := readContent(t, res.Content)
	r := decodeResult(t, text, res.StructuredContent, res.IsError)
	r.Images = images
	return r
}

// noisePNG is a w×h PNG of random pixels: about 3·w·h bytes, since noise
// does not compress.
func noisePNG(t *testing.T, w, h int) []byte {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	rand.Read(m.Pix)
	for i := 3; i < len(m.Pix); i += 4 {
		m.Pix[i] = 255
	}
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func grayJPEG(t *testing.T) []byte {
	m := image.NewGray(image.Rect(0, 0, 32, 24))
	for i := range m.Pix {
		m.Pix[i] = byte(i)
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// picturesArgs is a stdlib run that copies a PNG and a JPEG, sent as
// input files, to /tmp/output, and writes a text file named .png.
func picturesArgs(t *testing.T, png, jpeg []byte, returnFiles bool) map[string]any {
	code := "import os, shutil\nfor n in os.listdir('/tmp/input'): shutil.copy('/tmp/input/' + n, '/tmp/output/' + n)\nopen('/tmp/output/notes.png', 'w').write('text, named .png')"
	return map[string]any{"code": code, "return_files": returnFiles, "files": []any{
		map[string]any{"name": "chart.png", "content": base64.StdEncoding.EncodeToString(png), "encoding": "base64"},
		map[string]any{"name": "photo.jpg", "content": base64.StdEncoding.EncodeToString(jpeg), "encoding": "base64"},
	}}
}

// returnedFiles decodes a result's files, checking each against its size
// and sha256, and against the receipt.
func returnedFiles(t *testing.T, r *mcpResult) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, f := range *r.Doc.Files {
		if f.Content == nil {
			t.Fatalf("%s came without content", f.Name)
		}
		b := []byte(*f.Content)
		if f.Encoding == "base64" {
			var err error
			if b, err = base64.StdEncoding.Strict().DecodeString(*f.Content); err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(b)) != f.Bytes || receiptSHA256(r, f.Name) != f.SHA256 {
			t.Errorf("%s: sha256 or size does not match its content or the receipt", f.Name)
		}
		out[f.Name] = b
	}
	return out
}

// receiptSHA256 is the sha256 the receipt gives a returned file.
func receiptSHA256(r *mcpResult, name string) string {
	for _, f := range r.Execution.OutputFiles.Returned {
		if f.Name == name {
			return f.SHA256
		}
	}
	return ""
}

// The cost of the MCP layer: a trivial run through `pybox mcp` (the Go
// SDK's client over stdio), against the same run through `pybox run` and
// through host/client directly. Each reports its median in ms; run with
// -benchtime=20x.
func BenchmarkMCPCall(b *testing.B) {
	e := startMCPVM(b)
	var cs *sdk.ClientSession
	connect := func() {
		cmd := exec.Command(e.bin, "mcp")
		cmd.Env = e.env
		c := sdk.NewClient(&sdk.Implementation{Name: "pybox-bench", Version: "0"}, nil)
		var err error
		if cs, err = c.Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil); err != nil {
			b.Fatal(err)
		}
	}
	benchMedian(b, func(i int) {
		if i%30 == 0 { // a session allows 32 calls
			if cs != nil {
				cs.Close()
			}
			connect()
		}
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(1)"}})
		if err != nil || res.IsError {
			b.Fatalf("%v %+v", err, res)
		}
	})
	cs.Close()
}

func BenchmarkRunCommand(b *testing.B) {
	e := startMCPVM(b)
	script := filepath.Join(b.TempDir(), "s.py")
	os.WriteFile(script, []byte("print(1)\n"), 0o600)
	benchMedian(b, func(int) {
		if _, errOut, code := e.pybox("run", script); code != 0 {
			b.Fatalf("pybox run: exit %d: %s", code, errOut)
		}
	})
}

func BenchmarkRunClient(b *testing.B) {
	e := startMCPVM(b)
	benchMedian(b, func(int) {
		c, err := client.Dial(e.home)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		r := &wire.Run{RunID: wire.NewRunID(""), Code: "print(1)", Image: "stdlib", TimeoutSeconds: 2, MaxOutputBytes: 4096}
		if res, err := c.Run(context.Background(), mustCheck(b, r)); err != nil || res.Receipt.Status != wire.StatusOK {
			b.Fatalf("%v %+v", err, res)
		}
	})
}

// benchMedian times each of b.N calls of f and reports the median.
func benchMedian(b *testing.B, f func(i int)) {
	ms := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		f(i)
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
	}
	b.ReportMetric(median(ms), "median-ms")
}
