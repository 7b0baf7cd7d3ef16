package e2e

// The two MCP revisions `pybox mcp` is spoken to in, end to end: 2026-07-28,
// which has no handshake (every request names its revision, client and
// capabilities in _meta; a client may ask server/discover), and
// 2025-11-25, whose clients initialize. The tool, its result and the
// connection's limits must mean the same under both; only what the
// revision adds to a result differs (see rawMCP.result).

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// The revisions, as the Go SDK's client asks for them.
const (
	modernRev = "2026-07-28"
	legacyRev = "2025-11-25"
)

// revisions are what the Go-client and raw subtests run under, newest
// first.
var revisions = []string{modernRev, legacyRev}

// modernMeta is the _meta every request of a 2026-07-28 client carries.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}`

// rawClientAt is rawClient speaking rev: see open, request and call.
func (e *vmEnv) rawClientAt(t *testing.T, rev string, read bool, args ...string) *rawMCP {
	t.Helper()
	r := e.rawClient(t, read, args...)
	r.rev = rev
	return r
}

// open begins a session as r's revision does: under 2025-11-25 with
// initialize (its answer awaited when r reads), under 2026-07-28 with
// nothing at all.
func (r *rawMCP) open() {
	r.t.Helper()
	if r.rev == modernRev {
		return
	}
	if r.reads {
		r.initialize()
		return
	}
	r.send(initializeLine)
	r.send(initializedLine)
}

// request is a request line of r's revision; params is a JSON object or
// "".
func (r *rawMCP) request(id int, method, params string) string {
	if params = r.params(params); params == "" {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q}`, id, method)
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
}

// cancel is the notification that cancels the call id, with a reason
// unless it is "".
func (r *rawMCP) cancel(id int, reason string) string {
	p := fmt.Sprintf(`{"requestId":%d}`, id)
	if reason != "" {
		p = fmt.Sprintf(`{"requestId":%d,"reason":%q}`, id, reason)
	}
	return `{"jsonrpc":"2.0","method":"notifications/cancelled","params":` + r.params(p) + `}`
}

// params is a request's or notification's params (a JSON object or "")
// under r's revision: under 2026-07-28 they carry the _meta every
// message of a client does (the TypeScript SDK adds it to notifications
// too).
func (r *rawMCP) params(p string) string {
	switch {
	case r.rev != modernRev:
		return p
	case p == "" || p == "{}":
		return "{" + modernMeta + "}"
	default:
		return strings.TrimSuffix(p, "}") + "," + modernMeta + "}"
	}
}

// call is a run_python call of r's revision (callLine under 2025-11-25).
func (r *rawMCP) call(id int, args string) string {
	return r.request(id, "tools/call", `{"name":"run_python","arguments":`+args+`}`)
}

// result is rawResult, and checks what the revision adds to it: under
// 2026-07-28 resultType "complete" and the server's identity, under
// 2025-11-25 neither.
func (r *rawMCP) result(m *rawMessage) *mcpResult {
	r.t.Helper()
	res := rawResult(r.t, m)
	var extras struct {
		ResultType string         `json:"resultType"`
		Meta       map[string]any `json:"_meta"`
	}
	json.Unmarshal(m.Result, &extras)
	// Catches a 2026-07-28 result a client cannot tell is complete (the
	// refusal past the call limit is written by hand, outside the SDK),
	// and the field leaking into a 2025-11-25 session.
	if (extras.ResultType == "complete") != (r.rev == modernRev) {
		r.t.Errorf("under %s: resultType %q", r.rev, extras.ResultType)
	}
	checkServerInfo(r.t, r.rev, extras.Meta)
	return res
}

// checkServerInfo checks the server's identity in a result's _meta: there
// under 2026-07-28, where no initialize result names the server, and
// absent under 2025-11-25. Catches a result that leaves it out (a hand-
// written one, like the refusal past the call limit) and the new
// revision's fields leaking into an older session.
func checkServerInfo(t *testing.T, rev string, meta map[string]any) {
	t.Helper()
	info, _ := meta["io.modelcontextprotocol/serverInfo"].(map[string]any)
	if (rev == modernRev) != (info != nil && info["name"] == "pybox") {
		t.Errorf("under %s: _meta %v", rev, meta)
	}
}

// shape is the paths of a JSON document's keys, sorted (an array's
// elements under one path): two results of the same call have the same
// shape whatever their values (run ids, times, sizes). What the box was
// (warm or cold, what it had imported) is left out: it changes from one
// box to the next, and says nothing of the protocol.
func shape(doc string) []string {
	var v any
	if json.Unmarshal([]byte(doc), &v) != nil {
		return []string{"(not JSON)"}
	}
	seen := map[string]bool{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				p := path + "." + k
				seen[p] = true
				if p != ".execution.box" && p != ".execution.memory" {
					walk(p, c)
				}
			}
		case []any:
			for _, c := range v {
				walk(path+"[]", c)
			}
		}
	}
	walk("", v)
	paths := make([]string, 0, len(seen))
	for p := range seen {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// sameShape fails unless two results of the same call (under two
// revisions, or from two clients) agree in shape: error or not, the same
// keys in their JSON, the same images in the same order.
func sameShape(t *testing.T, what string, a, b *mcpResult) {
	t.Helper()
	mimes := func(r *mcpResult) (m []string) {
		for _, im := range r.Images {
			m = append(m, im.MIMEType)
		}
		return m
	}
	sa, sb := shape(a.Text), shape(b.Text)
	if a.IsError != b.IsError || !slices.Equal(sa, sb) || !slices.Equal(mimes(a), mimes(b)) {
		t.Errorf("%s: the results differ in shape: isError %v and %v; images %q and %q; keys only in the first %q, only in the second %q",
			what, a.IsError, b.IsError, mimes(a), mimes(b), missing(sa, sb), missing(sb, sa))
	}
}

// missing is what of a is not in b.
func missing(a, b []string) (out []string) {
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// The 2026-07-28 wire by hand, with no VM: server/discover, a client that
// never initializes, a revision the server does not speak, and the 33rd
// call, whose refusal the server writes itself (outside the SDK) and must
// still carry what the revision adds.
func TestMCPModernWireNoVM(t *testing.T) {
	e := noVMEnv(t)
	r := e.rawClientAt(t, modernRev, true)

	r.send(r.request(1, "server/discover", ""))
	var d struct {
		SupportedVersions []string       `json:"supportedVersions"`
		Capabilities      map[string]any `json:"capabilities"`
		TTLMs             int            `json:"ttlMs"`
		CacheScope        string         `json:"cacheScope"`
		Meta              map[string]any `json:"_meta"`
	}
	m := r.reply("1", 10*time.Second)
	// Catches a binary that does not answer discover (a 2026-07-28 client
	// then falls back to initialize, or gives up), that leaves out a
	// revision it speaks or the tools, or that drops its cache hint.
	if m.Error != nil || json.Unmarshal(m.Result, &d) != nil || len(d.SupportedVersions) == 0 || d.SupportedVersions[0] != modernRev ||
		!slices.Contains(d.SupportedVersions, legacyRev) || d.Capabilities["tools"] == nil || d.TTLMs != 86400000 || d.CacheScope != "private" {
		t.Fatalf("server/discover: %s", m.line)
	}
	checkServerInfo(t, modernRev, d.Meta) // discover names the server like every result

	// A revision the server does not speak is refused, naming the ones it
	// does: catches a server that answers in a revision the client did not ask for.
	r.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	if m := r.reply("2", 10*time.Second); m.Error == nil || !strings.Contains(string(m.line), modernRev) {
		t.Errorf("a request of revision 2099-01-01: %s", m.line)
	}

	// Catches a server that needs initialize before a tools/call, or whose
	// calls under 2026-07-28 say something else than under 2025-11-25.
	r.send(r.call(3, pyArgs("print(1)", "")))
	res := r.result(r.reply("3", 10*time.Second))
	if !res.IsError || res.Doc.Error == nil || res.Doc.Error.Code != "no_vm" || res.Execution.Cleanup.Status != "NOT_ATTEMPTED" {
		t.Fatalf("a call with _meta: %s", res.Text)
	}
	for id := 4; id <= 34; id++ { // calls 2 to 32
		r.send(r.call(id, pyArgs("x", "")))
		r.reply(fmt.Sprint(id), 10*time.Second)
	}
	r.send(r.call(35, pyArgs("x", "")))
	last := r.result(r.reply("35", 10*time.Second)) // resultType and serverInfo on the hand-written refusal
	// Catches a limit that does not hold without initialize, or that
	// answers with a JSON-RPC error, which an agent never sees.
	if last.Doc.Error == nil || last.Doc.Error.Code != "session_limit" || last.Execution.Cleanup.Status != "NOT_ATTEMPTED" {
		t.Fatalf("the 33rd call: %s", last.Text)
	}
}
