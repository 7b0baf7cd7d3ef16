package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/egress"
	"pybox/shared/wire"
)

// netList is the list of the servers of these tests.
const netList = "api.example.com,*.pythonhosted.org:443,203.0.113.7:8080"

func mustAllow(t testing.TB, list string) egress.Allow {
	t.Helper()
	a, err := egress.ParseAllow(list)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func netOptions(t testing.TB) Options {
	o := testOptions()
	o.Net = mustAllow(t, netList)
	return o
}

// listTool is the server's one tool as a client lists it, and its schema
// as JSON.
func listTool(t *testing.T, o Options) (*sdk.Tool, map[string]json.RawMessage) {
	t.Helper()
	cs := startSession(t, o, newFakeVM(), testLimits()).client("")
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 1 {
		t.Fatalf("tools: %+v", list.Tools)
	}
	var s struct {
		Props map[string]json.RawMessage `json:"properties"`
	}
	b, _ := json.Marshal(list.Tools[0].InputSchema)
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return list.Tools[0], s.Props
}

// Without a list the tool is what it always was: no network property,
// a description that says "no network", a closed world. With one, the
// network property, a description naming the hosts and how they are
// reached, and an open world.
func TestNetworkSchema(t *testing.T) {
	tool, props := listTool(t, testOptions())
	if _, ok := props["network"]; ok || len(props) != 6 {
		t.Errorf("a server without a list has properties %v", slices.Collect(mapKeys(props)))
	}
	if tool.Annotations.OpenWorldHint == nil || *tool.Annotations.OpenWorldHint {
		t.Error("a server without a list says the world is open")
	}
	if d := tool.Description; !strings.Contains(d, "(no network, read-only root") || strings.Contains(d, "HTTP_PROXY") {
		t.Errorf("description without a list: %s", d)
	}
	// Byte for byte as before: the description and schema do not depend
	// on an empty list in any way.
	plain, withEmpty := testOptions(), testOptions()
	withEmpty.Net = egress.Allow{}
	if toolDescription(&plain) != toolDescription(&withEmpty) || fmt.Sprint(inputSchema(&plain)) != fmt.Sprint(inputSchema(&withEmpty)) {
		t.Error("an empty list changes the tool")
	}

	o := netOptions(t)
	tool, props = listTool(t, o)
	if len(props) != 7 {
		t.Errorf("properties %v", slices.Collect(mapKeys(props)))
	}
	var nw struct {
		Type     string `json:"type"`
		MinItems int    `json:"minItems"`
		MaxItems int    `json:"maxItems"`
		Items    struct {
			Type      string `json:"type"`
			MinLength int    `json:"minLength"`
			MaxLength int    `json:"maxLength"`
		} `json:"items"`
		Description string `json:"description"`
	}
	if err := json.Unmarshal(props["network"], &nw); err != nil {
		t.Fatal(err)
	}
	if nw.Type != "array" || nw.MinItems != 1 || nw.MaxItems != 32 || nw.Items.Type != "string" || nw.Items.MinLength != 1 || nw.Items.MaxLength != 260 || nw.Description == "" {
		t.Errorf("network: %s", props["network"])
	}
	if tool.Annotations.OpenWorldHint == nil || !*tool.Annotations.OpenWorldHint {
		t.Error("a server with a list says the world is closed")
	}
	d := tool.Description
	for _, want := range []string{o.Net.String(), "HTTP_PROXY", "HTTPS_PROXY", "end to end", "fewer hosts or ports, never more", "names none has no network", "unless a call names hosts in network"} {
		if !strings.Contains(d, want) {
			t.Errorf("the description does not say %q: %s", want, d)
		}
	}
	if strings.Contains(d, "(no network,") {
		t.Errorf("the description says no network: %s", d)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// The network argument: unknown without a list; with one, a call may
// name some of its hosts and ports, and gets exactly those.
func TestParseArgsNetwork(t *testing.T) {
	plain := testOptions()
	if _, err := admit([]byte(`{"code":"x","network":["api.example.com"]}`), &plain); err == nil ||
		!strings.Contains(err.Error(), `unknown argument "network"`) || strings.Contains(err.Error(), ", network") {
		t.Errorf("network on a server without a list: %v", err)
	}
	o := netOptions(t)
	if _, err := admit([]byte(`{"code":"x","nets":[]}`), &o); err == nil || !strings.Contains(err.Error(), "return_files, network") {
		t.Errorf("an unknown argument on a server with a list: %v", err)
	}
	r, allow, err := admitNet([]byte(`{"code":"x"}`), &o)
	if err != nil || r.Net || allow.String() != "" {
		t.Fatalf("a call without network: net %v, allow %q, %v", r != nil && r.Net, allow, err)
	}
	for args, want := range map[string]string{
		`["api.example.com"]`:                                                    "api.example.com",
		`["API.Example.com.:443"]`:                                               "api.example.com:443",
		`["files.pythonhosted.org:443"]`:                                         "files.pythonhosted.org:443",
		`["*.pythonhosted.org:443","api.example.com:80"]`:                        "api.example.com:80,*.pythonhosted.org:443",
		`["203.0.113.7:8080"]`:                                                   "203.0.113.7:8080",
		`["api.example.com:443","api.example.com:80"]`:                           "api.example.com",
		`["203.0.113.7:8080","api.example.com",` + `"a.b.pythonhosted.org:443"]`: "203.0.113.7:8080,a.b.pythonhosted.org:443,api.example.com",
	} {
		r, allow, err := admitNet([]byte(`{"code":"x","network":`+args+`}`), &o)
		if err != nil {
			t.Errorf("%s: %v", args, err)
			continue
		}
		if !r.Net || allow.String() != want {
			t.Errorf("%s: net %v, allow %q; want %q", args, r.Net, allow, want)
		}
		if _, err := o.Net.Narrow(allow); err != nil {
			t.Errorf("%s: the call got more than the server opens: %v", args, err)
		}
	}
	long := strings.Repeat("a", 61) + "."
	long = strings.Repeat(long, 4) + "example.com" // 259 bytes
	for args, want := range map[string]string{
		`["evil.example.org"]`:                 "network: evil.example.org:80 is not allowed by this server, which allows " + o.Net.String(),
		`["api.example.com:8443"]`:             "api.example.com:8443 is not allowed by this server",
		`["pythonhosted.org:443"]`:             "pythonhosted.org:443 is not allowed by this server",
		`["files.pythonhosted.org"]`:           "files.pythonhosted.org:80 is not allowed by this server",
		`["*.example.com"]`:                    "*.example.com:80 is not allowed by this server",
		`["203.0.113.8:8080"]`:                 "203.0.113.8:8080 is not allowed by this server",
		`["http://api.example.com/"]`:          `network: entry "http://api.example.com/"`,
		`["api.example.com:0"]`:                `entry "api.example.com:0"`,
		`["a b"]`:                              `entry "a b": it has whitespace`,
		`[]`:                                   "network is empty",
		`[""]`:                                 "network[0] is empty",
		`["api.example.com,evil.org"]`:         `network[0] ("api.example.com,evil.org") has a comma`,
		`["` + long + `x"]`:                    "is 260 characters long; a DNS name has at most 253", // within the argument's bound, not a name's
		`["` + strings.Repeat("a", 261) + `"]`: "network[0] has 261 bytes; at most 260",
		`null`:                                 "network must be an array, not null",
		`"api.example.com"`:                    "network must be an array, not a string",
		`[1]`:                                  "network[0] must be a string, not a number",
		`[` + strings.Repeat(`"api.example.com",`, 32) + `"api.example.com"]`: "network names 33 hosts; at most 32",
	} {
		if _, _, err := admitNet([]byte(`{"code":"x","network":`+args+`}`), &o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.80s: %v; want %q", args, err, want)
		}
	}
}

// A call that names hosts gets a run with Net and one gate holding
// exactly those; the receipt's network section comes back in the
// result. A call that names none gets neither; one that widens runs
// nothing.
func TestNetworkCall(t *testing.T) {
	vm := newFakeVM()
	vm.network = func(g *egress.Gate) *wire.Network {
		return &wire.Network{Allowed: g.Allow.String(), Refused: 1, SentBytes: 10, ReceivedBytes: 20, Connections: []wire.NetConnection{
			{Host: "api.example.com", Port: 443, Address: "192.0.2.1:443", Kind: "tls", Sent: 10, Received: 20, Millis: 5, Allowed: true},
			{Host: "evil.example.org", Port: 443, Kind: "tls", Why: "not on the list"},
		}}
	}
	s := startSession(t, netOptions(t), vm, testLimits())
	cs := s.client("")
	d := callTool(t, cs, map[string]any{"code": "x", "network": []string{"api.example.com:443"}})
	if d.isError {
		t.Fatalf("%s", d.doc.Execution)
	}
	var exec struct {
		Network *wire.Network `json:"network"`
	}
	if err := json.Unmarshal(d.doc.Execution, &exec); err != nil {
		t.Fatal(err)
	}
	if n := exec.Network; n == nil || n.Allowed != "api.example.com:443" || len(n.Connections) != 2 || n.Refused != 1 || n.Connections[1].Why != "not on the list" {
		t.Errorf("execution.network: %+v", exec.Network)
	}
	s.log.waitLog(t, "network api.example.com:443: 2 connections, 1 refused")

	d = callTool(t, cs, map[string]any{"code": "y"})
	if d.isError || strings.Contains(string(d.doc.Execution), `"network"`) {
		t.Fatalf("a call without network: %s", d.doc.Execution)
	}
	d = callTool(t, cs, map[string]any{"code": "z", "network": []string{"api.example.com:8443"}})
	if !d.isError || d.doc.Error == nil || d.doc.Error.Code != codeInvalidArguments ||
		!strings.Contains(d.doc.Error.Message, "api.example.com:8443 is not allowed by this server") || !strings.Contains(d.doc.Error.Message, "Nothing ran.") {
		t.Errorf("a call that widens: %+v", d.doc.Error)
	}

	runs, gates := vm.Runs(), vm.Gates()
	if len(runs) != 2 || len(gates) != 2 {
		t.Fatalf("%d runs, %d gates: want 2 (the widening call runs nothing)", len(runs), len(gates))
	}
	if !runs[0].Net || gates[0] == nil || gates[0].Allow.String() != "api.example.com:443" {
		t.Errorf("the first run: net %v, gate %+v", runs[0].Net, gates[0])
	}
	if runs[1].Net || gates[1] != nil {
		t.Errorf("the run without network: net %v, gate %+v", runs[1].Net, gates[1])
	}
}

// Each call gets a gate of its own: nothing of one call's connections
// (its budget, its records) is another's.
func TestNetworkGatePerCall(t *testing.T) {
	vm := newFakeVM()
	cs := startSession(t, netOptions(t), vm, testLimits()).client("")
	for range 2 {
		if d := callTool(t, cs, map[string]any{"code": "x", "network": []string{"api.example.com"}}); d.isError {
			t.Fatalf("%s", d.doc.Execution)
		}
	}
	if g := vm.Gates(); len(g) != 2 || g[0] == nil || g[0] == g[1] {
		t.Errorf("gates %p", g)
	}
}

// The options render --allow-net in its canonical form, which reads back
// to the same list.
func TestArgsAllowNet(t *testing.T) {
	o := DefaultOptions()
	if slices.Contains(o.Args(), "--allow-net") {
		t.Errorf("default options render %q", o.Args())
	}
	o.Net = mustAllow(t, "API.example.com:443,*.pythonhosted.org,api.example.com:80")
	args := o.Args()
	i := slices.Index(args, "--allow-net")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("args %q", args)
	}
	if back := mustAllow(t, args[i+1]); back.String() != o.Net.String() || args[i+1] != "api.example.com,*.pythonhosted.org" {
		t.Errorf("--allow-net %q", args[i+1])
	}
	snippet, _, err := Config("claude-code", "/usr/bin/pybox", "/home/u/.pybox", o)
	if err != nil || !strings.Contains(snippet, `--allow-net 'api.example.com,*.pythonhosted.org'`) {
		t.Errorf("claude-code: %q, %v", snippet, err)
	}
}

// network.connections is cut like the receipt's other lists, counted on
// in not_listed, before the program's output is; the outcome itself is
// left as it was.
func TestShapeCutsConnections(t *testing.T) {
	rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
	res := taken(&wire.Result{Receipt: rec})
	nw := &wire.Network{Allowed: "*.example.com", NotListed: 5, Refused: 64, SentBytes: 1, ReceivedBytes: 2}
	for i := range wire.MaxNetListed {
		nw.Connections = append(nw.Connections, wire.NetConnection{Host: fmt.Sprintf("h%d.", i) + strings.Repeat("x", 240) + ".example.com",
			Port: 443, Kind: "tls", Why: strings.Repeat("why ", 200)})
	}
	res.Receipt.Network = nw
	d := checkResult(t, shape(outcome{RunID: "r", Result: res}))
	var exec struct {
		Network wire.Network `json:"network"`
		Capture wire.Capture `json:"capture"`
	}
	if err := json.Unmarshal(d.doc.Execution, &exec); err != nil {
		t.Fatal(err)
	}
	kept := len(exec.Network.Connections)
	if kept == 0 || kept == wire.MaxNetListed || exec.Network.NotListed != 5+wire.MaxNetListed-kept {
		t.Errorf("kept %d connections, not_listed %d", kept, exec.Network.NotListed)
	}
	if exec.Network.Refused != 64 || exec.Network.Allowed != "*.example.com" || exec.Network.SentBytes != 1 || exec.Network.ReceivedBytes != 2 {
		t.Errorf("the totals changed: %+v", exec.Network)
	}
	if exec.Capture.Stdout != "hello\n" {
		t.Errorf("stdout cut to %q", exec.Capture.Stdout)
	}
	if !strings.Contains(strings.Join(d.doc.Delivery.What, ";"), "network.connections cut from 64 to") {
		t.Errorf("delivery: %q", d.doc.Delivery.What)
	}
	if len(nw.Connections) != wire.MaxNetListed || nw.NotListed != 5 {
		t.Errorf("shape changed the outcome's receipt: %d connections, not_listed %d", len(nw.Connections), nw.NotListed)
	}
}
