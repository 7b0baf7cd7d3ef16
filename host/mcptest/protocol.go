package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const toolName = "run_python"

// The limits every run_python schema shows, whatever the options.
const (
	maxOutputBytes = 8192
	maxInputFiles  = 16
	maxCodeBytes   = 65536
)

const hintStart = "run the server command in a terminal to read its error (a bad option is refused at start-up); with --server, check the command"

func (r *runner) checkToolsList(ctx context.Context) verdict {
	want := fmt.Sprintf("exactly one tool, %s, whose schema shows images %s, timeout_s at most %v, max_output_bytes 1–%d, files at most %d, code at most %d bytes, and no other property; under MCP %s, a positive ttlMs (the list is fixed while the server runs)",
		toolName, strings.Join(r.o.Images, ","), r.o.MaxTimeout, maxOutputBytes, maxInputFiles, maxCodeBytes, newestProtocol)
	list, v := r.toolList(ctx, want)
	if v != nil {
		return *v
	}
	if got := toolNames(list); len(got) != 1 || got[0] != toolName {
		return fail(want, fmt.Sprintf("tools %q", got), "this is not PyBox's server: check --server")
	}
	if problems := schemaProblems(toolSchema(list.Tools[0]), r.o); len(problems) > 0 {
		return fail(want, strings.Join(problems, "; "),
			"the server was started with other options than this check: give `pybox check` the same --images and --max-timeout as the server (`pybox mcp config` prints them as your client should have them)")
	}
	cache := "no ttlMs under MCP " + r.main.version()
	if r.main.version() >= newestProtocol {
		if list.TTLMs <= 0 {
			return fail(want, fmt.Sprintf("ttlMs %d under MCP %s", list.TTLMs, r.main.version()),
				"the tool is fixed while the server runs, so its list may be cached: without a positive ttlMs a client must take it as stale at once and ask again; a bug in the server")
		}
		cache = fmt.Sprintf("ttlMs %d (%s)", list.TTLMs, orNone(list.CacheScope))
	}
	return pass("%s: images %s, timeout_s ≤ %v, max_output_bytes 1–%d, files ≤ %d, additionalProperties false; %s",
		toolName, strings.Join(r.o.Images, ","), r.o.MaxTimeout, maxOutputBytes, maxInputFiles, cache)
}

// toolList reads the shared session's tool list once: the tools-list
// check judges it, and the initialize check compares the older
// revision's with it.
func (r *runner) toolList(ctx context.Context, want string) (*mcp.ListToolsResult, *verdict) {
	if r.tools != nil {
		return r.tools, nil
	}
	s, err := r.session(ctx)
	if err != nil {
		v := fail(want, "no session: "+err.Error(), hintStart)
		return nil, &v
	}
	list, err := listTools(ctx, s, r.o.Patience)
	if err != nil {
		v := fail(want, "tools/list failed: "+err.Error(), "see the server's stderr (-v shows it)")
		return nil, &v
	}
	r.tools = list
	return list, nil
}

func listTools(ctx context.Context, s *server, patience time.Duration) (*mcp.ListToolsResult, error) {
	ctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	return s.cs.ListTools(ctx, nil)
}

func toolNames(list *mcp.ListToolsResult) []string {
	var names []string
	for _, t := range list.Tools {
		names = append(names, t.Name)
	}
	return names
}

// toolSchema is a tool's input schema as decoded JSON.
func toolSchema(t *mcp.Tool) map[string]any {
	b, _ := json.Marshal(t.InputSchema)
	var schema map[string]any
	json.Unmarshal(b, &schema)
	return schema
}

// schemaProblems lists where the schema differs from what the options
// should make it show.
func schemaProblems(schema map[string]any, o Options) []string {
	var images []any
	for _, im := range o.Images {
		images = append(images, im)
	}
	want := []struct {
		path string
		want any
	}{
		{"additionalProperties", false},
		{"properties.timeout_s.maximum", o.MaxTimeout},
		{"properties.image.enum", images},
		{"properties.max_output_bytes.minimum", 1.0},
		{"properties.max_output_bytes.maximum", float64(maxOutputBytes)},
		{"properties.files.maxItems", float64(maxInputFiles)},
		{"properties.code.maxLength", float64(maxCodeBytes)},
	}
	var problems []string
	if len(o.Data) > 0 {
		var data []any
		for _, d := range o.Data {
			data = append(data, d)
		}
		want = append(want, struct {
			path string
			want any
		}{"properties.data.items.enum", data})
	} else if _, ok := lookup(schema, "properties.data"); ok {
		problems = append(problems, "properties.data is there, though the server should allow no data folder")
	}
	for _, w := range want {
		got, ok := lookup(schema, w.path)
		if !ok {
			problems = append(problems, w.path+" is missing")
			continue
		}
		if !sameValue(got, w.want) {
			b, _ := json.Marshal(got)
			problems = append(problems, fmt.Sprintf("%s is %s", w.path, b))
		}
	}
	return problems
}

// lookup follows a dotted path through nested objects.
func lookup(m map[string]any, path string) (any, bool) {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = obj[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// sameValue compares a decoded JSON value with a wanted one; lists are
// compared as sets, since an enum's order means nothing.
func sameValue(got, want any) bool {
	g, gok := got.([]any)
	w, wok := want.([]any)
	if gok && wok {
		key := func(l []any) []string {
			var out []string
			for _, v := range l {
				out = append(out, fmt.Sprint(v))
			}
			slices.Sort(out)
			return out
		}
		return slices.Equal(key(g), key(w))
	}
	return reflect.DeepEqual(got, want)
}

// checkStdoutProtocolOnly judges every line every server wrote during
// the checks.
func (r *runner) checkStdoutProtocolOnly(context.Context) verdict {
	const want = "every line the server writes to stdout is a JSON-RPC message"
	lines, strays, sessions := 0, []string{}, 0
	for _, s := range r.servers {
		snap := s.tap.snapshot()
		lines += len(snap.got) + len(snap.stray)
		strays = append(strays, snap.stray...)
		if s.cs != nil {
			sessions++
		}
	}
	if sessions == 0 && len(strays) == 0 {
		return fail(want, "no session with the server was made", hintStart)
	}
	if len(strays) > 0 {
		return fail(want, fmt.Sprintf("%d of %d lines were not, the first: %s", len(strays), lines, strconv.Quote(strays[0])),
			"something in the server writes to stdout (a print, a library's log): an MCP client may drop the session on it; in pybox mcp this is a bug: report it with the server's stderr (-v)")
	}
	return pass("%d lines from %d server processes, all JSON-RPC", lines, sessions)
}
