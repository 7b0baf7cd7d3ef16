//go:build linux

package box

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// query is a DNS query for name of type qtype, as a C library sends it.
func query(id uint16, name string, qtype uint16) []byte {
	p := binary.BigEndian.AppendUint16(nil, id)
	p = append(p, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD; one question
	for _, l := range strings.Split(name, ".") {
		p = append(p, byte(len(l)))
		p = append(p, l...)
	}
	p = append(p, 0)
	p = binary.BigEndian.AppendUint16(p, qtype)
	return binary.BigEndian.AppendUint16(p, dnsClassIN)
}

// The resolver answers a name the host allows with an address of the
// box's own, the same one each time, and any other name with NXDOMAIN;
// it asks the host once a name, and answers an AAAA question with no
// records.
func TestResolverAnswers(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	r := newResolver(func(name string) bool {
		mu.Lock()
		asked[name]++
		mu.Unlock()
		return name != "refused.example"
	})
	a, b := newTestPacketConns(t)
	go serveDNS(a, r)
	ask := func(id uint16, name string, qtype uint16) (rcode int, addr netip.Addr) {
		t.Helper()
		if _, err := b.Write(query(id, name, qtype)); err != nil {
			t.Fatal(err)
		}
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 600)
		n, err := b.Read(buf)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := buf[:n]
		if binary.BigEndian.Uint16(p) != id || p[2]&0x80 == 0 {
			t.Fatalf("%s: not an answer to the query: % x", name, p)
		}
		rcode = int(p[3] & 0xf)
		if binary.BigEndian.Uint16(p[6:]) == 1 {
			addr, _ = netip.AddrFromSlice(p[n-4:])
		}
		return rcode, addr
	}
	rc, first := ask(1, "Api.Example.com", dnsTypeA)
	if rc != rcodeOK || !first.Is4() || first.As4()[0] != 127 || first.As4()[1] != 77 {
		t.Fatalf("an allowed name: rcode %d, address %v", rc, first)
	}
	if rc, again := ask(2, "api.example.com", dnsTypeA); rc != rcodeOK || again != first {
		t.Errorf("asked again: rcode %d, %v (first %v)", rc, again, first)
	}
	if rc, other := ask(3, "b.example.com", dnsTypeA); rc != rcodeOK || other == first {
		t.Errorf("another name: rcode %d, %v (first %v)", rc, other, first)
	}
	if rc, addr := ask(4, "api.example.com", 28); rc != rcodeOK || addr.IsValid() {
		t.Errorf("AAAA: rcode %d, %v", rc, addr)
	}
	if rc, addr := ask(5, "refused.example", dnsTypeA); rc != rcodeNX || addr.IsValid() {
		t.Errorf("a refused name: rcode %d, %v", rc, addr)
	}
	if rc, _ := ask(6, "under_score.example", dnsTypeA); rc != rcodeNX {
		t.Errorf("a name no host has: rcode %d", rc)
	}
	if got := r.nameOf(first); got != "api.example.com" {
		t.Errorf("nameOf(%v) = %q", first, got)
	}
	if got := r.nameOf(netip.MustParseAddr("127.0.0.1")); got != "127.0.0.1" {
		t.Errorf("nameOf(127.0.0.1) = %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked["api.example.com"] != 1 || asked["refused.example"] != 1 || asked["under_score.example"] != 0 {
		t.Errorf("the host was asked %v", asked)
	}
}

// newTestPacketConns are two connected UDP sockets on the loopback.
func newTestPacketConns(t *testing.T) (net.PacketConn, *net.UDPConn) {
	t.Helper()
	a, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := net.DialUDP("udp4", nil, a.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// The resolver gives each name an address of its own, never one ending
// in .0 or .255, up to maxNames.
func TestResolverAddresses(t *testing.T) {
	r := newResolver(func(string) bool { return true })
	seen := map[netip.Addr]bool{}
	for i := range maxNames + 1 {
		a := r.resolve("n" + strconv.Itoa(i) + ".example")
		if i == maxNames {
			if a.IsValid() {
				t.Errorf("name %d got %v past maxNames", i, a)
			}
			break
		}
		b := a.As4()
		if !a.Is4() || b[0] != 127 || b[1] != 77 || b[3] == 0 || b[3] == 255 || seen[a] {
			t.Fatalf("name %d got %v", i, a)
		}
		seen[a] = true
	}
}

// parseQuery takes what a C library sends and refuses the rest.
func TestParseQuery(t *testing.T) {
	q, rc, err := parseQuery(query(7, "A.b-c.d", dnsTypeA))
	if err != nil || rc != rcodeOK || q.name != "a.b-c.d" || q.id != 7 || !q.rd || q.qtype != dnsTypeA {
		t.Fatalf("%+v %d %v", q, rc, err)
	}
	bad := map[string][]byte{
		"short":        {1, 2, 3},
		"a response":   append([]byte{0, 1, 0x81, 0}, query(1, "a.b", 1)[4:]...),
		"two":          append(append([]byte{}, query(1, "a.b", 1)[:4]...), append([]byte{0, 2}, query(1, "a.b", 1)[6:]...)...),
		"compressed":   append(query(1, "a", 1)[:12], 0xc0, 12, 0, 1, 0, 1),
		"past the end": query(1, "abc.def", 1)[:16],
		"class CH":     append(query(1, "a.b", 1)[:len(query(1, "a.b", 1))-1], 3),
	}
	for name, p := range bad {
		if _, _, err := parseQuery(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzParseQuery: whatever a program sends to the resolver, parseQuery
// gives an error or a question of a valid name whose answer parses back.
func FuzzParseQuery(f *testing.F) {
	f.Add(query(1, "api.example.com", 1))
	f.Add(query(2, "a", 28))
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0xc0, 12, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, p []byte) {
		q, _, err := parseQuery(p)
		if err != nil {
			return
		}
		if q.name == "" || len(q.name) > 253 || strings.ToLower(q.name) != q.name {
			t.Fatalf("name %q", q.name)
		}
		ans := dnsAnswer(q, rcodeOK, netip.MustParseAddr("127.77.0.1"))
		if len(ans) > maxDNS {
			t.Fatalf("an answer of %d bytes", len(ans))
		}
	})
}

// A direct TLS connection reaches the host as a CONNECT for the name
// its address was given, and the host's 200 never reaches the client; a
// refusal closes it. A plain HTTP request gets its target in absolute
// form.
func TestDirectConn(t *testing.T) {
	r := newResolver(func(string) bool { return true })
	addr := r.resolve("api.example.com")
	l, err := net.Listen("tcp4", addr.String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conn := func() (*boxConn, net.Conn) {
		t.Helper()
		client, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return &boxConn{Conn: c, release: func() {}}, client
	}
	port := l.Addr().(*net.TCPAddr).Port

	bc, client := conn()
	client.Write([]byte{0x16, 3, 1, 0, 5, 'h', 'e', 'l', 'l', 'o'})
	d := direct(bc, r)
	if d == nil {
		t.Fatal("no direct connection")
	}
	head := "CONNECT api.example.com:" + strconv.Itoa(port) + " HTTP/1.1\r\nHost: api.example.com:" + strconv.Itoa(port) + "\r\n\r\n"
	got := make([]byte, len(head)+10)
	if _, err := io.ReadFull(d, got); err != nil || string(got) != head+"\x16\x03\x01\x00\x05hello" {
		t.Fatalf("the host reads %q, %v", got, err)
	}
	d.Write([]byte("HTTP/1.1 200 Connection est"))
	d.Write([]byte("ablished\r\n\r\nserver hello"))
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	if n, err := client.Read(buf); err != nil || string(buf[:n]) != "server hello" {
		t.Errorf("the client reads %q, %v", buf[:n], err)
	}
	client.Close()
	d.Close()

	bc, client = conn()
	client.Write([]byte{0x16, 3, 1})
	d = direct(bc, r)
	io.ReadFull(d, make([]byte, len(head)))
	if _, err := d.Write([]byte("HTTP/1.1 403 Forbidden\r\n\r\npybox: no\n")); err == nil {
		t.Error("a refused CONNECT was written through")
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(buf); n != 0 || err == nil {
		t.Errorf("the client of a refused tunnel reads %q, %v", buf[:n], err)
	}
	client.Close()

	bc, client = conn()
	client.Write([]byte("GET /x?y=1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n"))
	d = direct(bc, r)
	line, err := bufio.NewReader(d).ReadString('\n')
	if want := "GET http://api.example.com:" + strconv.Itoa(port) + "/x?y=1 HTTP/1.1\r\n"; err != nil || line != want {
		t.Errorf("the host reads %q, %v; want %q", line, err, want)
	}
	client.Close()
	d.Close()
}

// Two questions sent at once, as a C library sends A and AAAA, are each
// answered with its own question: an answer that echoed another would
// be dropped, and the library would wait seconds to ask again.
func TestResolverQuestionsAtOnce(t *testing.T) {
	release := make(chan struct{})
	r := newResolver(func(string) bool { <-release; return true })
	a, b := newTestPacketConns(t)
	go serveDNS(a, r)
	b.Write(query(10, "api.example.com", dnsTypeA))
	b.Write(query(11, "api.example.com", 28))
	time.Sleep(100 * time.Millisecond) // both read before either is answered
	close(release)
	for range 2 {
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 600)
		n, err := b.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		id, qtype := binary.BigEndian.Uint16(buf), binary.BigEndian.Uint16(buf[12+len("api.example.com")+2:])
		if want := map[uint16]uint16{10: dnsTypeA, 11: 28}[id]; qtype != want || n < 12 {
			t.Errorf("answer %d echoes question type %d, want %d", id, qtype, want)
		}
	}
}

// A program that asks for ever more names gets no more than maxNames
// answers kept, and the host is asked about no more of them.
func TestResolverBoundsItsNames(t *testing.T) {
	var asked int
	r := newResolver(func(string) bool { asked++; return false })
	for i := range maxNames + 100 {
		if a := r.resolve("n" + strconv.Itoa(i) + ".example"); a.IsValid() {
			t.Fatalf("a refused name got %v", a)
		}
	}
	if len(r.names) != maxNames || asked != maxNames {
		t.Errorf("%d names kept, the host asked %d times; want %d", len(r.names), asked, maxNames)
	}
}
