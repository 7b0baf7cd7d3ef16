package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pybox/shared/wire"
)

// Gate serves a box's connections under the user's list, for one call:
// each is a proxy request (CONNECT for TLS, an http:// request for plain
// HTTP) that the gate reads, checks, resolves, dials and then relays,
// within the call's bounds. Every connection, served or refused, leaves
// a Record.
type Gate struct {
	Allow Allow
	// Lookup resolves a name on this machine; the system's resolver
	// when nil.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial dials an address; a net.Dialer's when nil.
	Dial   func(ctx context.Context, network, address string) (net.Conn, error)
	Limits Limits

	opened  atomic.Int64
	budget  atomic.Int64 // bytes left, both ways together
	once    sync.Once
	mu      sync.Mutex
	records []Record
}

// Limits bound one call's connections.
type Limits struct {
	Connections int           // in all; DefaultLimits' when 0
	Bytes       int64         // relayed, both ways, in all
	Head        time.Duration // to send a request's head and, through a tunnel, the TLS ClientHello
	Dial        time.Duration // to connect to the server
}

// DefaultLimits are a call's bounds unless the user sets others.
var DefaultLimits = Limits{Connections: 256, Bytes: 1 << 30, Head: 10 * time.Second, Dial: 10 * time.Second}

// Record is one connection as the host saw it: the receipt's own entry
// for it, so that the receipt carries what the gate recorded as it is.
type Record = wire.NetConnection

func (g *Gate) limits() Limits {
	l := g.Limits
	if l.Connections == 0 {
		l.Connections = DefaultLimits.Connections
	}
	if l.Bytes == 0 {
		l.Bytes = DefaultLimits.Bytes
	}
	if l.Head == 0 {
		l.Head = DefaultLimits.Head
	}
	if l.Dial == 0 {
		l.Dial = DefaultLimits.Dial
	}
	return l
}

// Records are the call's connections so far, in the order they ended.
func (g *Gate) Records() []Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Record(nil), g.records...)
}

// refusal is a connection refused before anything was relayed: what
// the box is told (an HTTP status and a line), and why.
type refusal struct {
	status int
	why    string
}

// Serve serves one connection from the box until it ends, ctx ends, or
// a bound is reached, then closes box and records it.
func (g *Gate) Serve(ctx context.Context, box io.ReadWriteCloser) Record {
	l := g.limits()
	g.once.Do(func() { g.budget.Store(l.Bytes) })
	start := time.Now()
	rec := Record{Kind: "http"}
	defer func() {
		box.Close()
		rec.Millis = time.Since(start).Milliseconds()
		g.mu.Lock()
		g.records = append(g.records, rec)
		g.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { box.Close() })
	defer stop()

	refuse := func(r refusal) Record {
		rec.Why = r.why
		writeAnswer(box, r.status, "pybox: "+r.why+"\n")
		return rec
	}
	if n := g.opened.Add(1); n > int64(l.Connections) {
		return refuse(refusal{429, fmt.Sprintf("this call has opened %d connections, its bound", l.Connections)})
	}
	var late atomic.Bool
	headTimer := time.AfterFunc(l.Head, func() {
		late.Store(true)
		box.Close()
	})
	br := bufio.NewReader(box)
	head, err := ReadRequestHead(br)
	if err != nil {
		headTimer.Stop()
		if late.Load() {
			return refuse(refusal{408, fmt.Sprintf("no whole request head within %v", l.Head)})
		}
		return refuse(headRefusal(err))
	}
	rec.Host, rec.Port = head.Host, head.Port
	if head.Method == "CONNECT" {
		rec.Kind = "tls"
	}
	if head.Method == "RESOLVE" {
		headTimer.Stop()
		return g.lookupName(ctx, &rec, box, head.Host)
	}
	entry, ok := g.Allow.Allows(head.Host, head.Port)
	if !ok {
		headTimer.Stop()
		return refuse(refusal{403, notListed(hostPort(head.Host, head.Port), g.Allow)})
	}
	addrs, err := Resolve(ctx, g.lookup(), head.Host, g.Allow)
	if err != nil {
		headTimer.Stop()
		return refuse(refusal{403, err.Error()})
	}
	// A tunnel's TLS hello is read and checked before anything is
	// dialled: a refused one never reaches the server.
	var first []byte
	tunnel := head.Method == "CONNECT"
	if tunnel {
		if _, err := io.WriteString(box, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			rec.Why = "the box went away"
			return rec
		}
		raw, sni, err := ReadClientHello(br)
		switch {
		case errors.Is(err, ErrNoSNI) && entry.Literal:
			// A client names no server in TLS to an IP address: the
			// address the user named is the check.
		case late.Load():
			rec.Why = fmt.Sprintf("refused: no whole TLS ClientHello within %v", l.Head)
			return rec
		case err != nil:
			headTimer.Stop()
			rec.Why = "refused: " + err.Error()
			return rec
		case sni != head.Host:
			headTimer.Stop()
			rec.Why = fmt.Sprintf("refused: the TLS server name %s is not the host of the CONNECT, %s", sni, head.Host)
			return rec
		}
		first = raw
	} else {
		first = head.OriginForm()
	}
	headTimer.Stop()

	dctx, dcancel := context.WithTimeout(ctx, l.Dial)
	var server net.Conn
	var dialErr error
	for _, a := range addrs {
		if server, dialErr = g.dial()(dctx, "tcp", netip.AddrPortFrom(a, uint16(head.Port)).String()); dialErr == nil {
			rec.Address = a.String()
			break
		}
	}
	dcancel()
	if server == nil {
		why := fmt.Sprintf("%s: %v", hostPort(head.Host, head.Port), dialErr)
		if tunnel {
			rec.Why = why // the box has its 200 already: the tunnel just closes
			return rec
		}
		return refuse(refusal{502, why})
	}
	defer server.Close()
	context.AfterFunc(ctx, func() { server.Close() })
	rec.Allowed = true
	g.relay(ctx, &rec, br, box, server, first)
	return rec
}

// lookupName answers the box's resolver for host: 200 when host is on
// the list and resolves here to addresses the box may reach, else a
// refusal that says why. The box's resolver gives a name it got a 200
// for an address of the box's own, whose connections come back here as
// proxy requests for the name.
func (g *Gate) lookupName(ctx context.Context, rec *Record, box io.Writer, host string) Record {
	rec.Kind = "dns"
	answer := func(status int, why string) Record {
		rec.Why = why
		writeAnswer(box, status, why)
		return *rec
	}
	if !g.Allow.AllowsName(host) {
		return answer(403, notListed(host, g.Allow))
	}
	addrs, err := Resolve(ctx, g.lookup(), host, g.Allow)
	if err != nil {
		return answer(403, err.Error())
	}
	rec.Allowed, rec.Address = true, addrs[0].String()
	return answer(200, "")
}

// relay copies the box's bytes (first, then the rest of br) to server
// and the server's to box, counting both against the call's budget,
// until both ways end or the budget is spent.
func (g *Gate) relay(ctx context.Context, rec *Record, br *bufio.Reader, box io.ReadWriteCloser, server net.Conn, first []byte) {
	var wg sync.WaitGroup
	var cut atomic.Bool
	spend := func(n int) bool {
		if g.budget.Add(-int64(n)) < 0 {
			cut.Store(true)
			box.Close()
			server.Close()
			return false
		}
		return true
	}
	// copyCounted copies until src ends or dst fails; readErr is what
	// ended src, when that was not a clean end.
	copyCounted := func(dst io.Writer, src io.Reader, count *int64, readErr *error, done func()) {
		defer done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if !spend(n) {
					return
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
				atomic.AddInt64(count, int64(n))
			}
			if err != nil {
				if err != io.EOF {
					*readErr = err
				}
				return
			}
		}
	}
	if len(first) > 0 {
		if !spend(len(first)) {
			rec.Why = "the call's bound of bytes was reached"
			return
		}
		if _, err := server.Write(first); err != nil {
			return
		}
		rec.Sent += int64(len(first))
	}
	var fromBox, fromServer error
	wg.Add(2)
	go copyCounted(server, br, &rec.Sent, &fromBox, func() {
		wg.Done()
		if tc, ok := server.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		}
	})
	go copyCounted(box, server, &rec.Received, &fromServer, func() {
		wg.Done()
		box.Close()
	})
	wg.Wait()
	switch {
	case cut.Load():
		rec.Why = "the call's bound of bytes was reached"
	case ctx.Err() != nil:
		rec.Why = "cut: the run ended while the connection was open"
	case abrupt(fromBox):
		// The guest aborts the streams its run's end cut, and those
		// whose program reset them.
		rec.Why = "cut by the box: its run ended, or the program reset the connection"
	case abrupt(fromServer):
		rec.Why = "cut by the server: " + fromServer.Error()
	}
}

// writeAnswer writes the gate's own HTTP answer to the box: status, and
// body as plain text; the connection closes after it.
func writeAnswer(box io.Writer, status int, body string) {
	fmt.Fprintf(box, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, statusText(status), len(body), body)
}

// notListed is why a host (with its port, for a connection) the list
// does not allow is refused.
func notListed(host string, a Allow) string {
	return fmt.Sprintf("%s is not on the list of hosts the user opened (%s); only the user can open more, with --allow-net", host, a)
}

// abrupt says whether err ended a side of a relay other than cleanly
// and other than by the gate's own close of it (once the other side
// ended).
func abrupt(err error) bool {
	return err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe)
}

func (g *Gate) lookup() func(context.Context, string) ([]netip.Addr, error) {
	if g.Lookup != nil {
		return g.Lookup
	}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
}

func (g *Gate) dial() func(context.Context, string, string) (net.Conn, error) {
	if g.Dial != nil {
		return g.Dial
	}
	var d net.Dialer
	return d.DialContext
}

// headRefusal is the answer to a request head that could not be read.
func headRefusal(err error) refusal {
	switch {
	case errors.Is(err, ErrMethod):
		return refusal{405, err.Error()}
	case errors.Is(err, ErrURITooLong):
		return refusal{414, err.Error()}
	case errors.Is(err, ErrHeadTooLarge):
		return refusal{431, err.Error()}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return refusal{400, "the connection ended before its request's head did"}
	}
	return refusal{400, err.Error()}
}

func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 414:
		return "URI Too Long"
	case 429:
		return "Too Many Requests"
	case 431:
		return "Request Header Fields Too Large"
	case 502:
		return "Bad Gateway"
	}
	return "Error"
}

func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
