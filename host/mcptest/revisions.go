package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// The MCP revisions the checks speak. The shared session runs at the
// newest, as an up-to-date agent's client does: no handshake, the SDK
// asks server/discover and names the revision in every request's _meta.
// The initialize check opens a second session at the older revision,
// which clients that still handshake ask for. Revisions are dates, so
// later ones sort after.
const (
	newestProtocol = "2026-07-28"
	olderProtocol  = "2025-11-25"
)

// resultSchemaVersion is the version of run_python's result document
// (docs/result.md), the same under every revision.
const resultSchemaVersion = 1

func (r *runner) checkDiscover(ctx context.Context) verdict {
	const want = "the server starts and answers server/discover at MCP " + newestProtocol + " (no handshake), offering tools, with its name"
	s, err := r.session(ctx)
	if err != nil {
		return fail(want, "no session: "+err.Error(), hintStart)
	}
	init := s.cs.InitializeResult()
	switch {
	case init.ProtocolVersion != newestProtocol:
		return fail(want, discoverRefusal(s.tap.snapshot(), init.ProtocolVersion), hintOlderServer(init.ProtocolVersion))
	case init.Capabilities == nil || init.Capabilities.Tools == nil:
		return fail(want, "no tools capability in the server/discover result", "this is not a run_python server: check --server")
	case init.ServerInfo == nil || init.ServerInfo.Name == "":
		return fail(want, "no server name in the server/discover result's _meta (io.modelcontextprotocol/serverInfo)",
			"a client of "+newestProtocol+" names the server by it: a bug in the server")
	}
	return pass("MCP %s by server/discover, no handshake: %s", init.ProtocolVersion,
		strings.TrimSpace(init.ServerInfo.Name+" "+init.ServerInfo.Version))
}

// discoverRefusal says how a server that negotiated an older revision
// answered server/discover, from the wire.
func discoverRefusal(snap snapshot, negotiated string) string {
	id := ""
	for _, q := range snap.sent {
		if q.Method == "server/discover" {
			id = q.ID
		}
	}
	m, answered := snap.response(id)
	switch {
	case id == "":
		return "no server/discover was sent; the session is at MCP " + negotiated
	case !answered:
		return "no answer to server/discover; the session is at MCP " + negotiated
	case m.IsError:
		return fmt.Sprintf("server/discover refused (%q); the server then initialized at MCP %s", cut(m.ErrorMsg, 120), negotiated)
	}
	return "server/discover did not offer " + newestProtocol + "; the server then initialized at MCP " + negotiated
}

// hintOlderServer is what to do about a server that does not speak the
// newest revision.
func hintOlderServer(negotiated string) string {
	return "the server speaks MCP " + negotiated + " but not " + newestProtocol + ", which clients now try first (the other checks ran at " + negotiated +
		"): update pybox (rebuild it with `make`) or, with --server, the server the command names; then restart your agent's client"
}

// checkInitialize checks the older revision end to end in a session of
// its own: the handshake, the tool list, and one run.
func (r *runner) checkInitialize(ctx context.Context) verdict {
	want := fmt.Sprintf("a second session at MCP %s (the initialize handshake) offering tools, whose tools/list has the same %s schema as the %s session's, and whose run (print) comes back with schema_version %d, status ok, cleanup REMOVED, what it printed as capture.stdout, and delivery",
		olderProtocol, toolName, newestProtocol, resultSchemaVersion)
	s, err := r.start(ctx, r.o.Env, olderProtocol)
	if err != nil {
		return fail(want, "no session: "+err.Error(), hintStart)
	}
	// The session ends with the check: its server must not hold on to
	// the VM while the shared session's runs go on.
	defer s.close()
	init := s.cs.InitializeResult()
	switch {
	case init.ProtocolVersion != olderProtocol:
		return fail(want, "initialize answered MCP "+init.ProtocolVersion,
			"clients that still initialize ask for "+olderProtocol+" and the server must answer with it: update pybox (rebuild it with `make`) or, with --server, the server the command names")
	case init.Capabilities == nil || init.Capabilities.Tools == nil:
		return fail(want, "no tools capability in the initialize result", "this is not a run_python server: check --server")
	}
	if v := r.olderToolList(ctx, s, want); v != nil {
		return *v
	}
	o := r.call(ctx, s, r.runArgs(olderProgram))
	if o.err != nil {
		return fail(want, "the run: "+o.failure(), "see the server's stderr (-v shows it)")
	}
	if p := olderResultProblem(o.res); p != "" {
		hint := "a client that initializes would read another result than one of " + newestProtocol + ": a bug in the server"
		if !o.res.ok() {
			hint = hintFor(o.res, r.o)
		}
		return fail(want, p, hint)
	}
	return pass("MCP %s by initialize; the same %s schema; a run printed %d bytes, status ok, cleanup REMOVED, wall %d ms",
		init.ProtocolVersion, toolName, len(o.res.Exec.Capture.Stdout), o.res.Exec.WallMS)
}

// olderToolList reads the older session's tool list and compares it with
// the shared session's (or, when that has none, with the options).
func (r *runner) olderToolList(ctx context.Context, s *server, want string) *verdict {
	list, err := listTools(ctx, s, r.o.Patience)
	if err != nil {
		v := fail(want, "tools/list failed: "+err.Error(), "see the server's stderr (-v shows it)")
		return &v
	}
	if got := toolNames(list); len(got) != 1 || got[0] != toolName {
		v := fail(want, fmt.Sprintf("tools %q", got), "this is not PyBox's server: check --server")
		return &v
	}
	if newest, v := r.toolList(ctx, want); v == nil && len(newest.Tools) == 1 {
		if d := jsonDiff("", toolSchema(list.Tools[0]), toolSchema(newest.Tools[0])); len(d) > 0 {
			v := fail(want, fmt.Sprintf("the schema differs (under %s, then %s): %s", olderProtocol, newestProtocol, cut(strings.Join(d, "; "), 400)),
				"the tool must be the same under every revision: a bug in the server")
			return &v
		}
		return nil
	}
	if problems := schemaProblems(toolSchema(list.Tools[0]), r.o); len(problems) > 0 {
		v := fail(want, strings.Join(problems, "; "),
			"the server was started with other options than this check: give `pybox check` the same --images and --max-timeout as the server")
		return &v
	}
	return nil
}

// jsonDiff lists where two decoded JSON values differ, by dotted path:
// "path: A, B", with "(none)" for a member one of them lacks.
func jsonDiff(path string, a, b any) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		if reflect.DeepEqual(a, b) {
			return nil
		}
		return []string{fmt.Sprintf("%s: %s, %s", path, jsonText(a), jsonText(b))}
	}
	member := func(k string) string { return strings.TrimPrefix(path+"."+k, ".") }
	var d []string
	for _, k := range slices.Sorted(maps.Keys(am)) {
		if bv, ok := bm[k]; ok {
			d = append(d, jsonDiff(member(k), am[k], bv)...)
		} else {
			d = append(d, fmt.Sprintf("%s: %s, (none)", member(k), jsonText(am[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(bm)) {
		if _, ok := am[k]; !ok {
			d = append(d, fmt.Sprintf("%s: (none), %s", member(k), jsonText(bm[k])))
		}
	}
	return d
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// olderResultProblem says how the older session's run differs from the
// result every revision gets; "" when it does not. (That the text is the
// structured JSON is stdlib-run's to judge: a server that breaks it does
// so under every revision.)
func olderResultProblem(res *toolResult) string {
	switch {
	case !res.ok():
		return res.summary()
	case res.Doc.SchemaVersion != resultSchemaVersion:
		return fmt.Sprintf("schema_version %d", res.Doc.SchemaVersion)
	case res.Doc.Delivery == nil:
		return "no delivery in the result"
	case res.Exec.Capture.Stdout != olderGreeting+"\n":
		return fmt.Sprintf("capture.stdout %q", cut(res.Exec.Capture.Stdout, 200))
	}
	return ""
}
