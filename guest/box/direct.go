//go:build linux

package box

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"pybox/shared/wire"
)

// A net run's box serves the clients that ignore its proxy too (aiohttp
// by default, http.client, socket): a resolver at 127.0.0.1:53, which a
// box's C library asks when its image has no resolv.conf, and a listener
// on 0.0.0.0 at each port of the user's list, 80 and 443 among them.
//
// The resolver asks the host about each name, once a run (a RESOLVE
// stream: the host checks the list, resolves the name itself and
// records the answer). A name the host allows gets an address of the
// box's own loopback, 127.77.x.y, one a name; any other name does not
// exist, at once. A connection to such an address, or to an address the
// user named (127.0.0.1 to the host's own loopback), reaches a listener,
// which makes it the proxy request the host checks: a CONNECT for TLS
// (its first byte is a handshake record's), whose answer it takes out
// of the way, or the request's own head with its target written in
// absolute form for plain HTTP. The host checks it as any other: the
// TLS server name against the CONNECT's, the Host field against the
// target. The box parses only what it must to route: a DNS question, an
// HTTP request line; it never reads what a stream carries after that.

// Bounds of the direct path.
const (
	// maxNames bounds the names a run's resolver gives addresses, and
	// the names it keeps an answer for: past it, a name it has not
	// answered yet does not exist.
	maxNames = 4096
	// maxQueries bounds the questions the resolver answers at once; one
	// past it is dropped, and the client asks again.
	maxQueries = 64
	// directHead bounds the wait for a direct connection's first
	// bytes, and a lookup's answer from the host.
	directHead = 10 * time.Second
	// maxRequestLine bounds a direct HTTP request's first line.
	maxRequestLine = 8 << 10
	// dnsTTL is the seconds an answer may be kept: a run's answers do
	// not change, and a program rarely outlives a few of them.
	dnsTTL = 60
)

// bounds are a run's bounds on the connections its box hands over,
// shared by its proxy, its listeners and its resolver.
type bounds struct {
	open chan struct{} // a token per connection open: wire.MaxNetOpen
	done chan struct{} // closed when the run's network closes
	mu   sync.Mutex
	n    int // handed over in all, up to wire.MaxNetStreams
}

func newBounds() *bounds {
	return &bounds{open: make(chan struct{}, wire.MaxNetOpen), done: make(chan struct{})}
}

// acquire waits for a free place among the MaxNetOpen; false once the
// network closes.
func (b *bounds) acquire() bool {
	select {
	case b.open <- struct{}{}:
		return true
	case <-b.done:
		return false
	}
}

func (b *bounds) release() { <-b.open }

// full says whether the run has had MaxNetStreams.
func (b *bounds) full() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n >= wire.MaxNetStreams
}

// count counts a connection handed over: false when the run has had
// MaxNetStreams.
func (b *bounds) count() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n >= wire.MaxNetStreams {
		return false
	}
	b.n++
	return true
}

// resolver is a net run's names: the host's answers, and the address
// each allowed name was given.
type resolver struct {
	ask   func(name string) bool // asks the host; see lookup
	mu    sync.Mutex
	names map[string]*answer // by name, lower-case
	addrs map[netip.Addr]string
}

// answer is the host's answer about a name, once it came.
type answer struct {
	ready chan struct{}
	addr  netip.Addr // the box's address for the name; invalid when refused
}

func newResolver(ask func(string) bool) *resolver {
	return &resolver{ask: ask, names: map[string]*answer{}, addrs: map[netip.Addr]string{}}
}

// resolve is name's address in the box, asking the host the first time;
// invalid when the host refused it or the run has given maxNames.
func (r *resolver) resolve(name string) netip.Addr {
	r.mu.Lock()
	a, ok := r.names[name]
	if ok {
		r.mu.Unlock()
		<-a.ready
		return a.addr
	}
	if len(r.names) >= maxNames {
		r.mu.Unlock()
		return netip.Addr{}
	}
	a = &answer{ready: make(chan struct{})}
	r.names[name] = a
	r.mu.Unlock()
	allowed := r.ask(name)
	r.mu.Lock()
	if allowed && len(r.addrs) < maxNames {
		// 250 names in each 127.77.x: never .0 or .255.
		n := len(r.addrs)
		a.addr = netip.AddrFrom4([4]byte{127, 77, byte(n / 250), byte(n%250 + 1)})
		r.addrs[a.addr] = name
	}
	r.mu.Unlock()
	close(a.ready)
	return a.addr
}

// nameOf is the name the box gave addr, or addr itself as the host
// reads it.
func (r *resolver) nameOf(addr netip.Addr) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name, ok := r.addrs[addr]; ok {
		return name
	}
	return addr.Unmap().String()
}

// DNS, as much of it as a resolver of one kind of question needs (RFC
// 1035): a query of one question, class IN, without compression.
const (
	dnsHeader  = 12
	maxDNS     = 512
	dnsTypeA   = 1
	dnsClassIN = 1
	rcodeOK    = 0
	rcodeForm  = 1
	rcodeNX    = 3
	rcodeNotI  = 4
)

// dnsQuestion is a query's question.
type dnsQuestion struct {
	id    uint16
	rd    bool   // recursion desired, echoed
	name  string // lower-case, without the trailing dot
	qtype uint16
	raw   []byte // the question section as sent, echoed in the answer
}

// parseQuery reads a DNS query: a header with QR 0, opcode 0, one
// question and no answers or authority (an OPT record in the additional
// section is allowed and ignored), a name of labels of 1 to 63 letters,
// digits and hyphens, 253 characters in all at most, class IN. Anything
// else is an error; rcode says how to answer it (0: not at all).
func parseQuery(p []byte) (q dnsQuestion, rcode int, err error) {
	if len(p) < dnsHeader || len(p) > maxDNS {
		return q, 0, errors.New("not a DNS message")
	}
	q.id = binary.BigEndian.Uint16(p)
	flags := binary.BigEndian.Uint16(p[2:])
	q.rd = flags&0x0100 != 0
	if flags&0x8000 != 0 {
		return q, 0, errors.New("a response, not a query")
	}
	if flags>>11&0xf != 0 {
		return q, rcodeNotI, errors.New("not a standard query")
	}
	qd, an, ns, ar := binary.BigEndian.Uint16(p[4:]), binary.BigEndian.Uint16(p[6:]), binary.BigEndian.Uint16(p[8:]), binary.BigEndian.Uint16(p[10:])
	if qd != 1 || an != 0 || ns != 0 || ar > 1 {
		return q, rcodeForm, errors.New("not one question")
	}
	var labels []string
	i := dnsHeader
	for {
		if i >= len(p) {
			return q, rcodeForm, errors.New("the name runs past the message")
		}
		n := int(p[i])
		i++
		if n == 0 {
			break
		}
		if n > 63 || i+n > len(p) {
			return q, rcodeForm, errors.New("a label is longer than 63 bytes, compressed, or past the message")
		}
		label := p[i : i+n]
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return q, rcodeNX, errors.New("a label holds other than letters, digits and hyphens")
			}
		}
		labels = append(labels, strings.ToLower(string(label)))
		i += n
	}
	q.name = strings.Join(labels, ".")
	if q.name == "" || len(q.name) > 253 {
		return q, rcodeNX, errors.New("the name is empty or longer than 253 characters")
	}
	if i+4 > len(p) {
		return q, rcodeForm, errors.New("the question ends early")
	}
	q.qtype = binary.BigEndian.Uint16(p[i:])
	if binary.BigEndian.Uint16(p[i+2:]) != dnsClassIN {
		return q, rcodeNotI, errors.New("not class IN")
	}
	q.raw = p[dnsHeader : i+4]
	return q, rcodeOK, nil
}

// dnsAnswer is the response to q: rcode, and addr as its one A record
// when it is valid and q asks for A.
func dnsAnswer(q dnsQuestion, rcode int, addr netip.Addr) []byte {
	flags := uint16(0x8000 | 0x0400 | 0x0080 | rcode) // QR, AA, RA
	if q.rd {
		flags |= 0x0100
	}
	an := uint16(0)
	if rcode == rcodeOK && addr.Is4() && q.qtype == dnsTypeA {
		an = 1
	}
	qd := uint16(0)
	if q.raw != nil {
		qd = 1
	}
	p := binary.BigEndian.AppendUint16(nil, q.id)
	p = binary.BigEndian.AppendUint16(p, flags)
	p = binary.BigEndian.AppendUint16(p, qd)
	p = binary.BigEndian.AppendUint16(p, an)
	p = append(p, 0, 0, 0, 0)
	p = append(p, q.raw...)
	if an == 1 {
		p = append(p, 0xc0, dnsHeader) // the question's name
		p = binary.BigEndian.AppendUint16(p, dnsTypeA)
		p = binary.BigEndian.AppendUint16(p, dnsClassIN)
		p = binary.BigEndian.AppendUint32(p, dnsTTL)
		p = binary.BigEndian.AppendUint16(p, 4)
		a4 := addr.As4()
		p = append(p, a4[:]...)
	}
	return p
}

// serveDNS answers the queries that come to pc until it is closed, each
// in a goroutine of its own (a lookup waits for the host), at most
// maxQueries at once.
func serveDNS(pc net.PacketConn, r *resolver) {
	buf := make([]byte, maxDNS+1)
	busy := make(chan struct{}, maxQueries)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		// A copy: the answer echoes the question after the next
		// query has been read into buf.
		q, rcode, err := parseQuery(bytes.Clone(buf[:n]))
		if err != nil {
			if rcode != 0 {
				pc.WriteTo(dnsAnswer(q, rcode, netip.Addr{}), from)
			}
			continue
		}
		select {
		case busy <- struct{}{}:
		default:
			continue
		}
		go func() {
			defer func() { <-busy }()
			addr := r.resolve(q.name)
			rcode := rcodeOK
			if !addr.IsValid() {
				rcode = rcodeNX
			}
			pc.WriteTo(dnsAnswer(q, rcode, addr), from)
		}()
	}
}

// lookup asks the host about name over a stream of its own: whether
// the host answered 200 within directHead.
func lookup(name string, hand func(net.Conn) bool) bool {
	mine, theirs := net.Pipe()
	defer mine.Close()
	if !hand(theirs) {
		return false
	}
	mine.SetDeadline(time.Now().Add(directHead))
	if _, err := io.WriteString(mine, "RESOLVE "+name+" HTTP/1.1\r\n\r\n"); err != nil {
		return false
	}
	line, err := bufio.NewReaderSize(mine, 256).ReadSlice('\n')
	return err == nil && bytes.HasPrefix(line, []byte("HTTP/1.1 200 "))
}

// direct makes a connection accepted on a direct listener the proxy
// request the host checks, reading its first bytes within directHead:
// nil when it sent nothing of use (it is closed then).
func direct(c *boxConn, r *resolver) net.Conn {
	local, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		c.Close()
		return nil
	}
	addr, _ := netip.AddrFromSlice(local.IP)
	target := net.JoinHostPort(r.nameOf(addr), strconv.Itoa(local.Port))
	c.SetReadDeadline(time.Now().Add(directHead))
	br := bufio.NewReaderSize(c, maxRequestLine)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return nil
	}
	if first[0] == 0x16 { // a TLS handshake record
		c.SetReadDeadline(time.Time{})
		head := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n"
		return &directConn{boxConn: c, r: io.MultiReader(strings.NewReader(head), br), tunnel: true}
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		c.Close()
		return nil
	}
	c.SetReadDeadline(time.Time{})
	if method, rest, ok := strings.Cut(string(line), " "); ok && strings.HasPrefix(rest, "/") {
		line = []byte(method + " http://" + target + rest)
	}
	return &directConn{boxConn: c, r: io.MultiReader(bytes.NewReader(line), br)}
}

// directConn is a direct connection as the host sees it: its reads give
// the proxy request first; for a tunnel, its writes drop the host's
// answer to the CONNECT, and close it if that was not a 200.
type directConn struct {
	*boxConn
	r      io.Reader
	tunnel bool
	head   []byte // for a tunnel: the answer's head so far, until answered
	open   bool   // the tunnel's answer was a 200, and is dropped
}

func (d *directConn) Read(p []byte) (int, error) { return d.r.Read(p) }

func (d *directConn) Write(p []byte) (int, error) {
	if !d.tunnel || d.open {
		return d.boxConn.Write(p)
	}
	d.head = append(d.head, p...)
	end := bytes.Index(d.head, []byte("\r\n\r\n"))
	if end < 0 {
		if len(d.head) > maxRequestLine {
			d.boxConn.Close()
			return 0, errors.New("the host's answer to a CONNECT has no end")
		}
		return len(p), nil
	}
	if !bytes.HasPrefix(d.head, []byte("HTTP/1.1 200 ")) {
		// Refused: the client, which speaks TLS, can only be closed on.
		d.boxConn.Close()
		return 0, fmt.Errorf("the host refused the connection: %s", d.head[:bytes.IndexByte(d.head, '\r')])
	}
	d.open = true
	if rest := d.head[end+4:]; len(rest) > 0 {
		if _, err := d.boxConn.Write(rest); err != nil {
			return 0, err
		}
	}
	d.head = nil
	return len(p), nil
}
