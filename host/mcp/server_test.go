package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/outdir"
	"pybox/shared/wire"
)

func testLimits() Limits { return DefaultLimits() }

func callTool(t *testing.T, cs *sdk.ClientSession, args any) *decoded {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: ToolName, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	return fromClient(t, res)
}

func TestToolsListShowsTheCeilings(t *testing.T) {
	for _, opts := range []Options{
		DefaultOptions(),
		{Images: []string{"stdlib", "data", "tools"}, MaxTimeout: 30},
		{Images: []string{"data"}, MaxTimeout: 1.5},
	} {
		t.Run(fmt.Sprint(opts), func(t *testing.T) {
			cs := startSession(t, opts, newFakeVM(), testLimits()).client("")
			list, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Tools) != 1 || list.Tools[0].Name != ToolName {
				t.Fatalf("tools: %+v", list.Tools)
			}
			var s struct {
				Type       string                     `json:"type"`
				Required   []string                   `json:"required"`
				Additional *bool                      `json:"additionalProperties"`
				Props      map[string]json.RawMessage `json:"properties"`
			}
			b, _ := json.Marshal(list.Tools[0].InputSchema)
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			if s.Type != "object" || !reflect.DeepEqual(s.Required, []string{"code"}) || s.Additional == nil || *s.Additional {
				t.Fatalf("schema: %s", b)
			}
			var names []string
			for n := range s.Props {
				names = append(names, n)
			}
			if len(names) != 6 {
				t.Fatalf("properties %v", names)
			}
			prop := func(name string) map[string]any {
				var m map[string]any
				json.Unmarshal(s.Props[name], &m)
				return m
			}
			want := map[string]map[string]any{
				"code":             {"type": "string", "maxLength": 65536.0},
				"image":            {"type": "string", "enum": toAny(opts.Images), "default": opts.defaultImage()},
				"timeout_s":        {"type": "number", "exclusiveMinimum": 0.0, "maximum": opts.MaxTimeout, "default": min(2, opts.MaxTimeout)},
				"max_output_bytes": {"type": "integer", "minimum": 1.0, "maximum": 8192.0, "default": 4096.0},
				"files":            {"type": "array", "maxItems": 16.0},
				"return_files":     {"type": "boolean"},
			}
			for name, fields := range want {
				got := prop(name)
				for k, v := range fields {
					if !reflect.DeepEqual(got[k], v) {
						t.Errorf("%s.%s = %v, want %v", name, k, got[k], v)
					}
				}
			}
			items := prop("files")["items"].(map[string]any)
			if items["additionalProperties"] != false || !reflect.DeepEqual(items["required"], []any{"name", "content"}) {
				t.Errorf("files.items: %v", items)
			}
			enc := items["properties"].(map[string]any)["encoding"].(map[string]any)
			if !reflect.DeepEqual(enc["enum"], []any{"utf-8", "base64"}) || enc["default"] != "utf-8" {
				t.Errorf("encoding: %v", enc)
			}
		})
	}
}

func toAny(ss []string) []any {
	var out []any
	for _, s := range ss {
		out = append(out, s)
	}
	return out
}

func TestStartUpRefusesBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Images: []string{"stdlib"}, MaxTimeout: 31},
		{Images: []string{"stdlib"}, MaxTimeout: 0},
		{Images: []string{"stdlib"}, MaxTimeout: -1},
		{Images: nil, MaxTimeout: 2},
		{Images: []string{"Std"}, MaxTimeout: 2},
		{Images: []string{"a", "a"}, MaxTimeout: 2},
	} {
		if _, err := NewServer(o, newFakeVM().dial, nil); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	for _, s := range []string{"31", "0", "-2", "NaN", "Inf", "x", ""} {
		if _, err := ParseMaxTimeout(s); err == nil {
			t.Errorf("--max-timeout %q accepted", s)
		}
	}
	if v, err := ParseMaxTimeout("30"); err != nil || v != 30 {
		t.Errorf("--max-timeout 30: %v %v", v, err)
	}
}

func TestProtocolVersion(t *testing.T) {
	for asked, want := range map[string]string{"2025-11-25": "2025-11-25", "2025-06-18": "2025-06-18", "2026-07-28": "2025-11-25", "1999-01-01": "2025-11-25"} {
		s := startSession(t, DefaultOptions(), newFakeVM(), testLimits())
		r := s.raw(false)
		r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + asked + `","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
		var res struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		json.Unmarshal(r.reply("1").Result, &res)
		if res.ProtocolVersion != want {
			t.Errorf("asked %s, got %s; want %s", asked, res.ProtocolVersion, want)
		}
	}
}

func TestRunOK(t *testing.T) {
	vm := newFakeVM()
	cs := startSession(t, Options{Images: []string{"stdlib", "data"}, MaxTimeout: 30}, vm, testLimits()).client("")
	d := callTool(t, cs, map[string]any{
		"code": "print(1)", "image": "data", "timeout_s": 12.5, "max_output_bytes": 100,
		"files": []any{map[string]any{"name": "a.csv", "content": "x,y\n"}, map[string]any{"name": "b", "content": "AAE=", "encoding": "base64"}},
	})
	if d.isError || d.exec.Status != wire.StatusOK || d.exec.Cleanup.Status != wire.CleanupRemoved || d.exec.Capture.Stdout != "print(1)" {
		t.Fatalf("%s", d.doc.Execution)
	}
	runs := vm.Runs()
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	r := runs[0]
	if r.Image != "data" || r.TimeoutSeconds != 12.5 || r.MaxOutputBytes != 100 || len(r.Files) != 2 || string(r.Files[1].Content) != "\x00\x01" || r.RunID != d.exec.RunID {
		t.Fatalf("the VM was asked for %+v", r)
	}
}

func TestRefusedArgumentsRunNothing(t *testing.T) {
	vm := newFakeVM()
	cs := startSession(t, testOptions(), vm, testLimits()).client("")
	for _, args := range []string{
		`{"code":"x","shell":true}`, `{"code":1}`, `{"code":"x","files":"a"}`, `{"code":"x","timeout_s":"1"}`,
		`{"code":"x","timeout_s":0}`, `{"code":"x","timeout_s":-1}`, `{"code":"x","timeout_s":11}`,
		`{"code":"x","image":"tools"}`, `{"code":"x","code":"y"}`, `{"Code":"x"}`,
		`{"code":"x","files":[{"name":"../../etc/passwd","content":""}]}`,
		`{"code":"x","files":[{"name":"a","content":"a-_b","encoding":"base64"}]}`,
		filesArgs(17, 1),
	} {
		d := callTool(t, cs, json.RawMessage(args))
		if !d.isError || d.doc.Error == nil || d.doc.Error.Code != codeInvalidArguments || d.exec.Cleanup.Status != wire.CleanupNotAttempted {
			t.Errorf("%.80s: error %+v, execution %s", args, d.doc.Error, d.doc.Execution)
		}
		if !strings.Contains(d.doc.Error.Message, "Nothing ran") {
			t.Errorf("%.80s: message %q", args, d.doc.Error.Message)
		}
	}
	if n := len(vm.Runs()); n != 0 {
		t.Fatalf("%d runs reached the VM", n)
	}
}

func TestNoVM(t *testing.T) {
	vm := newFakeVM()
	vm.down = true
	cs := startSession(t, DefaultOptions(), vm, testLimits()).client("")
	if list, err := cs.ListTools(context.Background(), nil); err != nil || len(list.Tools) != 1 {
		t.Fatalf("tools/list without a VM: %v", err)
	}
	d := callTool(t, cs, map[string]any{"code": "print(1)"})
	if !d.isError || d.doc.Error.Code != wire.ErrNoVM || d.exec.Cleanup.Status != wire.CleanupNotAttempted || !strings.Contains(d.doc.Error.Message, "pybox vm start") {
		t.Fatalf("%+v %s", d.doc.Error, d.doc.Execution)
	}
}

// A VM that is up but will not do (the benchmark build of the agent)
// refuses with its own code, says what to do, and runs nothing.
func TestVMRefusesAtDial(t *testing.T) {
	vm := newFakeVM()
	vm.refuse = &wire.Error{Code: wire.ErrUnhealthy, Message: "the VM runs the benchmark build of the guest agent: restart the VM with `pybox vm stop` and `pybox vm start`"}
	cs := startSession(t, DefaultOptions(), vm, testLimits()).client("")
	d := callTool(t, cs, map[string]any{"code": "print(1)"})
	if !d.isError || d.doc.Error.Code != wire.ErrUnhealthy || d.exec.Cleanup.Status != wire.CleanupNotAttempted ||
		!strings.Contains(d.doc.Error.Message, "benchmark build") || !strings.Contains(d.doc.Error.Message, "Nothing ran") {
		t.Fatalf("%+v %s", d.doc.Error, d.doc.Execution)
	}
	if n := len(vm.Runs()); n != 0 {
		t.Fatalf("%d runs reached the VM", n)
	}
}

// The SDK runs calls concurrently: a second call while one runs is busy at
// once, and the server is not left busy afterwards.
func TestBusy(t *testing.T) {
	vm := newFakeVM()
	cs := startSession(t, DefaultOptions(), vm, testLimits()).client("")
	first := make(chan *decoded, 1)
	go func() { first <- callTool(t, cs, map[string]any{"code": "wait"}) }()
	<-vm.started
	start := time.Now()
	d := callTool(t, cs, map[string]any{"code": "print(2)"})
	if !d.isError || d.doc.Error.Code != wire.ErrBusy || d.exec.Cleanup.Status != wire.CleanupNotAttempted {
		t.Fatalf("second call: %+v %s", d.doc.Error, d.doc.Execution)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("busy took %v: it must not wait", took)
	}
	// A call that breaks a rule is refused for it, busy VM or not: what
	// to fix, not when to come back.
	for _, args := range []map[string]any{{"code": "x", "max_output_bytes": 0}, {"code": strings.Repeat("x", 65537)}} {
		if d := callTool(t, cs, args); !d.isError || d.doc.Error.Code != codeInvalidArguments {
			t.Errorf("a bad call beside a running one: %+v", d.doc.Error)
		}
	}
	close(vm.release)
	if d := <-first; d.isError {
		t.Fatalf("first call: %s", d.doc.Execution)
	}
	if d := callTool(t, cs, map[string]any{"code": "print(3)"}); d.isError {
		t.Fatalf("third call: %+v", d.doc.Error)
	}
	if n := len(vm.Runs()); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}

func TestCallLimit(t *testing.T) {
	vm := newFakeVM()
	cs := startSession(t, DefaultOptions(), vm, testLimits()).client("")
	for i := range 32 {
		if d := callTool(t, cs, map[string]any{"code": "x"}); d.isError {
			t.Fatalf("call %d: %+v", i+1, d.doc.Error)
		}
	}
	d := callTool(t, cs, map[string]any{"code": "x"})
	if !d.isError || d.doc.Error.Code != codeSessionLimit || d.exec.Cleanup.Status != wire.CleanupNotAttempted || !strings.Contains(d.doc.Error.Message, "32") {
		t.Fatalf("33rd call: %+v %s", d.doc.Error, d.doc.Execution)
	}
	if n := len(vm.Runs()); n != 32 {
		t.Fatalf("%d runs", n)
	}
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatalf("the session after the limit: %v", err)
	}
}

func TestMessageLimit(t *testing.T) {
	noLeaks(t)
	s := startSession(t, DefaultOptions(), newFakeVM(), testLimits())
	r := s.raw(true) // two messages
	for i := 3; i <= 256; i++ {
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i))
		r.reply(fmt.Sprint(i))
	}
	r.send(`{"jsonrpc":"2.0","id":257,"method":"ping"}`)
	m := r.reply("257")
	if m.Error == nil || !strings.Contains(m.Error.Message, "256 messages") {
		t.Fatalf("257th message: %.300s", m.line)
	}
	r.closed()
	s.ended()
}

func TestOversizedMessage(t *testing.T) {
	noLeaks(t)
	vm := newFakeVM()
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(true)
	code := strings.Repeat("x", 600<<10)
	go io.WriteString(s.in, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"`+code+`"}}}`+"\n") // the server stops reading part way
	m := r.next()
	if m == nil || m.Error == nil || string(m.ID) != "null" || !strings.Contains(m.Error.Message, "512 KiB") {
		t.Fatalf("600 KiB message: %v", m)
	}
	r.closed()
	if err := s.ended(); err == nil {
		t.Error("Serve returned no error for a session ended by an oversized message")
	}
	if len(vm.Runs()) != 0 {
		t.Fatal("the oversized call ran")
	}
	// Exactly at the limit is a message like any other.
	s = startSession(t, DefaultOptions(), vm, testLimits())
	r = s.raw(true)
	line := `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"` + "%s" + `"}}}`
	pad := (512 << 10) - len(line) + 2
	r.send(fmt.Sprintf(line, strings.Repeat(" ", pad)))
	if d := toolResult(t, r.reply("8")); d.doc.Error == nil || d.doc.Error.Code != codeInvalidArguments {
		t.Fatalf("a 512 KiB message: %+v", d.doc.Error) // 512 KiB of code is over the 64 KiB code limit, but it was read
	}
}

func TestBatchAndBadMessages(t *testing.T) {
	s := startSession(t, DefaultOptions(), newFakeVM(), testLimits())
	r := s.raw(true)
	r.send(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`)
	if m := r.next(); m.Error == nil || !strings.Contains(m.Error.Message, "batches") {
		t.Fatalf("batch: %.200s", m.line)
	}
	r.send(`{not json`)
	if m := r.next(); m.Error == nil || m.Error.Code != codeParseError {
		t.Fatalf("bad JSON: %.200s", m.line)
	}
	r.send(`{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 300) + `","method":"ping"}`)
	if m := r.next(); m.Error == nil || string(m.ID) != "null" {
		t.Fatalf("long id: %.200s", m.line)
	}
	r.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	r.reply("2")
}

// A program that prints a complete JSON-RPC response with id 999 and a
// notification: they stay inside capture.stdout.
func TestFakeResponseStaysData(t *testing.T) {
	vm := newFakeVM()
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(true)
	fake := "{\"jsonrpc\":\"2.0\",\"id\":999,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"pwned\"}]}}\n" +
		"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"error\",\"data\":\"x\"}}\n"
	code, _ := json.Marshal(fake)
	r.call("5", `{"code":`+string(code)+`}`)
	d := toolResult(t, r.reply("5"))
	if d.exec.Capture.Stdout != fake {
		t.Fatalf("stdout came back as %q", d.exec.Capture.Stdout)
	}
	r.send(`{"jsonrpc":"2.0","id":6,"method":"ping"}`)
	r.reply("6") // fails on any other message first, id 999 included
}

func TestFilesOut(t *testing.T) {
	vm := newFakeVM()
	png := []byte("\x89PNG\r\n\x1a\n\x00\x01\x02")
	vm.result = func(r *wire.Run) (*wire.Result, error) {
		rec := receipt(r.RunID, wire.StatusOK, wire.CleanupRemoved)
		return &wire.Result{Receipt: rec, Files: []wire.OutputFile{{Name: "out.csv", Content: []byte("a\n")}, {Name: "chart.png", Content: png}}}, nil
	}
	cs := startSession(t, DefaultOptions(), vm, testLimits()).client("")
	d := callTool(t, cs, map[string]any{"code": "x", "return_files": true})
	files := *d.doc.Files
	if len(files) != 2 || files[0].Encoding != "utf-8" || *files[0].Content != "a\n" || files[1].Encoding != "base64" || files[1].SHA256 != sum(png) {
		t.Fatalf("files: %+v", files)
	}
	if d = callTool(t, cs, map[string]any{"code": "x"}); d.doc.Files != nil {
		t.Fatal("files without return_files")
	}
}

// Cancelling: the running program is cancelled, the call gets no
// response, the cleanup is reported on the log, the server is not busy.
func TestCancel(t *testing.T) {
	noLeaks(t)
	vm := newFakeVM()
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(true)
	r.call("5", `{"code":"block"}`)
	run := <-vm.started
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"test"}}`)
	s.log.waitLog(t, run, "cancelled", "cleanup REMOVED")
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)   // twice
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":404}}`) // unknown
	r.send(`{"jsonrpc":"2.0","id":6,"method":"ping"}`)
	r.reply("6") // no response to 5 came first
	if got := vm.Cancelled(); len(got) != 1 || got[0] != run {
		t.Fatalf("cancelled runs %v", got)
	}
	// Not left busy; a cancel after the end changes nothing.
	r.call("7", `{"code":"print(7)"}`)
	if d := toolResult(t, r.reply("7")); d.isError {
		t.Fatalf("after a cancel: %+v", d.doc.Error)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	r.send(`{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	r.reply("8")
	// The Go SDK's client cancels by its context.
	vm = newFakeVM()
	cs := startSession(t, DefaultOptions(), vm, testLimits()).client("")
	cancelByContext(t, cs, vm)
	if d := callTool(t, cs, map[string]any{"code": "x"}); d.isError {
		t.Fatalf("after the Go client's cancel: %+v", d.doc.Error)
	}
}

// A cancel right behind its call, before the run can start (or just as
// it starts): no response either way, and the server is not left busy.
func TestCancelBeforeStart(t *testing.T) {
	noLeaks(t)
	vm := newFakeVM()
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(true)
	for i := range 10 {
		for s.srv.busy() { // the previous call is still winding down
			time.Sleep(time.Millisecond)
		}
		io.WriteString(s.in, callLine(100+i, `{"code":"block"}`)+"\n"+
			fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, 100+i)+"\n")
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i))
		r.reply(fmt.Sprint(i))              // no response to 100+i first
		s.log.waitCount(t, "withheld", i+1) // the handler ran and logged the run, or never started
	}
	r.call("7", `{"code":"print(7)"}`)
	if d := toolResult(t, r.reply("7")); d.isError {
		t.Fatalf("after the cancels: %+v", d.doc.Error)
	}
	t.Logf("%d of 10 reached the VM", len(vm.Runs())-1)
}

func callLine(id int, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_python","arguments":%s}}`, id, args)
}

func TestStdinClosedMidRun(t *testing.T) {
	noLeaks(t)
	vm := newFakeVM()
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(true)
	r.call("5", `{"code":"block"}`)
	run := <-vm.started
	s.in.Close()
	s.ended()
	if got := vm.Cancelled(); len(got) != 1 || got[0] != run {
		t.Fatalf("cancelled %v", got)
	}
	s.log.waitLog(t, run, "closed the connection", "cleanup REMOVED")
}

func TestStopMidRun(t *testing.T) {
	noLeaks(t)
	vm := newFakeVM()
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(true)
	r.call("5", `{"code":"block"}`)
	run := <-vm.started
	s.stop() // what SIGTERM and SIGINT do
	s.ended()
	s.log.waitLog(t, run, "server is stopping", "cleanup REMOVED")
}

// A client that stops reading: after the stall timeout the session ends,
// and a program still running is cancelled.
func TestStalledClient(t *testing.T) {
	lim := testLimits()
	lim.StallTimeout = 300 * time.Millisecond
	t.Run("large result pending", func(t *testing.T) {
		noLeaks(t)
		vm := newFakeVM()
		vm.result = func(r *wire.Run) (*wire.Result, error) {
			rec := receipt(r.RunID, wire.StatusOK, wire.CleanupRemoved)
			rec.Capture.Stdout = strings.Repeat("\x01", 8192)
			return &wire.Result{Receipt: rec}, nil
		}
		s := startSession(t, DefaultOptions(), vm, lim)
		r := s.raw(false)
		r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
		r.reply("1")
		r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		r.pause()
		r.call("2", `{"code":"x"}`)
		start := time.Now()
		s.ended()
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("the session took %v to end", took)
		}
		s.log.waitLog(t, "has not read")
	})
	t.Run("program running", func(t *testing.T) {
		noLeaks(t)
		vm := newFakeVM()
		s := startSession(t, DefaultOptions(), vm, lim)
		r := s.raw(true)
		r.call("2", `{"code":"block"}`)
		run := <-vm.started
		r.pause()
		r.send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
		s.ended()
		if got := vm.Cancelled(); len(got) != 1 || got[0] != run {
			t.Fatalf("cancelled %v", got)
		}
		s.log.waitLog(t, run, "cleanup REMOVED")
	})
}

func TestGuestErrors(t *testing.T) {
	vm := newFakeVM()
	var mu sync.Mutex
	var answer func(r *wire.Run) (*wire.Result, error)
	vm.result = func(r *wire.Run) (*wire.Result, error) { mu.Lock(); defer mu.Unlock(); return answer(r) }
	cs := startSession(t, DefaultOptions(), vm, testLimits()).client("")
	for _, tc := range []struct {
		name    string
		answer  func(r *wire.Run) (*wire.Result, error)
		code    string
		cleanup string
	}{
		{"busy in the VM", func(*wire.Run) (*wire.Result, error) {
			return nil, &wire.Error{Code: wire.ErrBusy, Message: "another run is in progress"}
		}, wire.ErrBusy, wire.CleanupNotAttempted},
		{"lost mid-run with cleanup", func(*wire.Run) (*wire.Result, error) {
			return nil, &wire.Error{Code: wire.ErrNoVM, Message: "the VM stopped", Cleanup: &wire.Cleanup{Status: wire.CleanupUnknown}}
		}, wire.ErrNoVM, wire.CleanupUnknown},
		{"transport error", func(*wire.Run) (*wire.Result, error) {
			return nil, fmt.Errorf("read unix: connection reset by peer")
		}, codeVMLost, wire.CleanupUnknown},
	} {
		mu.Lock()
		answer = tc.answer
		mu.Unlock()
		d := callTool(t, cs, map[string]any{"code": "x"})
		if !d.isError || d.doc.Error == nil || d.doc.Error.Code != tc.code || d.exec.Cleanup.Status != tc.cleanup {
			t.Errorf("%s: %+v %s", tc.name, d.doc.Error, d.doc.Execution)
		}
	}
}

// A bug (here, a dialer that panics) costs the call, not the session.
func TestPanicIsAnErrorResult(t *testing.T) {
	log := &logBuf{}
	srv, err := NewServer(DefaultOptions(), func(context.Context) (VM, error) { panic("boom") }, log.logf)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := sdk.NewInMemoryTransports()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go srv.Serve(ctx, st)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for range 2 { // the second call shows the server is not left busy
		d := callTool(t, cs, map[string]any{"code": "x"})
		if d.doc.Error == nil || d.doc.Error.Code != wire.ErrInternal || d.exec.Cleanup.Status != wire.CleanupUnknown {
			t.Fatalf("%+v %s", d.doc.Error, d.doc.Execution)
		}
	}
	log.waitLog(t, "boom")
}

// The tool's description tells the agent that pictures come back as
// images, with the bound on their size.
func TestToolDescriptionMentionsImages(t *testing.T) {
	cs := startSession(t, DefaultOptions(), newFakeVM(), testLimits()).client("")
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := list.Tools[0].Description
	for _, want := range []string{"/tmp/output/", "return_files", "come back as images", "PNG, JPEG, GIF or WebP", "at most 2000 px on a side"} {
		if !strings.Contains(d, want) {
			t.Errorf("the description does not say %q: %s", want, d)
		}
	}
}

// Data folders: the schema offers exactly the server's, a call names them,
// the VM is asked for them with the server's byte bound, and a folder the
// server does not allow (or any, when it allows none) is refused before
// anything runs.
func TestDataFolders(t *testing.T) {
	vm := newFakeVM()
	o := Options{Images: []string{"stdlib"}, MaxTimeout: 5, Data: []string{"sales", "logs"}, MaxDataBytes: 1 << 20}
	cs := startSession(t, o, vm, testLimits()).client("")
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(list.Tools[0].InputSchema)
	if !strings.Contains(string(b), `"data":{"description"`) || !strings.Contains(string(b), `"enum":["sales","logs"]`) ||
		!strings.Contains(list.Tools[0].Description, "/data/NAME") {
		t.Errorf("schema %s\ndescription %s", b, list.Tools[0].Description)
	}
	d := callTool(t, cs, map[string]any{"code": "x", "data": []string{"logs"}})
	if d.isError {
		t.Fatalf("%s", d.doc.Execution)
	}
	r := vm.Runs()[0]
	if len(r.Data) != 1 || r.Data[0].Name != "logs" || r.MaxDataBytes != 1<<20 {
		t.Errorf("the VM was asked for data %+v, bound %d", r.Data, r.MaxDataBytes)
	}
	for _, bad := range []map[string]any{
		{"code": "x", "data": []string{"secrets"}},
		{"code": "x", "data": []string{"logs", "logs"}},
		{"code": "x", "data": "logs"},
	} {
		if d := callTool(t, cs, bad); !d.isError || d.doc.Error == nil || d.doc.Error.Code != codeInvalidArguments {
			t.Errorf("%v: %s", bad, d.doc.Execution)
		}
	}
	plain := startSession(t, DefaultOptions(), vm, testLimits()).client("")
	if d := callTool(t, plain, map[string]any{"code": "x", "data": []string{"logs"}}); !d.isError || !strings.Contains(d.doc.Error.Message, `unknown argument "data"`) {
		t.Errorf("a server with no data folders took data: %+v", d.doc.Error)
	}
	if n := len(vm.Runs()); n != 1 {
		t.Errorf("%d runs; the refused calls must run nothing", n)
	}
}

// The output folder: what the VM delivers is saved in DIR/<run_id>/ and
// the result lists it; the model's content is what it would be without.
func TestOutputDir(t *testing.T) {
	vm := newFakeVM()
	big := strings.Repeat("r", 300<<10) // far over what a result may carry
	vm.deliver = func(r *wire.Run, output func(*wire.OutputChunk)) (*wire.Result, error) {
		if r.Deliver == nil || r.Deliver.MaxBytes != 1<<20 {
			return nil, fmt.Errorf("deliver %+v", r.Deliver)
		}
		for off := 0; off < len(big); off += wire.MaxOutputChunk {
			output(&wire.OutputChunk{RunID: r.RunID, Name: "result.txt", Offset: int64(off), Data: []byte(big[off:min(off+wire.MaxOutputChunk, len(big))])})
		}
		rec := receipt(r.RunID, wire.StatusOK, wire.CleanupRemoved)
		rec.Output.Delivered = []wire.FileDigest{{Name: "result.txt", Bytes: int64(len(big)), SHA256: sum([]byte(big))}}
		return &wire.Result{Receipt: rec}, nil
	}
	dir := t.TempDir()
	o := Options{Images: []string{"stdlib"}, MaxTimeout: 5, OutputDir: dir, MaxOutputDirBytes: 1 << 20}
	cs := startSession(t, o, vm, testLimits()).client("")
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OutputDir *savedOut `json:"output_dir"`
		Files     any       `json:"files"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &doc)
	runID := vm.Runs()[0].RunID
	if doc.OutputDir == nil || doc.OutputDir.Dir != filepath.Join(dir, runID) || len(doc.OutputDir.Files) != 1 ||
		doc.OutputDir.Files[0].SHA256 != sum([]byte(big)) || doc.Files != nil || len(b) > 64<<10 {
		t.Fatalf("structured content (%d bytes): %.600s", len(b), b)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, runID, "result.txt")); string(got) != big {
		t.Errorf("the saved file has %d bytes, want %d", len(got), len(big))
	}
}

// The output folder's total bound, by the disk's measure (du's bytes and
// 4 KiB an entry): a run may write what is left of it, and once earlier
// runs filled it a call is refused before anything runs, saying what the
// folder holds as du counts it and how to make room; nothing of the
// earlier runs is deleted, and room made by hand is found at the next
// call.
func TestOutputDirTotal(t *testing.T) {
	vm := newFakeVM()
	var asked []int64
	vm.deliver = func(r *wire.Run, output func(*wire.OutputChunk)) (*wire.Result, error) {
		asked = append(asked, r.Deliver.MaxBytes)
		return &wire.Result{Receipt: receipt(r.RunID, wire.StatusOK, wire.CleanupRemoved)}, nil
	}
	dir := t.TempDir()
	earlier := filepath.Join(dir, "earlier-run")
	os.Mkdir(earlier, 0o755)
	os.WriteFile(filepath.Join(earlier, "big.bin"), make([]byte, 3000), 0o644)
	const total = 1 << 20
	o := Options{Images: []string{"stdlib"}, MaxTimeout: 5, OutputDir: dir, MaxOutputDirBytes: 1 << 20, MaxOutputDirTotal: total}
	cs := startSession(t, o, vm, testLimits()).client("")
	if d := callTool(t, cs, map[string]any{"code": "x"}); d.isError || len(asked) != 1 {
		t.Fatalf("isError %v %+v", d.isError, d.doc.Error)
	}
	held, _ := outdir.Measure(dir)
	if e, _ := outdir.Measure(earlier); asked[0] > total-e.Cost() || asked[0] < total-held.Cost() {
		t.Errorf("the run may write %d: the folder holds %+v (cost %d), the earlier run %+v (cost %d), the bound is %d", asked[0], held, held.Cost(), e, e.Cost(), total)
	}
	// Another earlier run, put there by hand, fills the folder.
	another := filepath.Join(dir, "another-run")
	os.Mkdir(another, 0o755)
	os.WriteFile(filepath.Join(another, "fill.bin"), make([]byte, total), 0o644)
	d := callTool(t, cs, map[string]any{"code": "x"})
	held, _ = outdir.Measure(dir)
	want := fmt.Sprintf("it holds %d bytes (as du counts them) in %d entries, which count as %d bytes (4096 for each entry), and --max-output-dir-total is %d; move or delete",
		held.Bytes, held.Entries, held.Cost(), total)
	if !d.isError || d.doc.Error == nil || d.doc.Error.Code != codeOutputFull || !strings.Contains(d.doc.Error.Message, want) ||
		d.exec.Cleanup.Status != wire.CleanupNotAttempted || len(asked) != 1 {
		t.Fatalf("a full output folder: isError %v, %+v (want %q), cleanup %+v, runs %d", d.isError, d.doc.Error, want, d.exec.Cleanup, len(asked))
	}
	if _, err := os.Stat(filepath.Join(earlier, "big.bin")); err != nil {
		t.Errorf("an earlier run's file is gone: %v", err)
	}
	os.RemoveAll(another)
	if d := callTool(t, cs, map[string]any{"code": "x"}); d.isError || len(asked) != 2 {
		t.Errorf("after the user made room: isError %v %+v", d.isError, d.doc.Error)
	}
}
