package e2e

// Clients that ignore the proxy variables (http.client, socket,
// aiohttp by default): a net run's box resolves the listed names itself,
// asking the host, and takes connections made straight to the list's
// ports, which the host checks as it checks the proxy's. The servers are
// this test's, on this machine's 127.0.0.1, named in the list as an
// address; "localhost." (with its dot, so that the box's /etc/hosts does
// not answer it) is a name the host resolves there.

import (
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"pybox/shared/wire"
)

func TestNetDirect(t *testing.T) {
	e := boxVM(t)
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
	})
	plain := httptest.NewServer(hello)
	defer plain.Close()
	tls := httptest.NewTLSServer(hello)
	defer tls.Close()
	port := func(s *httptest.Server) string {
		_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
		return p
	}
	hp, tp := port(plain), port(tls)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tls.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf(`
import http.client, socket, ssl, time
def probe(name, f):
    t = time.monotonic()
    try:
        out = f()
    except Exception as e:
        out = "%%s %%s" %% (type(e).__name__, e)
    print("RESULT", name, "%%.1f" %% (time.monotonic() - t), out)
def get(conn, host=None):
    conn.request("GET", "/direct", headers={"Host": host} if host else {})
    r = conn.getresponse()
    return "%%d %%s" %% (r.status, r.read().decode())
def addr(name, port):
    return socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
probe("http", lambda: get(http.client.HTTPConnection("127.0.0.1", %[1]s, timeout=15)))
ctx = ssl.create_default_context(cafile="/tmp/input/ca.pem")
probe("https", lambda: get(http.client.HTTPSConnection("127.0.0.1", %[2]s, context=ctx, timeout=15)))
probe("resolve", lambda: addr("localhost.", %[1]s))
probe("byname", lambda: get(http.client.HTTPConnection("localhost.", %[1]s, timeout=15), "localhost:%[1]s"))
probe("unlisted", lambda: addr("unlisted.example", 443))
probe("unresolvable", lambda: addr("nowhere.invalid", 443))
probe("closedport", lambda: socket.create_connection(("127.0.0.1", 9), timeout=10))
`, hp, tp)
	allow := fmt.Sprintf("127.0.0.1:%s,127.0.0.1:%s,localhost:%s,nowhere.invalid", hp, tp, hp)
	r := runPy(t, e, code, "--timeout", netProgramTimeout, "--file", ca, "--allow-net", allow)
	rc := expectEnd(t, r, wire.StatusOK)
	res := map[string][]string{}
	for _, g := range resultLine.FindAllStringSubmatch(rc.Capture.Stdout, -1) {
		res[g[1]] = strings.SplitN(g[2], " ", 2)
	}
	t.Logf("program: %s", rc.Capture.Stdout)
	check := func(name, want string) {
		t.Helper()
		got := res[name]
		if len(got) != 2 || !strings.Contains(got[1], want) {
			t.Errorf("%s: %q, want %q", name, got, want)
			return
		}
		if s, _ := strconv.ParseFloat(got[0], 64); s > 5 {
			t.Errorf("%s took %s s", name, got[0])
		}
	}
	check("http", "200 hello 127.0.0.1:"+hp+" /direct")
	check("https", "200 hello 127.0.0.1:"+tp+" /direct")
	check("resolve", "127.77.")
	check("byname", "200 hello localhost:"+hp+" /direct")
	check("unlisted", "gaierror")
	check("unresolvable", "gaierror")
	check("closedport", "ConnectionRefusedError")

	nw := r.Receipt.Network
	if nw == nil || nw.Faults != 0 {
		t.Fatalf("network %+v", nw)
	}
	kinds := map[string]wire.NetConnection{}
	for _, c := range nw.Connections {
		kinds[c.Kind+" "+c.Host] = c
	}
	t.Logf("connections: %+v", nw.Connections)
	for key, allowed := range map[string]bool{
		"http 127.0.0.1": true, "tls 127.0.0.1": true, "dns localhost": true, "http localhost": true,
		"dns unlisted.example": false, "dns nowhere.invalid": false,
	} {
		c, ok := kinds[key]
		if !ok || c.Allowed != allowed {
			t.Errorf("%s: %+v (listed %v), want allowed %v", key, c, ok, allowed)
		}
	}
	if c := kinds["dns unlisted.example"]; !strings.Contains(c.Why, "not on the list") {
		t.Errorf("the unlisted name's lookup: %+v", c)
	}
	if c := kinds["http localhost"]; c.Address != "127.0.0.1" || c.Received <= 0 {
		t.Errorf("the connection by name: %+v", c)
	}
}
