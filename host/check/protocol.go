package check

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// minProtocol is the oldest MCP version PyBox promises to speak. Versions are
// dates, so later ones sort after it.
const minProtocol = "2025-11-25"

const toolName = "run_python"

// The limits every run_python schema shows, whatever the options.
const (
	maxOutputBytes = 8192
	maxInputFiles  = 16
	maxCodeBytes   = 65536
)

const hintStart = "run the server command in a terminal to read its error (a bad option is refused at start-up); with --server, check the command"

func (r *runner) checkInitialize(ctx context.Context) verdict {
	const want = "the server starts and negotiates MCP " + minProtocol + " or newer, offering tools"
	s, err := r.session(ctx)
	if err != nil {
		return fail(want, "no session: "+err.Error(), hintStart)
	}
	init := s.cs.InitializeResult()
	switch {
	case init.ProtocolVersion < minProtocol:
		return fail(want, "protocol version "+init.ProtocolVersion,
			"this server speaks an older MCP: update pybox (or the --server command); PyBox implements "+minProtocol)
	case init.Capabilities == nil || init.Capabilities.Tools == nil:
		return fail(want, "no tools capability in the initialize result", "this is not a run_python server: check --server")
	}
	name := "a server with no name"
	if init.ServerInfo != nil {
		name = strings.TrimSpace(init.ServerInfo.Name + " " + init.ServerInfo.Version)
	}
	return pass("MCP %s with %s", init.ProtocolVersion, name)
}

func (r *runner) checkToolsList(ctx context.Context) verdict {
	want := fmt.Sprintf("exactly one tool, %s, whose schema shows images %s, timeout_s at most %v, max_output_bytes 1–%d, files at most %d, code at most %d bytes, and no other property",
		toolName, strings.Join(r.o.Images, ","), r.o.MaxTimeout, maxOutputBytes, maxInputFiles, maxCodeBytes)
	s, err := r.session(ctx)
	if err != nil {
		return fail(want, "no session: "+err.Error(), hintStart)
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.Patience)
	defer cancel()
	list, err := s.cs.ListTools(ctx, nil)
	if err != nil {
		return fail(want, "tools/list failed: "+err.Error(), "see the server's stderr (-v shows it)")
	}
	var names []string
	for _, t := range list.Tools {
		names = append(names, t.Name)
	}
	if len(list.Tools) != 1 || names[0] != toolName {
		return fail(want, fmt.Sprintf("tools %q", names), "this is not PyBox's server: check --server")
	}
	b, _ := json.Marshal(list.Tools[0].InputSchema)
	var schema map[string]any
	json.Unmarshal(b, &schema)
	if problems := schemaProblems(schema, r.o); len(problems) > 0 {
		return fail(want, strings.Join(problems, "; "),
			"the server was started with other options than this check: give `pybox check` the same --images and --max-timeout as the server (`pybox mcp config` prints them as your client should have them)")
	}
	return pass("%s: images %s, timeout_s ≤ %v, max_output_bytes 1–%d, files ≤ %d, additionalProperties false",
		toolName, strings.Join(r.o.Images, ","), r.o.MaxTimeout, maxOutputBytes, maxInputFiles)
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
