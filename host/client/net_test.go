package client_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pybox/host/client"
	"pybox/host/egress"
	"pybox/shared/frame"
	"pybox/shared/wire"
)

// netGuest is a guest whose runs are scripts, by run ID: a script plays
// the connections of the run's box as its streams, as the guest agent
// relays them, and the run's receipt follows when it returns. It checks
// that the host keeps to the windows it grants, and grants back at once
// what the host sends.
func netGuest(scripts map[string]func(*guestRun)) func(*testing.T, net.Conn) {
	return func(t *testing.T, conn net.Conn) {
		var wmu sync.Mutex
		write := func(m *wire.Message) {
			p, err := wire.Encode(m)
			if err != nil {
				t.Errorf("fake guest: %v", err)
				return
			}
			wmu.Lock()
			frame.Write(conn, p)
			wmu.Unlock()
		}
		runs := map[uint64]*guestRun{}
		for {
			p, err := frame.Read(conn)
			if err != nil {
				return
			}
			m, err := wire.Decode(p)
			if err != nil {
				t.Errorf("fake guest: %v", err)
				return
			}
			switch m.Type {
			case wire.TypeRun:
				g := &guestRun{t: t, id: m.ID, write: write, streams: map[uint32]*guestStream{}}
				runs[m.ID] = g
				script := scripts[m.Run.RunID]
				go func() {
					if script != nil {
						script(g)
					}
					write(receipt(m.ID, m.Run.RunID, wire.StatusOK))
				}()
			case wire.TypeCancel:
				write(&wire.Message{Type: wire.TypeOK, ID: m.ID})
			case wire.TypeNetData, wire.TypeNetWindow, wire.TypeNetClose:
				if g := runs[m.ID]; g != nil {
					g.take(m)
				} else {
					t.Errorf("fake guest: %s for id %d, no run", m.Type, m.ID)
				}
			}
		}
	}
}

// guestRun is a run's streams, from the guest's side.
type guestRun struct {
	t     *testing.T
	id    uint64
	write func(*wire.Message)

	mu      sync.Mutex
	streams map[uint32]*guestStream
}

type guestStream struct {
	in         []byte // what the host sent
	credit     int    // what the guest may send
	hostCredit int    // what the host may send
	fin, abort bool   // the host's
}

func (g *guestRun) frame(typ string, f *wire.NetFrame) {
	g.write(&wire.Message{Type: typ, ID: g.id, Net: f})
}

// open opens stream s.
func (g *guestRun) open(s uint32) {
	g.mu.Lock()
	g.streams[s] = &guestStream{credit: wire.NetWindow, hostCredit: wire.NetWindow}
	g.mu.Unlock()
	g.frame(wire.TypeNetOpen, &wire.NetFrame{Stream: s})
}

// send sends b on stream s within the host's windows; false if the host
// aborted the stream.
func (g *guestRun) send(s uint32, b []byte) bool {
	for len(b) > 0 {
		var k int
		if !g.until(s, func(gs *guestStream) bool { return gs.credit > 0 || gs.abort }) {
			return false
		}
		g.mu.Lock()
		gs := g.streams[s]
		if gs.abort {
			g.mu.Unlock()
			return false
		}
		k = min(len(b), wire.MaxNetChunk, gs.credit)
		gs.credit -= k
		g.mu.Unlock()
		g.frame(wire.TypeNetData, &wire.NetFrame{Stream: s, Data: b[:k]})
		b = b[k:]
	}
	return true
}

// end waits for the host to end stream s, and is what it sent and
// whether it aborted.
func (g *guestRun) end(s uint32) ([]byte, bool) {
	if !g.until(s, func(gs *guestStream) bool { return gs.fin || gs.abort }) {
		g.t.Errorf("stream %d: the host did not end it", s)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gs := g.streams[s]
	return gs.in, gs.abort
}

// until waits (10 s at most) for ok of stream s.
func (g *guestRun) until(s uint32, ok func(*guestStream) bool) bool {
	for t0 := time.Now(); time.Since(t0) < 10*time.Second; time.Sleep(2 * time.Millisecond) {
		g.mu.Lock()
		done := ok(g.streams[s])
		g.mu.Unlock()
		if done {
			return true
		}
	}
	return false
}

// take is a frame of the host's, from the guest's reader.
func (g *guestRun) take(m *wire.Message) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := m.Net
	gs := g.streams[f.Stream]
	if gs == nil {
		gs = &guestStream{}
		g.streams[f.Stream] = gs
	}
	switch m.Type {
	case wire.TypeNetData:
		if gs.fin || len(f.Data) > gs.hostCredit {
			g.t.Errorf("stream %d: the host sent %d bytes with %d of window left (fin %v)", f.Stream, len(f.Data), gs.hostCredit, gs.fin)
		}
		gs.in = append(gs.in, f.Data...)
		// Written to the box at once: granted back at once.
		g.frame(wire.TypeNetWindow, &wire.NetFrame{Stream: f.Stream, Window: uint32(len(f.Data))})
	case wire.TypeNetWindow:
		gs.credit += int(f.Window)
	case wire.TypeNetClose:
		if f.Abort {
			gs.abort = true
		} else {
			gs.fin = true
		}
	}
}

// netServe is a VM whose guest plays scripts, and a gate that allows
// web.test and slow.test (whose lookup waits for its call's end) on
// the upstream's port: evil.test is not on the list.
func netServe(t *testing.T, upstream *httptest.Server, scripts map[string]func(*guestRun)) (home string, gate func() *egress.Gate, port string) {
	_, port, err := net.SplitHostPort(strings.TrimPrefix(upstream.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	allow, err := egress.ParseAllow("web.test:" + port + ",slow.test:" + port + ",127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "web.test", "evil.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		case "slow.test":
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("no such host %s", host)
	}
	home = serveGuest(t, wire.Hello{Protocol: wire.ProtocolVersion, AgentVersion: "fake", Capabilities: []string{wire.CapNet}}, nil, netGuest(scripts))
	return home, func() *egress.Gate { return &egress.Gate{Allow: allow, Lookup: lookup} }, port
}

func netRun(id string) *client.Checked {
	r := testWire(id, "print(1)")
	r.Net = true
	return checked(r)
}

// upstream answers /up with how much it was sent and 200 KiB.
func upstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Got", strconv.FormatInt(n, 10))
		w.Write(bytes.Repeat([]byte("x"), 200<<10))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A box's connections reach the gate as streams of the run: a request
// larger than a window goes up, a response larger than several comes
// back, each side within the windows the other granted; a host not on
// the list is refused by the gate (403), and what its box sends after
// that is taken and dropped. The receipt's network section
// is the gate's record.
func TestNetStreams(t *testing.T) {
	srv := upstream(t)
	const upload = 150_000
	var port string
	scripts := map[string]func(*guestRun){"n1": func(g *guestRun) {
		var wg sync.WaitGroup
		wg.Add(2)
		g.open(1)
		g.open(2)
		go func() {
			defer wg.Done()
			head := fmt.Sprintf("POST http://web.test:%s/up HTTP/1.1\r\nHost: web.test:%s\r\nContent-Length: %d\r\n\r\n", port, port, upload)
			if !g.send(1, append([]byte(head), bytes.Repeat([]byte("u"), upload)...)) {
				t.Error("stream 1 was aborted")
			}
			got, aborted := g.end(1)
			g.frame(wire.TypeNetClose, &wire.NetFrame{Stream: 1})
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
			if err != nil || aborted {
				t.Errorf("stream 1: %v, aborted %v: %.200q", err, aborted, got)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || resp.Header.Get("X-Got") != strconv.Itoa(upload) || len(body) != 200<<10 {
				t.Errorf("stream 1: %s, the server got %s bytes, %d came back", resp.Status, resp.Header.Get("X-Got"), len(body))
			}
		}()
		go func() {
			defer wg.Done()
			g.send(2, fmt.Appendf(nil, "GET http://evil.test:%s/ HTTP/1.1\r\nHost: evil.test:%s\r\n\r\n", port, port))
			got, _ := g.end(2)
			// What the box sends after the gate is done with it is
			// dropped, and its window given back.
			if !g.send(2, make([]byte, 3*wire.NetWindow)) {
				t.Error("stream 2 was aborted")
			}
			g.frame(wire.TypeNetClose, &wire.NetFrame{Stream: 2})
			if !strings.HasPrefix(string(got), "HTTP/1.1 403 ") || !strings.Contains(string(got), "not on the list") {
				t.Errorf("stream 2: %q", got)
			}
		}()
		wg.Wait()
	}}
	home, gate, p := netServe(t, srv, scripts)
	port = p
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := gate()
	res, err := c.RunWith(context.Background(), netRun("n1"), client.RunOptions{Net: g})
	if err != nil {
		t.Fatal(err)
	}
	nw := res.Receipt.Network
	if nw == nil {
		t.Fatal("no network section")
	}
	if nw.Allowed != g.Allow.String() || len(nw.Connections) != 2 || nw.Refused != 1 || nw.NotListed != 0 || nw.Faults != 0 {
		t.Fatalf("network %+v", nw)
	}
	var sent, received int64
	for _, cn := range nw.Connections {
		switch cn.Host {
		case "web.test":
			if !cn.Allowed || cn.Kind != "http" || cn.Sent < upload || cn.Received < 200<<10 || cn.Address != "127.0.0.1" {
				t.Errorf("web.test: %+v", cn)
			}
		case "evil.test":
			if cn.Allowed || !strings.Contains(cn.Why, "not on the list") || cn.Sent != 0 || cn.Received != 0 {
				t.Errorf("evil.test: %+v", cn)
			}
		default:
			t.Errorf("a connection to %q", cn.Host)
		}
		sent, received = sent+cn.Sent, received+cn.Received
	}
	if nw.SentBytes != sent || nw.ReceivedBytes != received {
		t.Errorf("totals %d/%d, connections %d/%d", nw.SentBytes, nw.ReceivedBytes, sent, received)
	}
}

// A guest that breaks the rules of the streams gets the stream it broke
// aborted, and each fault counted in the receipt; the run's other
// streams go on, and the run ends with its receipt.
func TestNetStreamsHostileGuest(t *testing.T) {
	srv := upstream(t)
	var port string
	aborted := func(g *guestRun, s uint32, what string) {
		if _, ab := g.end(s); !ab {
			t.Errorf("%s: stream %d was not aborted", what, s)
		}
	}
	scripts := map[string]func(*guestRun){"n2": func(g *guestRun) {
		// Past the window: the gate holds the head in its lookup of
		// slow.test, so nothing of the stream is read, nor granted back.
		g.open(1)
		g.frame(wire.TypeNetData, &wire.NetFrame{Stream: 1, Data: fmt.Appendf(nil, "GET http://slow.test:%s/ HTTP/1.1\r\nHost: slow.test:%s\r\n\r\n", port, port)})
		for range 4 {
			g.frame(wire.TypeNetData, &wire.NetFrame{Stream: 1, Data: make([]byte, wire.MaxNetChunk)})
		}
		aborted(g, 1, "data past the window")
		// Stream ids go up.
		g.mu.Lock()
		g.streams[1] = &guestStream{}
		g.mu.Unlock()
		g.frame(wire.TypeNetOpen, &wire.NetFrame{Stream: 1})
		aborted(g, 1, "an id opened again")
		// A window past NetWindow.
		g.open(3)
		g.frame(wire.TypeNetWindow, &wire.NetFrame{Stream: 3, Window: 1})
		aborted(g, 3, "a window past its bound")
		// Data of a stream never opened.
		g.frame(wire.TypeNetData, &wire.NetFrame{Stream: 9, Data: []byte("x")})
		// The run's streams still work.
		g.open(10)
		g.send(10, fmt.Appendf(nil, "GET http://web.test:%s/ HTTP/1.1\r\nHost: web.test:%s\r\n\r\n", port, port))
		got, ab := g.end(10)
		if ab || !strings.HasPrefix(string(got), "HTTP/1.1 200 ") {
			t.Errorf("a good stream after the faults: aborted %v, %.100q", ab, got)
		}
	}}
	home, gate, p := netServe(t, srv, scripts)
	port = p
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	res, err := c.RunWith(context.Background(), netRun("n2"), client.RunOptions{Net: gate()})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("the run took %v", took)
	}
	nw := res.Receipt.Network
	if nw == nil || nw.Faults != 4 {
		t.Fatalf("network %+v, want 4 faults", nw)
	}
	var good bool
	for _, cn := range nw.Connections {
		good = good || cn.Host == "web.test" && cn.Allowed && cn.Received > 0
	}
	if !good {
		t.Errorf("connections %+v", nw.Connections)
	}
}

// A run's gate and its Run.Net go together, or the run is refused, and
// nothing runs.
func TestNetNeedsAGate(t *testing.T) {
	home := serve(t)
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, call := range map[string]func() (*client.Result, error){
		"net, no gate": func() (*client.Result, error) {
			return c.RunWith(context.Background(), netRun("r1"), client.RunOptions{})
		},
		"gate, no net": func() (*client.Result, error) {
			return c.RunWith(context.Background(), testRun("r2", "print(1)"), client.RunOptions{Net: &egress.Gate{}})
		},
	} {
		res, err := call()
		var we *wire.Error
		if res != nil || !errors.As(err, &we) || we.Code != wire.ErrBadRequest || we.Cleanup.Status != wire.CleanupNotAttempted {
			t.Errorf("%s: %+v, %v", name, res, err)
		}
	}
}

// A run that may reach the network is refused, and nothing runs, when
// the guest's agent does not announce that it carries connections.
func TestNetNeedsCapNet(t *testing.T) {
	home := serve(t)
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.RunWith(context.Background(), netRun("r1"), client.RunOptions{Net: &egress.Gate{}})
	var we *wire.Error
	if res != nil || !errors.As(err, &we) || we.Code != wire.ErrBadRequest || we.Cleanup.Status != wire.CleanupNotAttempted ||
		!strings.Contains(we.Message, "restart the VM with this pybox") {
		t.Fatalf("RunWith = %+v, %v", res, err)
	}
}

// Stream frames for a run that may not reach the network are dropped,
// and its receipt has no network section, whatever the guest says.
func TestNetFramesOfAnotherRun(t *testing.T) {
	cn, sv := net.Pipe()
	defer sv.Close()
	go func() {
		write := func(m *wire.Message) {
			p, _ := wire.Encode(m)
			frame.Write(sv, p)
		}
		for {
			p, err := frame.Read(sv)
			if err != nil {
				return
			}
			m, err := wire.Decode(p)
			if err != nil {
				return
			}
			switch m.Type {
			case wire.TypeHello:
				write(&wire.Message{Type: wire.TypeHello, ID: m.ID, Hello: &wire.Hello{Protocol: wire.ProtocolVersion}})
			case wire.TypeRun:
				write(&wire.Message{Type: wire.TypeNetOpen, ID: m.ID, Net: &wire.NetFrame{Stream: 1}})
				write(&wire.Message{Type: wire.TypeNetData, ID: m.ID, Net: &wire.NetFrame{Stream: 1, Data: []byte("GET / HTTP/1.1\r\n\r\n")}})
				write(&wire.Message{Type: wire.TypeNetWindow, ID: m.ID + 1, Net: &wire.NetFrame{Stream: 1, Window: 1}})
				rc := receipt(m.ID, m.Run.RunID, wire.StatusOK)
				rc.Result.Receipt.Network = &wire.Network{Allowed: "everything", Connections: []wire.NetConnection{{Host: "example.com", Allowed: true}}}
				write(rc)
			}
		}
	}()
	c, err := client.New(context.Background(), cn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Run(context.Background(), testRun("r1", "print(1)"))
	if err != nil || res.Receipt.Status != wire.StatusOK || res.Receipt.Network != nil {
		t.Fatalf("Run = %+v, %v", res, err)
	}
}
