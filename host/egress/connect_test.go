package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func readHead(s string) (*Head, *bufio.Reader, error) {
	r := bufio.NewReader(strings.NewReader(s))
	h, err := ReadRequestHead(r)
	return h, r, err
}

func TestReadRequestHeadConnect(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port int
	}{
		{"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\nUser-Agent: curl/8\r\n\r\n", "api.example.com", 443},
		{"CONNECT API.Example.com.:8443 HTTP/1.1\r\n\r\n", "api.example.com", 8443},
		{"CONNECT api.example.com:443 HTTP/1.0\r\nHost: api.example.com\r\n\r\n", "api.example.com", 443},
		{"CONNECT [2001:DB8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n", "2001:db8::1", 443},
		{"CONNECT 203.0.113.7:22 HTTP/1.1\r\nhost:  203.0.113.7:22 \r\n\r\n", "203.0.113.7", 22},
		{"CONNECT a.example:443 HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "a.example", 443},
	} {
		h, r, err := readHead(tc.in + "\x16\x03\x01")
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if h.Method != "CONNECT" || h.Host != tc.host || h.Port != tc.port {
			t.Errorf("%q: %+v", tc.in, h)
		}
		if h.OriginForm() != nil {
			t.Errorf("%q: a CONNECT has an origin form", tc.in)
		}
		// What follows the head stays in the reader.
		if rest, _ := io.ReadAll(r); string(rest) != "\x16\x03\x01" {
			t.Errorf("%q: after the head: %q", tc.in, rest)
		}
	}
}

func TestReadRequestHeadHTTP(t *testing.T) {
	in := "POST http://API.example.com:8080/v1/items?x=1&y=%20 HTTP/1.1\r\n" +
		"Host: api.example.com:8080\r\n" +
		"Proxy-Authorization: Basic eDp5\r\n" +
		"Content-Length: 4\r\n" +
		"proxy-connection: keep-alive\r\n" +
		"X-Empty:\r\n" +
		"Proxy-Foo: bar\r\n" +
		"Accept: */*\r\n\r\nbody"
	h, r, err := readHead(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &Head{
		Method: "POST", Target: "http://API.example.com:8080/v1/items?x=1&y=%20", Proto: "HTTP/1.1",
		Host: "api.example.com", Port: 8080,
		Header: []Field{
			{"Host", "api.example.com:8080"}, {"Proxy-Authorization", "Basic eDp5"}, {"Content-Length", "4"},
			{"proxy-connection", "keep-alive"}, {"X-Empty", ""}, {"Proxy-Foo", "bar"}, {"Accept", "*/*"},
		},
		path: "/v1/items?x=1&y=%20",
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got %+v\nwant %+v", h, want)
	}
	origin := "POST /v1/items?x=1&y=%20 HTTP/1.1\r\nHost: api.example.com:8080\r\nContent-Length: 4\r\nX-Empty: \r\nAccept: */*\r\nConnection: close\r\n\r\n"
	if got := string(h.OriginForm()); got != origin {
		t.Errorf("OriginForm() = %q\nwant %q", got, origin)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "body" {
		t.Errorf("after the head: %q", rest)
	}

	for _, tc := range []struct{ in, origin string }{
		{"GET http://example.com HTTP/1.1\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n", "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"},
		{"GET http://example.com HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"},
		{"GET HTTP://example.com?q HTTP/1.0\r\nAccept: x\r\n\r\n", "GET /?q HTTP/1.0\r\nHost: example.com\r\nAccept: x\r\nConnection: close\r\n\r\n"},
		{"HEAD http://[2001:db8::1]:8080/ HTTP/1.1\r\n\r\n", "HEAD / HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\nConnection: close\r\n\r\n"},
		{"DELETE http://example.com:80/a HTTP/1.1\r\nHost: EXAMPLE.com\r\n\r\n", "DELETE /a HTTP/1.1\r\nHost: EXAMPLE.com\r\nConnection: close\r\n\r\n"},
		{"PUT http://example.com/a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "PUT /a HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"},
	} {
		h, _, err := readHead(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got := string(h.OriginForm()); got != tc.origin {
			t.Errorf("%q: OriginForm() = %q, want %q", tc.in, got, tc.origin)
		}
	}
}

func TestReadRequestHeadRefuses(t *testing.T) {
	big := "CONNECT a.example:443 HTTP/1.1\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 17) + "\r\n"
	fields := "CONNECT a.example:443 HTTP/1.1\r\n" + strings.Repeat("X-A: b\r\n", 65) + "\r\n"
	for _, tc := range []struct {
		in   string
		kind error
		want string
	}{
		{"CONNECT a.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n", ErrBadRequest, "names another host or port than the target"},
		{"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:8443\r\n\r\n", ErrBadRequest, "names another host or port"},
		{"CONNECT a.example:8443 HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrBadRequest, "names another host or port"},
		{"GET http://a.example/ HTTP/1.1\r\nHost: a.example:8080\r\n\r\n", ErrBadRequest, "names another host or port"},
		{"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nhost: a.example:443\r\n\r\n", ErrBadRequest, "2 Host fields"},
		{"CONNECT a.example:443 HTTP/1.1\r\nHost: a_b:443\r\n\r\n", ErrBadRequest, "the Host field"},
		{big, ErrHeadTooLarge, "longer than 16384 bytes"},
		{fields, ErrHeadTooLarge, "more than 64 header fields"},
		{"GET http://a.example/" + strings.Repeat("a", 8200) + " HTTP/1.1\r\n\r\n", ErrURITooLong, "longer than 8192 bytes"},
		{"CONNECT a.example:443 HTTP/1.1\n\n", ErrBadRequest, "bare LF"},
		{"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\n\r\n", ErrBadRequest, "bare LF"},
		{"CONNECT a.example:443 HTTP/1.1\r\n\n", ErrBadRequest, "bare LF"},
		{"CONNECT a.example:443\r HTTP/1.1\r\n\r\n", ErrBadRequest, "CR inside"},
		{"CONNECT a.example:443 HTTP/1.1\r\nX-A: b\rc\r\n\r\n", ErrBadRequest, "CR inside"},
		{"CONNECT a.example:443 HTTP/1.1\r\nX-A: b\r\n c\r\n\r\n", ErrBadRequest, "folded"},
		{"CONNECT a.example:443 HTTP/1.1\r\n\tX-A: b\r\n\r\n", ErrBadRequest, "folded"},
		{"CONNECT a.example:443 HTTP/1.1\r\nX-A : b\r\n\r\n", ErrBadRequest, "is not a token"},
		{"CONNECT a.example:443 HTTP/1.1\r\nX(A): b\r\n\r\n", ErrBadRequest, "is not a token"},
		{"CONNECT a.example:443 HTTP/1.1\r\n: b\r\n\r\n", ErrBadRequest, "is not a token"},
		{"CONNECT a.example:443 HTTP/1.1\r\nX-A b\r\n\r\n", ErrBadRequest, "has no colon"},
		{"CONNECT a.example:443 HTTP/1.1\r\nX-A: b\x00c\r\n\r\n", ErrBadRequest, "control character"},
		{"CONNECT a.example:443 HTTP/1.1\r\nX-A: \x7f\r\n\r\n", ErrBadRequest, "control character"},
		{"CONNECT a.example HTTP/1.1\r\n\r\n", ErrBadRequest, "names no port"},
		{"CONNECT a.example: HTTP/1.1\r\n\r\n", ErrBadRequest, "not followed by a port"},
		{"CONNECT a.example:0 HTTP/1.1\r\n\r\n", ErrBadRequest, "not a number from 1 to 65535"},
		{"CONNECT a.example:65536 HTTP/1.1\r\n\r\n", ErrBadRequest, "not a number from 1 to 65535"},
		{"CONNECT user@a.example:443 HTTP/1.1\r\n\r\n", ErrBadRequest, "userinfo"},
		{"CONNECT http://a.example:443/ HTTP/1.1\r\n\r\n", ErrBadRequest, "is not host:port"},
		{"CONNECT 2001:db8::1:443 HTTP/1.1\r\n\r\n", ErrBadRequest, "more than one :"},
		{"CONNECT [2001:db8::1%eth0]:443 HTTP/1.1\r\n\r\n", ErrBadRequest, "zone"},
		{"CONNECT [203.0.113.7]:443 HTTP/1.1\r\n\r\n", ErrBadRequest, "not an IPv6 address"},
		{"CONNECT a.example:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", ErrBadRequest, "a CONNECT request has a body"},
		{"CONNECT a.example:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\n", ErrBadRequest, "a CONNECT request has a body"},
		{"CONNECT a.example:443 HTTP/2.0\r\n\r\n", ErrBadRequest, "not HTTP/1.1 or HTTP/1.0"},
		{"CONNECT a.example:443 http/1.1\r\n\r\n", ErrBadRequest, "not HTTP/1.1 or HTTP/1.0"},
		{"CONNECT  a.example:443 HTTP/1.1\r\n\r\n", ErrBadRequest, "single spaces"},
		{"CONNECT a.example:443\r\n\r\n", ErrBadRequest, "single spaces"},
		{"\r\nCONNECT a.example:443 HTTP/1.1\r\n\r\n", ErrBadRequest, "single spaces"},
		{"CONNECT a.éxample:443 HTTP/1.1\r\n\r\n", ErrBadRequest, "printable ASCII"},
		{"connect a.example:443 HTTP/1.1\r\n\r\n", ErrMethod, `the method "connect" is not allowed`},
		{"TRACE http://a.example/ HTTP/1.1\r\n\r\n", ErrMethod, "use CONNECT host:port for HTTPS, or GET, HEAD"},
		{"G(T http://a.example/ HTTP/1.1\r\n\r\n", ErrBadRequest, "not a token"},
		{"GET https://a.example/ HTTP/1.1\r\n\r\n", ErrBadRequest, "an https:// URL: a client goes to HTTPS through the proxy with CONNECT host:443"},
		{"GET /index.html HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrBadRequest, "is a path"},
		{"GET ftp://a.example/ HTTP/1.1\r\n\r\n", ErrBadRequest, "is not an http:// URL"},
		{"GET http://u:p@a.example/ HTTP/1.1\r\n\r\n", ErrBadRequest, "userinfo"},
		{"GET http:///x HTTP/1.1\r\n\r\n", ErrBadRequest, "names no host"},
		{"GET http://a.example/#x HTTP/1.1\r\n\r\n", ErrBadRequest, "fragment"},
		{"GET http://a.example:/ HTTP/1.1\r\n\r\n", ErrBadRequest, "not followed by a port"},
		{"GET http://a%2eexample/ HTTP/1.1\r\n\r\n", ErrBadRequest, "has '%'"},
		{"GET http://127.1/ HTTP/1.1\r\n\r\n", ErrBadRequest, "looks like an IP address"},
		{"POST http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", ErrBadRequest, "2 Content-Length fields"},
		{"POST http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", ErrBadRequest, "both Content-Length and Transfer-Encoding"},
		{"POST http://a.example/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", ErrBadRequest, "not a number of bytes"},
		{"POST http://a.example/ HTTP/1.1\r\nContent-Length: 1,1\r\n\r\n", ErrBadRequest, "not a number of bytes"},
		{"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", ErrBadRequest, "does not end in chunked"},
		{"POST http://a.example/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", ErrBadRequest, "an HTTP/1.0 request has Transfer-Encoding"},
	} {
		_, _, err := readHead(tc.in)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.70q: %v; want %v, %q", tc.in, err, tc.kind, tc.want)
		}
	}
}

func TestReadRequestHeadBounds(t *testing.T) {
	// A head of exactly 16 KiB is read; one byte more is refused, and a
	// head of 17 KiB too.
	head := func(n int) string {
		start := "CONNECT a.example:443 HTTP/1.1\r\nX-Pad: "
		return start + strings.Repeat("p", n-len(start)-4) + "\r\n\r\n"
	}
	for _, n := range []int{16 << 10, 16<<10 + 1, 17 << 10} {
		s := head(n)
		if len(s) != n {
			t.Fatalf("head(%d) is %d bytes", n, len(s))
		}
		_, _, err := readHead(s)
		if n == 16<<10 && err != nil {
			t.Errorf("a head of %d bytes: %v", n, err)
		}
		if n > 16<<10 && !errors.Is(err, ErrHeadTooLarge) {
			t.Errorf("a head of %d bytes: %v", n, err)
		}
	}
	// A request line of 8 KiB is read, one byte more is refused.
	line := func(n int) string {
		start := "GET http://a.example/"
		return start + strings.Repeat("a", n-len(start)-len(" HTTP/1.1")) + " HTTP/1.1"
	}
	if _, _, err := readHead(line(8<<10) + "\r\n\r\n"); err != nil {
		t.Errorf("a request line of 8 KiB: %v", err)
	}
	if _, _, err := readHead(line(8<<10+1) + "\r\n\r\n"); !errors.Is(err, ErrURITooLong) {
		t.Errorf("a request line of 8 KiB and a byte: %v", err)
	}
	// 64 fields are read.
	if _, _, err := readHead("CONNECT a.example:443 HTTP/1.1\r\n" + strings.Repeat("X-A: b\r\n", 64) + "\r\n"); err != nil {
		t.Errorf("64 fields: %v", err)
	}
	// An endless line is refused after a bounded read.
	src := &countingReader{r: io.MultiReader(strings.NewReader("CONNECT "), endless('a'))}
	if _, err := ReadRequestHead(bufio.NewReader(src)); !errors.Is(err, ErrURITooLong) || src.n > 16<<10 {
		t.Errorf("an endless request line: %v after %d bytes", err, src.n)
	}
	src = &countingReader{r: io.MultiReader(strings.NewReader("CONNECT a.example:443 HTTP/1.1\r\nX: "), endless('a'))}
	if _, err := ReadRequestHead(bufio.NewReader(src)); !errors.Is(err, ErrHeadTooLarge) || src.n > 24<<10 {
		t.Errorf("an endless field: %v after %d bytes", err, src.n)
	}
}

func TestReadRequestHeadEnds(t *testing.T) {
	if _, _, err := readHead(""); err != io.EOF {
		t.Errorf("nothing: %v, want io.EOF", err)
	}
	full := "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n"
	for i := 1; i < len(full); i++ {
		_, _, err := readHead(full[:i])
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: %v", i, err)
		}
	}
	// A byte at a time, as a slow client sends it.
	h, err := ReadRequestHead(bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(full)), 16))
	if err != nil || h.Host != "a.example" {
		t.Errorf("a byte at a time: %+v, %v", h, err)
	}
	// An error of the stream is given as it is.
	boom := errors.New("boom")
	if _, err := ReadRequestHead(bufio.NewReader(iotest.ErrReader(boom))); err != boom {
		t.Errorf("a failing stream: %v", err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// endless is a reader of c, forever.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

// FuzzReadRequestHead: whatever a box sends, ReadRequestHead refuses it
// or reads a head within its bounds, with a canonical host that Allows
// reads as the same host, and for plain HTTP an origin form that is a
// well-formed head without the proxy's fields.
func FuzzReadRequestHead(f *testing.F) {
	for _, s := range []string{
		"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n",
		"CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n",
		"GET http://a.example:8080/x?y HTTP/1.1\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: x\r\n\r\nbody",
		"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET https://a.example/ HTTP/1.1\r\n\r\n", "CONNECT a.example:443 HTTP/1.1\n\n", "GET / HTTP/1.1\r\n\r\n",
		"CONNECT a:1 HTTP/1.0\r\nX: \t\r\n\r\n", "RESOLVE api.example.com HTTP/1.1\r\n\r\n", "RESOLVE [::1] HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		src := bytes.NewReader(in)
		h, err := ReadRequestHead(bufio.NewReader(src))
		if err != nil {
			if h != nil {
				t.Fatal("a head with an error")
			}
			return
		}
		read := len(in) - src.Len()
		if read > maxHead+4096 || len(h.Header) > maxFields {
			t.Fatalf("read %d bytes, %d fields", read, len(h.Header))
		}
		canon, addr, err := canonicalHost(h.Host)
		if err != nil || canon != h.Host {
			t.Fatalf("host %q is not canonical (%q, %v)", h.Host, canon, err)
		}
		if h.Method == "RESOLVE" {
			if h.Port != 0 || len(h.Header) > 0 || h.OriginForm() != nil {
				t.Fatalf("a RESOLVE with port %d, fields %v", h.Port, h.Header)
			}
			return
		}
		if h.Port < 1 || h.Port > 65535 {
			t.Fatalf("port %d", h.Port)
		}
		one := Allow{entries: []Entry{{Host: h.Host, Literal: addr.IsValid(), Ports: []int{h.Port}}}}
		if _, ok := one.Allows(h.Host, h.Port); !ok {
			t.Fatalf("host %q port %d is not allowed by its own entry %s", h.Host, h.Port, one)
		}
		origin := h.OriginForm()
		if h.Method == "CONNECT" {
			if origin != nil {
				t.Fatal("a CONNECT with an origin form")
			}
			return
		}
		if !bytes.HasSuffix(origin, []byte("\r\n\r\n")) || bytes.Contains(bytes.ToLower(origin), []byte("\r\nproxy-")) {
			t.Fatalf("origin form %q", origin)
		}
		if n := bytes.Count(bytes.ToLower(origin), []byte("\r\nhost:")); n != 1 {
			t.Fatalf("origin form %q has %d Host fields", origin, n)
		}
		line, _, _ := strings.Cut(string(origin), "\r\n")
		if parts := strings.Split(line, " "); len(parts) != 3 || !strings.HasPrefix(parts[1], "/") {
			t.Fatalf("origin form's request line %q", line)
		}
	})
}
