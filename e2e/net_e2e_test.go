package e2e

// The network of a box, opened by the user with `pybox run --allow-net`:
// the program reaches the hosts on the list, and only those, through the
// proxy in its box (127.0.0.1:3128, HTTP(S)_PROXY), which the pybox
// process on this machine serves; TLS stays end to end. The servers are
// this test's, on this machine's 127.0.0.1, which the user may name (a
// name that resolves there may not: DNS rebinding). Everything runs on
// the shared box VM.

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
	"time"

	"pybox/shared/wire"
)

// netProgramTimeout is each run's wall timeout: under TCG, importing ssl
// and a handshake take a while.
const netProgramTimeout = "20"

func TestNet(t *testing.T) {
	e := boxVM(t)
	start := time.Now()
	defer func() { t.Logf("TestNet: %v in all", time.Since(start).Round(time.Millisecond)) }()

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the host: %s %s", r.Method, r.URL.Path)
	})
	served := httptest.NewTLSServer(hello)
	defer served.Close()
	other := httptest.NewTLSServer(hello) // never on the list
	defer other.Close()
	plain := httptest.NewServer(hello)
	defer plain.Close()
	port := func(s *httptest.Server) string {
		_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
		return p
	}
	// The test servers' certificate (its own CA, for 127.0.0.1 and
	// example.com) goes to the box as /tmp/input/ca.pem.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: served.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	// fetch is a program that GETs url through urllib (which takes the
	// proxy from the environment) and prints the body or the error.
	fetch := func(url string) string {
		return fmt.Sprintf(`
import os, ssl, urllib.request
ctx = ssl.create_default_context(cafile="/tmp/input/ca.pem")
print("RESULT proxy", os.environ.get("HTTPS_PROXY"), os.environ.get("http_proxy"))
try:
    with urllib.request.urlopen(%q, context=ctx, timeout=15) as r:
        print("RESULT status", r.status)
        print("RESULT body", r.read().decode())
except Exception as e:
    print("RESULT error", type(e).__name__, e)
`, url)
	}
	results := func(rc *wire.Receipt) map[string]string {
		m := map[string]string{}
		for _, g := range resultLine.FindAllStringSubmatch(rc.Capture.Stdout, -1) {
			m[g[1]] = g[2]
		}
		return m
	}
	// netOf checks the network section every run with --allow-net has.
	netOf := func(t *testing.T, r *boxRun, allowed string) *wire.Network {
		t.Helper()
		nw := r.Receipt.Network
		if nw == nil {
			t.Fatalf("no network section: %s", r.dump())
		}
		if nw.Allowed != allowed || nw.Faults != 0 {
			t.Errorf("network allowed %q (want %q), faults %d", nw.Allowed, allowed, nw.Faults)
		}
		return nw
	}
	timed := func(t *testing.T, r *boxRun) {
		t.Logf("pybox run: %v (wall %d ms in the box)", r.elapsed.Round(time.Millisecond), r.Receipt.WallMS)
	}

	t.Run("served", func(t *testing.T) {
		p := port(served)
		r := runPy(t, e, fetch("https://127.0.0.1:"+p+"/served"), "--timeout", netProgramTimeout,
			"--file", ca, "--allow-net", "127.0.0.1:"+p)
		rc := expectEnd(t, r, wire.StatusOK)
		timed(t, r)
		res := results(rc)
		if res["status"] != "200" || res["body"] != "hello from the host: GET /served" ||
			res["proxy"] != "http://127.0.0.1:3128 http://127.0.0.1:3128" {
			t.Errorf("program printed %q", rc.Capture.Stdout)
		}
		nw := netOf(t, r, "127.0.0.1:"+p)
		if len(nw.Connections) != 1 || nw.NotListed != 0 || nw.Refused != 0 {
			t.Fatalf("connections %+v", nw)
		}
		c := nw.Connections[0]
		if c.Host != "127.0.0.1" || strconv.Itoa(c.Port) != p || c.Address != "127.0.0.1" || c.Kind != "tls" || !c.Allowed ||
			c.Sent <= 0 || c.Received <= 0 || c.Why != "" {
			t.Errorf("connection %+v", c)
		}
		if nw.SentBytes != c.Sent || nw.ReceivedBytes != c.Received {
			t.Errorf("totals %d/%d, connection %d/%d", nw.SentBytes, nw.ReceivedBytes, c.Sent, c.Received)
		}
		if rc.Box != nil && rc.Box.Warm {
			t.Errorf("a net run in a warm box: %+v", rc.Box)
		}
		if !strings.Contains(r.stderr, "pybox: network: 1 connections (0 refused), ") {
			t.Errorf("summary: %s", r.stderr)
		}
	})

	t.Run("a host not on the list", func(t *testing.T) {
		p, q := port(served), port(other)
		r := runPy(t, e, fetch("https://127.0.0.1:"+q+"/other"), "--timeout", netProgramTimeout,
			"--file", ca, "--allow-net", "127.0.0.1:"+p)
		rc := expectEnd(t, r, wire.StatusOK)
		timed(t, r)
		if res := results(rc); !strings.Contains(res["error"], "403") {
			t.Errorf("program printed %q, want a 403 from the proxy", rc.Capture.Stdout)
		}
		nw := netOf(t, r, "127.0.0.1:"+p)
		if len(nw.Connections) != 1 || nw.Refused != 1 {
			t.Fatalf("connections %+v", nw)
		}
		c := nw.Connections[0]
		if c.Host != "127.0.0.1" || strconv.Itoa(c.Port) != q || c.Allowed || c.Address != "" || !strings.Contains(c.Why, "not on the list") {
			t.Errorf("connection %+v", c)
		}
		if !strings.Contains(r.stderr, "pybox: refused: 127.0.0.1:"+q+": ") {
			t.Errorf("summary: %s", r.stderr)
		}
	})

	t.Run("plain HTTP to a port named", func(t *testing.T) {
		p := port(plain)
		r := runPy(t, e, fetch("http://127.0.0.1:"+p+"/plain"), "--timeout", netProgramTimeout,
			"--file", ca, "--allow-net", "127.0.0.1:"+p)
		rc := expectEnd(t, r, wire.StatusOK)
		timed(t, r)
		if res := results(rc); res["status"] != "200" || res["body"] != "hello from the host: GET /plain" {
			t.Errorf("program printed %q", rc.Capture.Stdout)
		}
		nw := netOf(t, r, "127.0.0.1:"+p)
		if len(nw.Connections) != 1 || nw.Refused != 0 {
			t.Fatalf("connections %+v", nw)
		}
		if c := nw.Connections[0]; c.Kind != "http" || !c.Allowed || c.Address != "127.0.0.1" || c.Sent <= 0 || c.Received <= 0 {
			t.Errorf("connection %+v", c)
		}
	})

	// "localhost" is on the list, but it resolves to loopback, which
	// only naming the address itself opens: a name the box's owner
	// does not control must not reach this machine (DNS rebinding).
	t.Run("a name that resolves to loopback", func(t *testing.T) {
		p := port(served)
		r := runPy(t, e, fetch("https://localhost:"+p+"/rebind"), "--timeout", netProgramTimeout,
			"--file", ca, "--allow-net", "localhost:"+p)
		rc := expectEnd(t, r, wire.StatusOK)
		timed(t, r)
		if res := results(rc); !strings.Contains(res["error"], "403") {
			t.Errorf("program printed %q, want a 403 from the proxy", rc.Capture.Stdout)
		}
		nw := netOf(t, r, "localhost:"+p)
		if len(nw.Connections) != 1 || nw.Refused != 1 {
			t.Fatalf("connections %+v", nw)
		}
		if c := nw.Connections[0]; c.Host != "localhost" || c.Allowed || c.Address != "" || !strings.Contains(c.Why, "loopback") {
			t.Errorf("connection %+v", c)
		}
	})

	// Only a proxy-aware client gets anywhere: the box has no route, no
	// DNS, and nothing but the proxy on its loopback.
	t.Run("UDP, a socket of its own and DNS fail at once", func(t *testing.T) {
		p := port(served)
		r := runPy(t, e, `
import socket, time
def probe(name, f):
    t = time.monotonic()
    try:
        f(); out = "ok"
    except Exception as e:
        out = type(e).__name__
    print("RESULT", name, out, "%.1f" % (time.monotonic() - t))
def tcp():
    s = socket.socket(); s.settimeout(10); s.connect(("1.1.1.1", 53))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(10); s.sendto(b"x", ("1.1.1.1", 53)); s.recv(1)
probe("tcp", tcp)
probe("udp", udp)
probe("dns", lambda: socket.getaddrinfo("example.com", 443))
`, "--timeout", netProgramTimeout, "--allow-net", "127.0.0.1:"+p+",1.1.1.1:53")
		rc := expectEnd(t, r, wire.StatusOK)
		timed(t, r)
		res := results(rc)
		for _, name := range []string{"tcp", "udp", "dns"} {
			f := strings.Fields(res[name])
			if len(f) != 2 || f[0] == "ok" || f[0] == "TimeoutError" {
				t.Errorf("%s: %q, want an error at once", name, res[name])
				continue
			}
			if s, _ := strconv.ParseFloat(f[1], 64); s > 2 {
				t.Errorf("%s: failed after %s s, want at once", name, f[1])
			}
		}
		t.Logf("probes: %q", rc.Capture.Stdout)
		if nw := netOf(t, r, "1.1.1.1:53,127.0.0.1:"+p); len(nw.Connections) != 0 {
			t.Errorf("connections %+v", nw.Connections)
		}
	})

	t.Run("without --allow-net", func(t *testing.T) {
		r := runPy(t, e, `
import os, socket
print("RESULT env", sorted(k for k in os.environ if "proxy" in k.lower()))
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=5); print("RESULT proxy connected")
except Exception as e:
    print("RESULT proxy", type(e).__name__)
`, "--timeout", netProgramTimeout)
		rc := expectEnd(t, r, wire.StatusOK)
		timed(t, r)
		if res := results(rc); res["env"] != "[]" || res["proxy"] != "ConnectionRefusedError" {
			t.Errorf("program printed %q", rc.Capture.Stdout)
		}
		if rc.Network != nil || strings.Contains(r.raw, `"network"`) || strings.Contains(r.stderr, "network:") {
			t.Errorf("a network section without --allow-net: %+v\n%s", rc.Network, r.stderr)
		}
	})

	// A program that opens 300 connections gets 256 (the bound of a
	// run, MaxNetStreams, and of its gate): the rest are closed at once
	// in the box, and the run ends as any other.
	t.Run("300 connections", func(t *testing.T) {
		p := port(plain)
		r := runPy(t, e, fmt.Sprintf(`
import socket, collections
from concurrent.futures import ThreadPoolExecutor
req = b"GET http://127.0.0.1:%[1]s/many HTTP/1.1\r\nHost: 127.0.0.1:%[1]s\r\n\r\n"
def one(i):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        s.sendall(req)
        got = b""
        while True:
            b = s.recv(65536)
            if not b: break
            got += b
        s.close()
        return got.split(b" ", 2)[1].decode() if got.startswith(b"HTTP/") else "closed"
    except Exception as e:
        return type(e).__name__
with ThreadPoolExecutor(16) as ex:
    n = collections.Counter(ex.map(one, range(300)))
print("RESULT outcomes", " ".join("%%s=%%d" %% kv for kv in sorted(n.items())))
print("RESULT served", n["200"])
`, p), "--timeout", "30", "--allow-net", "127.0.0.1:"+p)
		rc := expectEnd(t, r, wire.StatusOK)
		timed(t, r)
		res := results(rc)
		t.Logf("outcomes: %s", res["outcomes"])
		nw := netOf(t, r, "127.0.0.1:"+p)
		total := len(nw.Connections) + nw.NotListed
		if len(nw.Connections) != wire.MaxNetListed || total != wire.MaxNetStreams {
			t.Errorf("%d connections listed, %d not: want %d of %d in all", len(nw.Connections), nw.NotListed, wire.MaxNetListed, wire.MaxNetStreams)
		}
		if served, _ := strconv.Atoi(res["served"]); served != total-nw.Refused || served > wire.MaxNetStreams || served < wire.MaxNetStreams/2 {
			t.Errorf("%d served in the box, %d connections (%d refused) in the receipt", served, total, nw.Refused)
		}
		if !strings.Contains(r.stderr, fmt.Sprintf("pybox: network: %d connections (", wire.MaxNetStreams)) {
			t.Errorf("summary: %s", r.stderr)
		}
	})
}
