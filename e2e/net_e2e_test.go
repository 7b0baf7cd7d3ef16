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
	"sync/atomic"
	"testing"
	"time"

	"pybox/shared/wire"
)

// netProgramTimeout is each run's wall timeout: under TCG, importing ssl
// and a handshake take a while.
const netProgramTimeout = "20"

// netManyTimeout is the wall timeout of the run that opens 1000
// connections, 256 of them served: about 6 s under TCG, and 30 s is the
// most a run may have.
const netManyTimeout = "30"

// netEndlessTimeout is the wall timeout of the run that reads a stream
// without end; netClosedWithin is how soon after pybox returns the
// stream's server must have seen its connection closed (it is cut when
// the run ends, before pybox returns; the rest is slack for TCG).
const (
	netEndlessTimeout = "6"
	netClosedWithin   = 10 * time.Second
)

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
	// The test servers' certificate (its own CA, for 127.0.0.1 and
	// example.com) goes to the box as /tmp/input/ca.pem.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: served.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("served", func(t *testing.T) {
		p := portOf(served)
		r := runPy(t, e, netFetch("https://127.0.0.1:"+p+"/served"), "--timeout", netProgramTimeout,
			"--file", ca, "--allow-net", "127.0.0.1:"+p)
		rc := expectEnd(t, r, wire.StatusOK)
		logNetRun(t, r)
		res := results(rc.Capture.Stdout)
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
		if !strings.Contains(r.stderr, "pybox: network: 1 connections (0 refused), ") {
			t.Errorf("summary: %s", r.stderr)
		}
	})

	t.Run("a host not on the list", func(t *testing.T) {
		p, q := portOf(served), portOf(other)
		r, nw := netFetchRefused(t, e, "https://127.0.0.1:"+q+"/other", ca, "127.0.0.1:"+p)
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
		p := portOf(plain)
		r := runPy(t, e, netFetch("http://127.0.0.1:"+p+"/plain"), "--timeout", netProgramTimeout,
			"--file", ca, "--allow-net", "127.0.0.1:"+p)
		rc := expectEnd(t, r, wire.StatusOK)
		logNetRun(t, r)
		if res := results(rc.Capture.Stdout); res["status"] != "200" || res["body"] != "hello from the host: GET /plain" {
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
		p := portOf(served)
		_, nw := netFetchRefused(t, e, "https://localhost:"+p+"/rebind", ca, "localhost:"+p)
		if len(nw.Connections) != 1 || nw.Refused != 1 {
			t.Fatalf("connections %+v", nw)
		}
		if c := nw.Connections[0]; c.Host != "localhost" || c.Allowed || c.Address != "" || !strings.Contains(c.Why, "loopback") {
			t.Errorf("connection %+v", c)
		}
	})

	// The box has no route but its loopback: a socket of its own to an
	// address, listed or not, and UDP go nowhere, at once. Its resolver
	// asks the host, which refuses a name not on the list, at once, and
	// records the lookup.
	t.Run("UDP, a socket of its own and DNS fail at once", func(t *testing.T) {
		p := portOf(served)
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
		logNetRun(t, r)
		res := results(rc.Capture.Stdout)
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
		nw := netOf(t, r, "1.1.1.1:53,127.0.0.1:"+p)
		if len(nw.Connections) != 1 || nw.Refused != 1 {
			t.Fatalf("connections %+v, want the lookup alone", nw.Connections)
		}
		if c := nw.Connections[0]; c.Kind != "dns" || c.Host != "example.com" || c.Allowed || c.Address != "" ||
			!strings.Contains(c.Why, "not on the list") {
			t.Errorf("the lookup: %+v", c)
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
		logNetRun(t, r)
		if res := results(rc.Capture.Stdout); res["env"] != "[]" || res["proxy"] != "ConnectionRefusedError" {
			t.Errorf("program printed %q", rc.Capture.Stdout)
		}
		if rc.Network != nil || strings.Contains(r.raw, `"network"`) || strings.Contains(r.stderr, "network:") {
			t.Errorf("a network section without --allow-net: %+v\n%s", rc.Network, r.stderr)
		}
	})

	t.Run("a TLS name that is not the CONNECT's", func(t *testing.T) { testNetTLSName(t, e, ca) })
	t.Run("a redirect to a host not on the list", func(t *testing.T) { testNetRedirect(t, e, ca) })
	t.Run("a raw socket", func(t *testing.T) { testNetRawSocket(t, e, portOf(plain)) })
	t.Run("1000 connections", func(t *testing.T) { testNetManyConnections(t, e, portOf(plain)) })
	t.Run("a stream without end", func(t *testing.T) { testNetEndless(t, e) })
}

// portOf is the port a test server listens on.
func portOf(s *httptest.Server) string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

// netFetch is a program that GETs url through urllib (which takes the
// proxy from the environment) and prints the body or the error.
func netFetch(url string) string {
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

// netOf checks the network section every run with --allow-net has.
func netOf(t *testing.T, r *boxRun, allowed string) *wire.Network {
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

// connTo is the receipt's connection to port, or nil.
func connTo(nw *wire.Network, port string) *wire.NetConnection {
	for i, c := range nw.Connections {
		if strconv.Itoa(c.Port) == port {
			return &nw.Connections[i]
		}
	}
	return nil
}

// netFetchRefused runs netFetch(url) with the CA file ca and the list
// allow, checks that the program got the proxy's 403, and gives the run
// and its network section.
func netFetchRefused(t *testing.T, e *vmEnv, url, ca, allow string) (*boxRun, *wire.Network) {
	t.Helper()
	r := runPy(t, e, netFetch(url), "--timeout", netProgramTimeout, "--file", ca, "--allow-net", allow)
	rc := expectEnd(t, r, wire.StatusOK)
	logNetRun(t, r)
	if res := results(rc.Capture.Stdout); !strings.Contains(res["error"], "403") {
		t.Errorf("program printed %q, want a 403 from the proxy", rc.Capture.Stdout)
	}
	return r, netOf(t, r, allow)
}

func logNetRun(t *testing.T, r *boxRun) {
	t.Logf("pybox run: %v (wall %d ms in the box)", r.elapsed.Round(time.Millisecond), r.Receipt.WallMS)
}

// countedTLSServer is a TLS test server that counts the connections
// made to it: one the gate refuses must never reach it.
func countedTLSServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			n.Add(1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s, &n
}

// A tunnel to a listed address whose TLS names another server is
// refused before anything is dialled: the name in the ClientHello is
// what the server would answer for, so it must be the CONNECT's host.
// (httptest's certificate is good for example.com too: only the gate
// stands in the way.)
func testNetTLSName(t *testing.T, e *vmEnv, ca string) {
	s, reached := countedTLSServer(t, http.NotFoundHandler())
	p := portOf(s)
	r := runPy(t, e, fmt.Sprintf(`
import socket, ssl, time
ctx = ssl.create_default_context(cafile="/tmp/input/ca.pem")
s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
s.sendall(b"CONNECT 127.0.0.1:%[1]s HTTP/1.1\r\nHost: 127.0.0.1:%[1]s\r\n\r\n")
head = b""
while not head.endswith(b"\r\n\r\n"):
    b = s.recv(1)  # a byte at a time: the TLS that follows is the handshake's
    if not b:
        break
    head += b
print("RESULT connect", head.split(b"\r\n")[0].decode())
t = time.monotonic()
try:
    tls = ctx.wrap_socket(s, server_hostname="example.com")
    print("RESULT handshake ok", tls.version())
except Exception as e:
    print("RESULT handshake", type(e).__name__, "%%.1f" %% (time.monotonic() - t))
`, p), "--timeout", netProgramTimeout, "--file", ca, "--allow-net", "127.0.0.1:"+p)
	rc := expectEnd(t, r, wire.StatusOK)
	logNetRun(t, r)
	res := results(rc.Capture.Stdout)
	t.Logf("program: %q", rc.Capture.Stdout)
	if res["connect"] != "HTTP/1.1 200 Connection established" {
		t.Errorf("the CONNECT got %q, want its 200", res["connect"])
	}
	if f := strings.Fields(res["handshake"]); len(f) != 2 || f[0] == "ok" || f[0] == "TimeoutError" {
		t.Errorf("handshake: %q, want it to fail at once", res["handshake"])
	} else if sec, _ := strconv.ParseFloat(f[1], 64); sec > 5 {
		t.Errorf("the handshake failed after %s s, want at once", f[1])
	}
	nw := netOf(t, r, "127.0.0.1:"+p)
	if len(nw.Connections) != 1 || nw.Refused != 1 {
		t.Fatalf("connections %+v", nw)
	}
	c := nw.Connections[0]
	if c.Host != "127.0.0.1" || strconv.Itoa(c.Port) != p || c.Kind != "tls" || c.Allowed || c.Address != "" ||
		!strings.Contains(c.Why, "TLS server name example.com") {
		t.Errorf("connection %+v", c)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the server had %d connections: a refused tunnel reached it", n)
	}
	if !strings.Contains(r.stderr, "pybox: refused: 127.0.0.1:"+p+": the TLS server name example.com") {
		t.Errorf("summary: %s", r.stderr)
	}
}

// A listed server that redirects elsewhere does not take the program
// elsewhere: urllib follows the 302 to a host not on the list, and the
// proxy refuses that tunnel as any other.
func testNetRedirect(t *testing.T, e *vmEnv, ca string) {
	elsewhere, reached := countedTLSServer(t, http.NotFoundHandler())
	moved := httptest.NewTLSServer(http.RedirectHandler(elsewhere.URL+"/elsewhere", http.StatusFound))
	defer moved.Close()
	p, q := portOf(moved), portOf(elsewhere)
	r, nw := netFetchRefused(t, e, "https://127.0.0.1:"+p+"/moved", ca, "127.0.0.1:"+p)
	if len(nw.Connections) != 2 || nw.Refused != 1 {
		t.Fatalf("connections %+v", nw)
	}
	// The receipt lists connections in the order they ended, which for
	// two that end together is either: each is found by its port.
	if c := connTo(nw, p); c == nil || c.Kind != "tls" || !c.Allowed || c.Address != "127.0.0.1" || c.Received <= 0 {
		t.Errorf("the redirecting server's connection: %+v", c)
	}
	if c := connTo(nw, q); c == nil || c.Kind != "tls" || c.Allowed || c.Address != "" || !strings.Contains(c.Why, "not on the list") {
		t.Errorf("the redirect's connection: %+v", c)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the server redirected to had %d connections", n)
	}
	if !strings.Contains(r.stderr, "pybox: network: 2 connections (1 refused), ") ||
		!strings.Contains(r.stderr, "pybox: refused: 127.0.0.1:"+q+": ") {
		t.Errorf("summary: %s", r.stderr)
	}
}

// Raw sockets (ICMP, or a link layer's frames) are refused at their
// creation: the box's ways out are its proxy and its listeners, each of
// which the host checks, and the program learns that at once rather
// than by a timeout.
func testNetRawSocket(t *testing.T, e *vmEnv, p string) {
	r := runPy(t, e, `
import socket, time
def probe(name, f):
    t = time.monotonic()
    try:
        f(); out = "ok"
    except Exception as e:
        out = type(e).__name__
    print("RESULT", name, out, "%.1f" % (time.monotonic() - t))
probe("icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
probe("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003)))
`, "--timeout", netProgramTimeout, "--allow-net", "127.0.0.1:"+p)
	rc := expectEnd(t, r, wire.StatusOK)
	logNetRun(t, r)
	res := results(rc.Capture.Stdout)
	for _, name := range []string{"icmp", "packet"} {
		f := strings.Fields(res[name])
		if len(f) != 2 || f[0] == "ok" {
			t.Errorf("%s: %q, want an error (PermissionError) at once", name, res[name])
			continue
		}
		if sec, _ := strconv.ParseFloat(f[1], 64); sec > 2 {
			t.Errorf("%s: failed after %s s, want at once", name, f[1])
		}
	}
	if nw := netOf(t, r, "127.0.0.1:"+p); len(nw.Connections) != 0 || nw.NotListed != 0 {
		t.Errorf("connections %+v", nw)
	}
}

// A program that opens 1000 connections is stopped at its bounds: the
// proxy in its box takes 256 (MaxNetStreams, the gate's bound too), at
// most 16 open at once, and then refuses the rest at once; the receipt
// lists the first MaxNetListed and counts the others, and the run ends
// as any other.
func testNetManyConnections(t *testing.T, e *vmEnv, p string) {
	const tries = 1000
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
    n = collections.Counter(ex.map(one, range(%[2]d)))
print("RESULT outcomes", " ".join("%%s=%%d" %% kv for kv in sorted(n.items())))
`, p, tries), "--timeout", netManyTimeout, "--allow-net", "127.0.0.1:"+p)
	rc := expectEnd(t, r, wire.StatusOK)
	logNetRun(t, r)
	res := results(rc.Capture.Stdout)
	t.Logf("outcomes: %s", res["outcomes"])
	outcomes, all := map[string]int{}, 0
	for _, kv := range strings.Fields(res["outcomes"]) {
		k, v, _ := strings.Cut(kv, "=")
		outcomes[k], _ = strconv.Atoi(v)
		all += outcomes[k]
	}
	// A connection past the bounds fails at once: none waits for its
	// timeout.
	if all != tries || outcomes["TimeoutError"] != 0 {
		t.Errorf("outcomes %q: want %d, none timed out", res["outcomes"], tries)
	}
	nw := netOf(t, r, "127.0.0.1:"+p)
	total := len(nw.Connections) + nw.NotListed
	if len(nw.Connections) != wire.MaxNetListed || total != wire.MaxNetStreams {
		t.Errorf("%d connections listed, %d not: want %d of %d in all", len(nw.Connections), nw.NotListed, wire.MaxNetListed, wire.MaxNetStreams)
	}
	if served := outcomes["200"]; served != total-nw.Refused || served > wire.MaxNetStreams || served < wire.MaxNetStreams/2 {
		t.Errorf("%d served in the box, %d connections (%d refused) in the receipt", served, total, nw.Refused)
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("pybox: network: %d connections (", wire.MaxNetStreams)) {
		t.Errorf("summary: %s", r.stderr)
	}
}

// A run's timeout ends its program and closes its connections with it:
// a server that streams for ever sees its client go within moments of
// the run's end, not when its own write times out.
func testNetEndless(t *testing.T, e *vmEnv) {
	ended := make(chan time.Time, 1)
	chunk := []byte(strings.Repeat("an endless stream ", 1<<10))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			select {
			case ended <- time.Now():
			default:
			}
		}()
		rc := http.NewResponseController(w)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}))
	// A handler still streaming would hold Close for ever: its
	// connections are cut first.
	defer s.Close()
	defer s.CloseClientConnections()
	p := portOf(s)
	r := runPy(t, e, fmt.Sprintf(`
import urllib.request
got = 0
with urllib.request.urlopen("http://127.0.0.1:%s/endless", timeout=30) as r:
    while True:
        b = r.read(1 << 16)
        if not b:
            break
        if got == 0:
            print("RESULT reading", r.status, flush=True)
        got += len(b)
print("RESULT ended", got)
`, p), "--timeout", netEndlessTimeout, "--allow-net", "127.0.0.1:"+p)
	over := time.Now()
	rc := expectEnd(t, r, wire.StatusTimeout)
	logNetRun(t, r)
	if res := results(rc.Capture.Stdout); res["reading"] != "200" || res["ended"] != "" {
		t.Errorf("program printed %q, want it reading when the run ended", rc.Capture.Stdout)
	}
	nw := netOf(t, r, "127.0.0.1:"+p)
	if len(nw.Connections) != 1 || nw.Refused != 0 {
		t.Fatalf("connections %+v", nw)
	}
	c := nw.Connections[0]
	// The run's end cut it: the receipt says so, as it says when a
	// bound did.
	if c.Kind != "http" || !c.Allowed || c.Address != "127.0.0.1" || c.Received <= 0 || !strings.Contains(c.Why, "run ended") {
		t.Errorf("connection %+v", c)
	}
	t.Logf("connection: %d bytes received in %d ms (%s)", c.Received, c.Millis, c.Why)
	select {
	case at := <-ended:
		if d := at.Sub(over).Round(time.Millisecond); d < 0 {
			t.Logf("the server's handler ended %v before pybox returned", -d)
		} else {
			t.Logf("the server's handler ended %v after pybox returned", d)
		}
	case <-time.After(netClosedWithin):
		t.Errorf("the server still streams %v after the run's end: its connection was not closed", netClosedWithin)
	}
}
