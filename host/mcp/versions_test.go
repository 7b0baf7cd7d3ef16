package mcp

// The server under both revisions it speaks: MCP 2026-07-28 (no
// handshake; every request names its version in _meta) and 2025-11-25
// (initialize). The tool, its result and the connection's limits must
// mean the same under both.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"pybox/shared/wire"
)

// modernMeta is the _meta every request of a 2026-07-28 client carries.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},` +
	`"io.modelcontextprotocol/clientCapabilities":{}}`

// modernCall is a tools/call of a 2026-07-28 client.
func modernCall(id int, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_python","arguments":%s,%s}}`, id, args, modernMeta)
}

// versions are the revisions each test runs under, as the Go SDK's
// client asks for them.
var versions = []string{"2026-07-28", "2025-11-25"}

// server/discover says what the server speaks, newest first, that it
// offers tools, and how long that holds.
func TestDiscover(t *testing.T) {
	s := startSession(t, DefaultOptions(), newFakeVM(), testLimits())
	r := s.raw(false)
	r.send(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + modernMeta + `}}`)
	var d struct {
		SupportedVersions []string        `json:"supportedVersions"`
		Capabilities      map[string]any  `json:"capabilities"`
		TTLMs             int             `json:"ttlMs"`
		CacheScope        string          `json:"cacheScope"`
		Meta              json.RawMessage `json:"_meta"`
	}
	m := r.reply("1")
	if m.Error != nil || json.Unmarshal(m.Result, &d) != nil {
		t.Fatalf("server/discover: %s", m.line)
	}
	if strings.Join(d.SupportedVersions, ",") != strings.Join(protocolVersions, ",") || d.Capabilities["tools"] == nil ||
		d.TTLMs != listTTL || d.CacheScope != "private" || !strings.Contains(string(d.Meta), `"name":"pybox"`) {
		t.Errorf("server/discover: %s", m.line)
	}
	// A version the server does not speak is refused, saying which it does.
	r.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	if m := r.reply("2"); m.Error == nil || !strings.Contains(string(m.line), "2026-07-28") {
		t.Errorf("an unknown version: %s", m.line)
	}
}

// The Go SDK's client at each revision: the version it gets, the tool
// list and its cache hint, a run's result, the 33rd call, a cancel.
func TestBothVersions(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			noLeaks(t)
			vm := newFakeVM()
			cs := startSession(t, DefaultOptions(), vm, testLimits()).client(v)
			if got := cs.InitializeResult().ProtocolVersion; got != v {
				t.Fatalf("negotiated %s, asked for %s", got, v)
			}
			list, err := cs.ListTools(context.Background(), nil)
			if err != nil || len(list.Tools) != 1 || list.Tools[0].Name != ToolName {
				t.Fatalf("tools/list: %+v %v", list, err)
			}
			// The tool list is fixed while the server runs, and the
			// user's own.
			if v >= newestVersion && (list.TTLMs != listTTL || list.CacheScope != "private") {
				t.Errorf("tools/list's cache hint: ttlMs %d, cacheScope %q", list.TTLMs, list.CacheScope)
			}
			d := callTool(t, cs, map[string]any{"code": "print(1)"})
			if d.isError || d.exec.Capture.Stdout != "print(1)" || d.exec.Cleanup.Status != wire.CleanupRemoved {
				t.Fatalf("a run: %+v %s", d.doc.Error, d.doc.Execution)
			}
			refused := callTool(t, cs, map[string]any{"code": "print(1)", "shell": true})
			if !refused.isError || refused.doc.Error.Code != codeInvalidArguments || refused.exec.Cleanup.Status != wire.CleanupNotAttempted {
				t.Errorf("a refused call: %+v", refused.doc.Error)
			}
			// Cancelled by the client: the run stops, its box goes, and
			// the server is not left busy.
			<-vm.started // the run above (the refused call never started one)
			cancelByContext(t, cs, vm)
			// 3 calls so far; the connection's limit is 32.
			for i := 3; i < 32; i++ {
				d := callTool(t, cs, map[string]any{"code": "x"})
				<-vm.started
				if d.isError {
					t.Fatalf("call %d: %+v", i+1, d.doc.Error)
				}
			}
			last := callTool(t, cs, map[string]any{"code": "x"})
			if !last.isError || last.doc.Error.Code != codeSessionLimit || !strings.Contains(last.doc.Error.Message, "32") {
				t.Errorf("the 33rd call: %+v", last.doc.Error)
			}
		})
	}
}

// The raw wire of a 2026-07-28 client, which never initializes: a call
// with its _meta, a result of the same shape (plus the server's identity
// and resultType, counted in response_bytes), a cancel that gets no
// response, the 33rd call refused as a tool error, and a result at the
// protocol's limits.
func TestModernRawWire(t *testing.T) {
	noLeaks(t)
	vm := newFakeVM()
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(false)
	r.send(modernCall(1, `{"code":"print(1)"}`))
	m := r.reply("1")
	d := toolResult(t, m) // checks response_bytes against the very line
	if d.isError || d.exec.Capture.Stdout != "print(1)" || !strings.Contains(string(m.Result), `"resultType":"complete"`) ||
		!strings.Contains(string(m.Result), `"io.modelcontextprotocol/serverInfo":{"name":"pybox"`) {
		t.Fatalf("a call: %.400s", m.Result)
	}
	<-vm.started
	r.send(modernCall(2, `{"code":"block"}`))
	run := <-vm.started
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}`)
	s.log.waitLog(t, run, "cancelled", "cleanup REMOVED")
	r.send(modernCall(3, `{"code":"print(3)"}`))
	if d := toolResult(t, r.reply("3")); d.isError { // and no response to 2 first
		t.Fatalf("after a cancel: %+v", d.doc.Error)
	}
	<-vm.started
	for i := 4; i <= 32; i++ {
		r.send(modernCall(i, `{"code":"x"}`))
		r.reply(fmt.Sprint(i))
		<-vm.started
	}
	r.send(modernCall(33, `{"code":"x"}`))
	m = r.reply("33")
	if d := toolResult(t, m); !d.isError || d.doc.Error.Code != codeSessionLimit || !strings.Contains(string(m.Result), `"resultType":"complete"`) {
		t.Errorf("the 33rd call: %.400s", m.line)
	}
	if n := len(vm.Runs()); n != 32 {
		t.Errorf("%d runs for 33 calls", n)
	}
}

// The limits on what goes out hold on the bytes the 2026-07-28 client
// gets, with what the revision adds: the worst output there is (streams
// and files of a byte JSON escapes to six), under the longest request id.
func TestModernResultAtTheLimits(t *testing.T) {
	vm := newFakeVM()
	ctl := strings.Repeat("\x01", wire.MaxOutputBytes)
	vm.result = func(r *wire.Run) (*wire.Result, error) {
		rec := receipt(r.RunID, wire.StatusOK, wire.CleanupRemoved)
		rec.Capture.Stdout, rec.Capture.Stderr = ctl, ctl
		var files []wire.OutputFile
		for i := range 6 {
			files = append(files, wire.OutputFile{Name: fmt.Sprint("f", i), Content: []byte(ctl)})
		}
		return &wire.Result{Receipt: rec, Files: files}, nil
	}
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(false)
	id := strings.Repeat("i", maxIDBytes-2)
	r.send(`{"jsonrpc":"2.0","id":"` + id + `","method":"tools/call","params":{"name":"run_python","arguments":{"code":"x","return_files":true},` + modernMeta + `}}`)
	m := r.reply(id)
	d := toolResult(t, m) // fails past 256 KiB, or with response_bytes not the result's size
	if !d.doc.Delivery.Trimmed || len(m.line) < MaxResponseBytes*3/4 || !strings.Contains(string(m.Result), `"resultType":"complete"`) {
		t.Errorf("a %d-byte response, trimmed %v: not the worst case at the limit", len(m.line), d.doc.Delivery.Trimmed)
	}
	t.Logf("response line %d bytes (limit %d)", len(m.line), MaxResponseBytes)
}

// A 2026-07-28 client that stops reading: the connection closes after
// the stall timeout, and the running program is cancelled.
func TestModernStalledClient(t *testing.T) {
	noLeaks(t)
	lim := testLimits()
	lim.StallTimeout = 300 * time.Millisecond
	vm := newFakeVM()
	s := startSession(t, DefaultOptions(), vm, lim)
	r := s.raw(false)
	r.send(modernCall(1, `{"code":"block"}`))
	run := <-vm.started
	r.pause()
	r.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + modernMeta + `}}`)
	s.ended()
	if got := vm.Cancelled(); len(got) != 1 || got[0] != run {
		t.Fatalf("cancelled %v", got)
	}
	s.log.waitLog(t, run, "cleanup REMOVED")
}
