package mcp

// What the agent CLIs send `pybox mcp`, as recorded from Claude Code
// 2.1.332, Codex CLI 0.171.0 and Gemini CLI 0.61.0, replayed without
// them. The CLIs themselves run in the end-to-end tests.

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// claudeMeta is the _meta Claude Code 2.1.332 puts in every request
// under MCP 2026-07-28.
const claudeMeta = `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"claude-code","title":"Claude Code",` +
	`"version":"2.1.332","description":"Anthropic's agentic coding tool","websiteUrl":"https://claude.com/claude-code"},` +
	`"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true},"elicitation":{"form":{},"url":{}}}`

// Each CLI's messages: Claude Code asks server/discover and, offered
// 2026-07-28, speaks it (no initialize; its version, client and
// capabilities in every request's _meta); Codex and Gemini CLI
// initialize with 2025-06-18; all put fields of their own in _meta.
func TestClientHandshakes(t *testing.T) {
	for _, c := range []struct {
		name     string
		discover string // server/discover, for a client of 2026-07-28
		init     string // initialize, for a client of an earlier version
		want     string // the version negotiated
		list     string
		call     string
	}{
		{
			name:     "Claude Code",
			discover: `{"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover","params":{"_meta":{` + claudeMeta + `}}}`,
			want:     "2026-07-28",
			list:     `{"method":"tools/list","jsonrpc":"2.0","id":1,"params":{"_meta":{` + claudeMeta + `}}}`,
			call: `{"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(1)"},"_meta":{` + claudeMeta +
				`,"claudecode/toolUseId":"toolu_1","progressToken":2}},"jsonrpc":"2.0","id":2}`,
		},
		{
			name: "Codex CLI",
			init: `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"codex/auth-change":{}},` +
				`"elicitation":{"form":{},"url":{}}},"clientInfo":{"name":"codex-mcp-client","title":"Codex","version":"0.171.0"}}}`,
			want: "2025-06-18",
			list: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":0}}}`,
			call: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"callId":"call_1","x-codex-turn-metadata":{"session_id":"s","turn_id":"t",` +
				`"sandbox":"seccomp","turn_started_at_unix_ms":1796291345636}},"name":"run_python","arguments":{"code":"print(1)"}}}`,
		},
		{
			name: "Gemini CLI",
			init: `{"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true}},` +
				`"clientInfo":{"name":"gemini-cli-mcp-client","version":"0.61.0"}},"jsonrpc":"2.0","id":0}`,
			want: "2025-06-18",
			list: `{"method":"tools/list","params":{},"jsonrpc":"2.0","id":1}`,
			call: `{"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(1)"},"_meta":{"progressToken":"70d6d5aa-9d35-4ae6-80dc-eeefee2ef6ce"}},"jsonrpc":"2.0","id":2}`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startSession(t, DefaultOptions(), newFakeVM(), testLimits())
			r := s.raw(false)
			if c.discover != "" {
				r.send(c.discover)
				var d struct {
					SupportedVersions []string `json:"supportedVersions"`
					TTLMs             int      `json:"ttlMs"`
				}
				if m := r.reply("server-discover-probe-1"); m.Error != nil || json.Unmarshal(m.Result, &d) != nil || len(d.SupportedVersions) == 0 ||
					d.SupportedVersions[0] != c.want || d.TTLMs != listTTL {
					t.Errorf("server/discover: %s", m.line)
				}
			} else {
				r.send(c.init)
				var init struct {
					ProtocolVersion string `json:"protocolVersion"`
				}
				json.Unmarshal(r.reply("0").Result, &init)
				if init.ProtocolVersion != c.want {
					t.Errorf("negotiated %q, want %q", init.ProtocolVersion, c.want)
				}
				r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			}
			r.send(c.list)
			if m := r.reply("1"); m.Error != nil || !strings.Contains(string(m.Result), `"name":"run_python"`) {
				t.Errorf("tools/list: %s", m.line)
			}
			r.send(c.call)
			m := r.reply("2")
			if d := toolResult(t, m); d.isError || d.exec.Capture.Stdout != "print(1)" {
				t.Errorf("tools/call: %+v %s", d.doc.Error, d.doc.Execution)
			}
			// The result is the same under every version but for the
			// field 2026-07-28 adds to every result.
			if modern := c.want >= newestVersion; strings.Contains(string(m.Result), `"resultType":"complete"`) != modern {
				t.Errorf("a result of %s, with resultType %v: %.300s", c.want, !modern, m.Result)
			}
		})
	}
}

// A ping while a call runs is answered while it runs (the run waits for
// release, which comes only after the answer).
func TestPingDuringRun(t *testing.T) {
	vm := newFakeVM()
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(true)
	r.call("5", `{"code":"wait"}`)
	<-vm.started
	r.send(`{"jsonrpc":"2.0","id":6,"method":"ping"}`)
	if m := r.reply("6"); m.Error != nil || string(m.Result) != "{}" {
		t.Errorf("ping: %s", m.line)
	}
	close(vm.release)
	if d := toolResult(t, r.reply("5")); d.isError {
		t.Errorf("the call: %+v", d.doc.Error)
	}
}

// Every CLI, when its own timeout for a call runs out, cancels the call
// and hands the model an error, which then calls again at once (Claude
// Code: "SdkError: Request timed out"; Gemini CLI: "McpError: MCP error
// -32001: Request timed out"; Codex: "MCP request cancelled by caller").
// The next call waits for the cancelled box to be removed, instead of
// being refused as busy. (It comes a model's turn after the cancel; the
// SDK applies a cancel asynchronously, so the test too waits until the
// cancel has reached the run.)
func TestCallAfterClientTimeout(t *testing.T) {
	noLeaks(t)
	vm := newFakeVM()
	vm.cleanup = 300 * time.Millisecond
	s := startSession(t, DefaultOptions(), vm, testLimits())
	r := s.raw(true)
	r.call("2", `{"code":"block","timeout_s":2}`)
	first := <-vm.started
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"McpError: MCP error -32001: Request timed out"}}`)
	<-vm.stopping
	r.call("3", `{"code":"print(3)"}`)
	if d := toolResult(t, r.reply("3")); d.isError { // and no response to 2 first
		t.Fatalf("the call after the cancelled one: %+v", d.doc.Error)
	}
	<-vm.started // call 3's run
	if got := vm.Cancelled(); len(got) != 1 || got[0] != first {
		t.Errorf("cancelled runs %v, want %s", got, first)
	}
	s.log.waitLog(t, first, "cancelled", "cleanup REMOVED")
	// A call while one runs that was not cancelled is still busy at once.
	r.call("4", `{"code":"wait"}`)
	<-vm.started
	r.call("5", `{"code":"print(5)"}`)
	if d := toolResult(t, r.reply("5")); d.doc.Error == nil || d.doc.Error.Code != "busy" {
		t.Errorf("a call beside a running one: %+v", d.doc.Error)
	}
	close(vm.release)
	r.reply("4")
}
