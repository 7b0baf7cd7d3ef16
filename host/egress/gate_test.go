package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// served is a connection from a box to a gate, from the box's side.
type served struct {
	box  net.Conn
	done chan Record
}

// serve starts g on one connection of a box.
func serve(ctx context.Context, g *Gate) *served {
	box, gate := net.Pipe()
	s := &served{box: box, done: make(chan Record, 1)}
	go func() { s.done <- g.Serve(ctx, gate) }()
	return s
}

// record waits for the gate to end the connection.
func (s *served) record(t *testing.T) Record {
	t.Helper()
	s.box.Close()
	select {
	case r := <-s.done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the gate did not end the connection")
		return Record{}
	}
}

// names resolves the test's names to this machine's loopback.
func names(m map[string]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		a, ok := m[host]
		if !ok {
			return nil, fmt.Errorf("no such host %s", host)
		}
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
}

func portOf(t *testing.T, url string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(url, "https://"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// connect sends a CONNECT and reads the gate's answer.
func connect(t *testing.T, s *served, hostPort string) *http.Response {
	t.Helper()
	fmt.Fprintf(s.box, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostPort, hostPort)
	resp, err := http.ReadResponse(bufio.NewReader(s.box), nil)
	if err != nil {
		t.Fatalf("the gate's answer to CONNECT %s: %v", hostPort, err)
	}
	return resp
}

// An allowed name is reached over TLS end to end, and its bytes are
// counted; one not on the list, or one that resolves to loopback when
// only the name was listed, is refused before anything is dialled.
func TestGateTLS(t *testing.T) {
	body := strings.Repeat("row,value\n", 5000)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	defer srv.Close()
	port := portOf(t, srv.URL)
	ctx := context.Background()
	var dialled []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	lookup := names(map[string]string{"files.test": "127.0.0.1", "rebind.test": "127.0.0.1"})

	g := &Gate{Allow: mustAllow(t, "files.test:"+port+",rebind.test:"+port+",127.0.0.1"), Lookup: lookup, Dial: dial}
	s := serve(ctx, g)
	if resp := connect(t, s, "files.test:"+port); resp.StatusCode != 200 {
		t.Fatalf("CONNECT to an allowed host: %s", resp.Status)
	}
	tc := tls.Client(s.box, &tls.Config{ServerName: "files.test", InsecureSkipVerify: true})
	fmt.Fprintf(tc, "GET /data.csv HTTP/1.1\r\nHost: files.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if string(got) != body {
		t.Errorf("read %d bytes through the tunnel, want %d", len(got), len(body))
	}
	r := s.record(t)
	if !r.Allowed || r.Kind != "tls" || r.Host != "files.test" || r.Address != "127.0.0.1" || r.Received < int64(len(body)) || r.Sent == 0 || r.Why != "" {
		t.Errorf("record %+v", r)
	}

	g = &Gate{Allow: mustAllow(t, "files.test:"+port+",rebind.test:"+port), Lookup: lookup, Dial: dial}
	dialled = nil
	for _, c := range []struct{ host, want string }{
		{"other.test:" + port, "not on the list"},
		{"files.test:443", "not on the list"},
		{"127.0.0.1:" + port, "not on the list"},
		{"rebind.test:" + port, "loopback"},
	} {
		s := serve(ctx, g)
		resp := connect(t, s, c.host)
		msg, _ := io.ReadAll(resp.Body)
		r := s.record(t)
		if resp.StatusCode != 403 || !strings.Contains(string(msg), c.want) || r.Allowed || !strings.Contains(r.Why, c.want) {
			t.Errorf("CONNECT %s: %s %q, record %+v; want 403 saying %q", c.host, resp.Status, msg, r, c.want)
		}
	}
	if len(dialled) > 0 {
		t.Errorf("refused connections dialled %v", dialled)
	}
}

// Through a CONNECT to an allowed name, a TLS hello naming another host
// is refused before a byte of it reaches the server.
func TestGateSNIMustMatch(t *testing.T) {
	seen := make(chan int, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, c)
		seen <- int(n)
	}()
	port := portOf(t, ln.Addr().String())
	g := &Gate{Allow: mustAllow(t, "files.test:"+port+",127.0.0.1"), Lookup: names(map[string]string{"files.test": "127.0.0.1"})}
	s := serve(context.Background(), g)
	if resp := connect(t, s, "files.test:"+port); resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	tc := tls.Client(s.box, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Error("a handshake naming evil.test went through")
	}
	r := s.record(t)
	if r.Allowed || !strings.Contains(r.Why, "evil.test") {
		t.Errorf("record %+v", r)
	}
	select {
	case n := <-seen:
		t.Errorf("the gate connected to the server for a refused hello (it got %d bytes)", n)
	case <-time.After(300 * time.Millisecond):
	}
}

// A plain-HTTP request to an allowed host:port reaches it in origin form,
// without the proxy's fields, one request a connection.
func TestGatePlainHTTP(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		io.WriteString(w, "plain")
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	g := &Gate{Allow: mustAllow(t, "web.test:"+port+",127.0.0.1"), Lookup: names(map[string]string{"web.test": "127.0.0.1"})}
	s := serve(context.Background(), g)
	fmt.Fprintf(s.box, "GET http://web.test:%s/a?b=1 HTTP/1.1\r\nHost: web.test:%s\r\nProxy-Authorization: Basic eDp5\r\nConnection: keep-alive\r\n\r\n", port, port)
	resp, err := http.ReadResponse(bufio.NewReader(s.box), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	r := s.record(t)
	if resp.StatusCode != 200 || string(b) != "plain" {
		t.Fatalf("%s %q", resp.Status, b)
	}
	if got.URL.String() != "/a?b=1" || got.Host != "web.test:"+port || got.Header.Get("Proxy-Authorization") != "" || !got.Close {
		t.Errorf("the server saw %s %s, host %s, header %v, close %v", got.Method, got.URL, got.Host, got.Header, got.Close)
	}
	if !r.Allowed || r.Kind != "http" || r.Received == 0 {
		t.Errorf("record %+v", r)
	}
}

// A call's bounds: its connections, its bytes, the time to send a head.
func TestGateBounds(t *testing.T) {
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}))
	defer endless.Close()
	port := portOf(t, endless.URL)
	allow := mustAllow(t, "web.test:"+port+",127.0.0.1")
	lookup := names(map[string]string{"web.test": "127.0.0.1"})
	ctx := context.Background()

	g := &Gate{Allow: allow, Lookup: lookup, Limits: Limits{Bytes: 1 << 20}}
	s := serve(ctx, g)
	fmt.Fprintf(s.box, "GET http://web.test:%s/ HTTP/1.1\r\n\r\n", port)
	n, _ := io.Copy(io.Discard, s.box)
	r := s.record(t)
	if n > 1<<20 || !strings.Contains(r.Why, "bound of bytes") || r.Received+r.Sent > 1<<20 {
		t.Errorf("an endless download under a 1 MiB bound: read %d, record %+v", n, r)
	}

	g = &Gate{Allow: allow, Lookup: lookup, Limits: Limits{Connections: 2, Head: 300 * time.Millisecond}}
	var recs []Record
	for range 3 {
		s := serve(ctx, g)
		t0 := time.Now()
		b, _ := io.ReadAll(s.box) // sends nothing: the head's time runs out
		recs = append(recs, s.record(t))
		if time.Since(t0) > 5*time.Second {
			t.Errorf("a box that sends nothing was held %v", time.Since(t0))
		}
		if len(recs) == 3 && !strings.Contains(string(b), "429") {
			t.Errorf("the third connection of a call bound to 2: %q", b)
		}
	}
	if !strings.Contains(recs[0].Why, "within 300ms") || !strings.Contains(recs[2].Why, "2 connections") {
		t.Errorf("records %+v", recs)
	}
	if len(g.Records()) != 3 {
		t.Errorf("the gate recorded %d connections, want 3", len(g.Records()))
	}
}

// A cancelled call closes its connections at once.
func TestGateCancel(t *testing.T) {
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			if _, err := w.Write(make([]byte, 4096)); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}))
	defer endless.Close()
	port := portOf(t, endless.URL)
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gate{Allow: mustAllow(t, "web.test:"+port+",127.0.0.1"), Lookup: names(map[string]string{"web.test": "127.0.0.1"})}
	s := serve(ctx, g)
	fmt.Fprintf(s.box, "GET http://web.test:%s/ HTTP/1.1\r\n\r\n", port)
	go io.Copy(io.Discard, s.box)
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case r := <-s.done:
		if !r.Allowed || r.Received == 0 {
			t.Errorf("record %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the connection outlived its call")
	}
}

// The box's resolver asks the gate whether a name may have an address:
// yes for a name on the list that resolves here to an address the box
// may reach; no, and why, for one not on the list, one that resolves
// only to loopback when the address was not named, and one that does
// not resolve. Each answer is in the records, as kind "dns".
func TestGateResolve(t *testing.T) {
	allow, err := ParseAllow("api.example.com:8443,*.cdn.example.net,rebind.example.org")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{Allow: allow, Lookup: names(map[string]string{
		"api.example.com": "93.184.216.34", "a.cdn.example.net": "93.184.216.35",
		"rebind.example.org": "127.0.0.1", "other.example.com": "93.184.216.36",
	})}
	for _, c := range []struct {
		host   string
		status int
		why    string
	}{
		{"api.example.com", 200, ""},
		{"A.CDN.example.net.", 200, ""},
		{"other.example.com", 403, "not on the list of hosts the user opened"},
		{"cdn.example.net", 403, "not on the list"},
		{"rebind.example.org", 403, "loopback"},
		{"gone.cdn.example.net", 403, "no such host"},
	} {
		s := serve(context.Background(), g)
		fmt.Fprintf(s.box, "RESOLVE %s HTTP/1.1\r\n\r\n", c.host)
		resp, err := http.ReadResponse(bufio.NewReader(s.box), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		rec := s.record(t)
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.why) {
			t.Errorf("%s: %d %q, want %d with %q", c.host, resp.StatusCode, body, c.status, c.why)
		}
		if rec.Kind != "dns" || rec.Allowed != (c.status == 200) || rec.Port != 0 || !strings.Contains(rec.Why, c.why) ||
			c.status == 200 && rec.Address == "" {
			t.Errorf("%s: record %+v", c.host, rec)
		}
	}
	// A RESOLVE carries nothing but the name.
	s := serve(context.Background(), g)
	fmt.Fprintf(s.box, "RESOLVE api.example.com HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(s.box), nil)
	if err != nil || resp.StatusCode != 400 {
		t.Errorf("a RESOLVE with a field: %v %v", resp, err)
	}
	if rec := s.record(t); rec.Allowed || rec.Why == "" {
		t.Errorf("record %+v", rec)
	}
}
