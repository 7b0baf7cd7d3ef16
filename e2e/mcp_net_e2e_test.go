package e2e

// The network through MCP, spoken to by the official TypeScript SDK 2.x
// (MCP 2026-07-28): `pybox mcp --allow-net` offers a network argument
// that names the server's hosts, a call reaches what it names (through
// the proxy and straight), a call that names more is refused before
// anything runs, and a server without the option offers no such
// argument.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"pybox/shared/wire"
)

func TestMCPNet(t *testing.T) {
	e := startMCPVM(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	listed := "127.0.0.1:" + port
	// A package index the box's pip installs from, through the proxy.
	ix := newPackageIndex(t, nil)
	ixHost := strings.TrimSuffix(strings.TrimPrefix(ix.URL, "http://"), "/simple/")
	pipCode := fmt.Sprintf(`
import subprocess, sys
p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--quiet",
    "--target", "/tmp/x", "--index-url", %q, "pbxb"], capture_output=True, text=True)
print("RESULT pip", p.returncode, p.stderr.strip()[-300:].replace("\n", " | "))
sys.path.insert(0, "/tmp/x")
import pbxb
print("RESULT pbxb", pbxb.V, pbxb.__file__)
`, ix.URL)
	code := fmt.Sprintf(`
import http.client, os, urllib.request
print("RESULT proxy", os.environ.get("HTTP_PROXY"))
try:
    print("RESULT urllib", urllib.request.urlopen("http://%[1]s/proxy", timeout=15).read().decode())
except Exception as e:
    print("RESULT urllib", type(e).__name__, e)
try:
    c = http.client.HTTPConnection("127.0.0.1", %[2]s, timeout=15); c.request("GET", "/direct")
    print("RESULT direct", c.getresponse().read().decode())
except Exception as e:
    print("RESULT direct", type(e).__name__, e)
`, listed, port)
	steps := []map[string]any{
		{"op": "list"},
		{"op": "call", "args": map[string]any{"code": code, "network": []string{listed}, "timeout_s": 20}},
		{"op": "call", "args": map[string]any{"code": "print('never')", "network": []string{"127.0.0.1:1"}}},
		{"op": "call", "args": map[string]any{"code": code, "timeout_s": 20}},
		{"op": "call", "args": map[string]any{"code": pipCode, "image": "data", "network": []string{ixHost}, "timeout_s": 30}},
	}
	out := tsClient(t, e, "tsclient2", []string{"--images", "stdlib,data", "--max-timeout", "30", "--allow-net", listed + "," + ixHost}, steps)
	if out.ProtocolVersion != modernRev {
		t.Errorf("negotiated %q", out.ProtocolVersion)
	}
	if network, desc := schemaNetwork(t, out.Results[0]); network == nil || !strings.Contains(desc, "this server opens only ") || !strings.Contains(desc, listed) {
		t.Errorf("the tool's network argument %v, description %q: want the argument, and %s named", network, desc, listed)
	}

	results := func(r *mcpResult) map[string]string {
		m := map[string]string{}
		for _, g := range resultLine.FindAllStringSubmatch(r.Execution.Capture.Stdout, -1) {
			m[g[1]] = g[2]
		}
		return m
	}
	receipt := func(r *mcpResult) *wire.Receipt {
		var rc wire.Receipt
		if err := json.Unmarshal(r.Doc.Execution, &rc); err != nil {
			t.Fatal(err)
		}
		return &rc
	}

	opened := tsResult(t, out.Results[1])
	if res := results(opened); opened.IsError || res["proxy"] != "http://127.0.0.1:3128" ||
		res["urllib"] != "hello /proxy" || res["direct"] != "hello /direct" {
		t.Errorf("the call with the network: error %v, printed %q", opened.IsError, opened.Execution.Capture.Stdout)
	}
	if nw := receipt(opened).Network; nw == nil || nw.Allowed != listed || len(nw.Connections) != 2 || nw.Refused != 0 {
		t.Errorf("its network: %+v", nw)
	}

	widened := tsResult(t, out.Results[2])
	if !widened.IsError || widened.Doc.Error == nil || widened.Doc.Error.Code != "invalid_arguments" ||
		!strings.Contains(widened.Doc.Error.Message, "127.0.0.1:1") || strings.Contains(widened.Text, "never") {
		t.Errorf("a call naming a host the server does not open: %.600s", widened.Text)
	}

	closed := tsResult(t, out.Results[3])
	if res := results(closed); closed.IsError || res["proxy"] != "None" || !strings.Contains(res["urllib"], "URLError") ||
		!strings.Contains(res["direct"], "ConnectionRefusedError") {
		t.Errorf("a call without the network: printed %q", closed.Execution.Capture.Stdout)
	}
	if nw := receipt(closed).Network; nw != nil {
		t.Errorf("a call without the network has a network section: %+v", nw)
	}

	// pip in the data image installs a package from the index the call
	// named, through the proxy: the index's page and the wheel, each a
	// connection in the receipt.
	installed := tsResult(t, out.Results[4])
	if res := results(installed); installed.IsError || !strings.HasPrefix(res["pip"], "0") || !strings.HasPrefix(res["pbxb"], "2.0 /tmp/x/pbxb/") {
		t.Errorf("pip install --target: error %v, printed %q\nstderr %q", installed.IsError, installed.Execution.Capture.Stdout, installed.Execution.Capture.Stderr)
	}
	if nw := receipt(installed).Network; nw == nil || nw.Allowed != ixHost || len(nw.Connections) < 2 || nw.Refused != 0 {
		t.Errorf("pip's network: %+v", nw)
	} else {
		t.Logf("pip: %d connections, %d bytes received, in %d ms", len(nw.Connections), nw.ReceivedBytes, installed.Execution.WallMS)
	}

	// Without --allow-net, the tool has no network argument at all.
	plain := tsClient(t, e, "tsclient2", []string{"--images", "stdlib", "--max-timeout", "30"}, steps[:1])
	if n, desc := schemaNetwork(t, plain.Results[0]); n != nil || strings.Contains(desc, "Network") {
		t.Errorf("a server without --allow-net offers a network argument: %v, %q", n, desc)
	}
}

// schemaNetwork is the network property of run_python's input schema in
// a tools/list result (nil when it has none), and the tool's
// description.
func schemaNetwork(t *testing.T, raw json.RawMessage) (any, string) {
	t.Helper()
	var list struct {
		Tools []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			InputSchema struct {
				Properties map[string]any `json:"properties"`
			} `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Tools) != 1 || list.Tools[0].Name != "run_python" {
		t.Fatalf("tools/list: %v %.300s", err, raw)
	}
	return list.Tools[0].InputSchema.Properties["network"], list.Tools[0].Description
}
