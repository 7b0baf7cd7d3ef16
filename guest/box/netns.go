//go:build linux

package box

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// A run the user let reach the network (wire.Run.Net) finds a proxy in
// its box: a listening socket at proxyAddr in the box's own network
// namespace, which the agent made and holds, and HTTP(S)_PROXY naming it
// in the program's environment. Each connection a program makes to it is
// handed, as it is, to the run's conns (see Runner.Run), which carries
// its bytes to the host; the box never reads them. The box's network is
// otherwise what it always is: lo alone, nothing routed out.
//
// The socket is made by the agent, not by box-init: box-init has no
// socket to the agent in a cold box to pass it over, and it would need
// its capabilities kept for it and a descriptor let through its posture
// check. The agent, root of the guest, enters the box's network
// namespace on a thread of its own, as bindData enters its mount
// namespace, and a socket stays in the namespace it was made in
// whichever thread later uses it.

// proxyAddr is where a box's proxy listens, in every box that has one:
// the namespace is the box's own, so nothing else can hold the port.
const proxyAddr = "127.0.0.1:3128"

// proxyAddrPort is proxyAddr, parsed.
var proxyAddrPort = netip.MustParseAddrPort(proxyAddr)

// proxyBacklog is how many connections the kernel queues for the proxy
// while the accept loop waits for a free stream.
const proxyBacklog = 64

// proxyEnv is what a net run's program has in its environment beyond
// programEnv: the proxy, under both spellings that clients read. There
// is no NO_PROXY: in a box 127.0.0.1 has nothing else to reach, and a
// user may have named the host's own 127.0.0.1 in the list.
func proxyEnv() []string {
	u := "http://" + proxyAddr
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u}
}

// boxNet is a net run's sockets in its box: the proxy, the resolver and
// the direct listeners (direct.go).
type boxNet struct {
	proxy  *net.TCPListener
	dns    net.PacketConn
	direct []*net.TCPListener
}

func (bn *boxNet) close() {
	for _, l := range append([]*net.TCPListener{bn.proxy}, bn.direct...) {
		if l != nil {
			l.Close()
		}
	}
	if bn.dns != nil {
		bn.dns.Close()
	}
}

// directPorts are the ports a box listens on for direct connections:
// the list's, and 80 and 443, but never the proxy's.
func directPorts(ports []int) []int {
	out := []int{80, 443}
	for _, p := range ports {
		if p != 80 && p != 443 && p != int(proxyAddrPort.Port()) {
			out = append(out, p)
		}
	}
	return out
}

// listenIn makes a net run's sockets in the network namespace of the
// process pid (box-init, in the agent's pid namespace), bringing up that
// namespace's lo first, which is what gives it 127.0.0.1: the proxy at
// proxyAddr, the resolver at 127.0.0.1:53 (UDP), and a listener on
// 0.0.0.0 at each of directPorts(ports). box-init brings lo up again
// itself later, which changes nothing.
func listenIn(pid int, ports []int) (*boxNet, error) {
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	type made struct {
		fds []int
		err error
	}
	done := make(chan made, 1)
	direct := directPorts(ports)
	go func() {
		// This thread enters the box's network namespace and is never
		// unlocked, so it ends with this goroutine and no other
		// goroutine ever runs in the box's namespace.
		runtime.LockOSThread()
		var fds []int
		err := func() error {
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
				return &os.SyscallError{Syscall: "setns(net)", Err: err}
			}
			if err := loopbackUp(); err != nil {
				return err
			}
			fd, err := listenSocket(proxyAddrPort, unix.SOCK_STREAM)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			if fd, err = listenSocket(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 53), unix.SOCK_DGRAM); err != nil {
				return err
			}
			fds = append(fds, fd)
			for _, p := range direct {
				if fd, err = listenSocket(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(p)), unix.SOCK_STREAM); err != nil {
					return err
				}
				fds = append(fds, fd)
			}
			return nil
		}()
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			fds = nil
		}
		done <- made{fds, err}
	}()
	m := <-done
	if m.err != nil {
		return nil, m.err
	}
	bn := &boxNet{}
	for i, fd := range m.fds {
		f := os.NewFile(uintptr(fd), "box network")
		var err error
		switch i {
		case 0:
			var l net.Listener
			if l, err = net.FileListener(f); err == nil {
				bn.proxy = l.(*net.TCPListener)
			}
		case 1:
			bn.dns, err = net.FilePacketConn(f)
		default:
			var l net.Listener
			if l, err = net.FileListener(f); err == nil {
				bn.direct = append(bn.direct, l.(*net.TCPListener))
			}
		}
		f.Close()
		if err != nil {
			for _, fd := range m.fds[i+1:] {
				unix.Close(fd)
			}
			bn.close()
			return nil, err
		}
	}
	return bn, nil
}

// listenSocket makes a socket of typ (a TCP one listening, or a UDP
// one) bound to ap, in the calling thread's network namespace.
func listenSocket(ap netip.AddrPort, typ int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, &os.SyscallError{Syscall: "socket", Err: err}
	}
	err = func() error {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return &os.SyscallError{Syscall: "setsockopt(SO_REUSEADDR)", Err: err}
		}
		sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		if err := unix.Bind(fd, sa); err != nil {
			return &os.SyscallError{Syscall: "bind " + ap.String(), Err: err}
		}
		if typ == unix.SOCK_STREAM {
			if err := unix.Listen(fd, proxyBacklog); err != nil {
				return &os.SyscallError{Syscall: "listen", Err: err}
			}
		}
		return nil
	}()
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// proxy is a net run's sockets in its box and the loops that serve them.
type proxy struct {
	bn     *boxNet
	bounds *bounds
	mu     sync.Mutex // serializes take, which is called from one goroutine at a time
	take   func(net.Conn) bool
	closed bool // under mu: take is not called again
	wg     sync.WaitGroup
	once   sync.Once
}

// serveProxy hands the connections the program makes to bn's proxy and
// direct listeners, and the resolver's lookups, to take (see
// acceptLoop), until close. logf notes when the run reached
// MaxNetStreams.
func serveProxy(bn *boxNet, take func(net.Conn) bool, logf func(string)) *proxy {
	p := &proxy{bn: bn, bounds: newBounds(), take: take}
	r := newResolver(func(name string) bool {
		return lookup(name, func(c net.Conn) bool {
			if !p.bounds.acquire() {
				c.Close()
				return false
			}
			if !p.bounds.count() {
				p.bounds.release()
				c.Close()
				return false
			}
			return p.hand(&boxConn{Conn: c, release: p.bounds.release})
		})
	})
	loop := func(l *net.TCPListener, take func(*boxConn) bool) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if acceptLoop(l, take, p.bounds) {
				logf("the program opened " + strconv.Itoa(wire.MaxNetStreams) + " connections, the most a run may: its box takes no more")
			}
		}()
	}
	loop(bn.proxy, func(c *boxConn) bool { return p.hand(c) })
	for _, l := range bn.direct {
		loop(l, func(c *boxConn) bool {
			go func() {
				if d := direct(c, r); d != nil {
					p.hand(d)
				}
			}()
			return true
		})
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		serveDNS(bn.dns, r)
	}()
	return p
}

// hand gives c to take, or closes it once the proxy is closed or take
// did not take it.
func (p *proxy) hand(c net.Conn) bool {
	p.mu.Lock()
	ok := !p.closed && p.take(c)
	p.mu.Unlock()
	if !ok {
		c.Close()
	}
	return ok
}

// close closes the sockets and waits for their loops: once it returns,
// take is not called again. The connections handed over are take's to
// close, the run's end or not. close may be called more than once.
func (p *proxy) close() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.bn.close()
		close(p.bounds.done)
	})
	p.wg.Wait()
}

// acceptLoop accepts connections on l and hands each to take, which
// says whether it took the connection (and will close it); one it did
// not take is closed here. At most wire.MaxNetOpen handed over are open
// at once, counted in b with the run's other sockets: until one is
// closed the rest wait in the listener's backlog. Once b has
// wire.MaxNetStreams in all it closes l, so that further connects are
// refused at once rather than accepted and dropped, and returns true.
// It returns false when l is closed or b's done is.
func acceptLoop(l net.Listener, take func(*boxConn) bool, b *bounds) bool {
	for {
		if !b.acquire() {
			return false
		}
		c, err := l.Accept()
		if err != nil {
			b.release()
			if errors.Is(err, net.ErrClosed) {
				return false
			}
			// Out of descriptors or memory, for a moment: the
			// connections wait in the backlog meanwhile.
			select {
			case <-time.After(50 * time.Millisecond):
			case <-b.done:
				return false
			}
			continue
		}
		if !b.count() {
			c.Close()
			b.release()
			l.Close()
			return true
		}
		bc := &boxConn{Conn: c, release: b.release}
		if !take(bc) {
			bc.Close()
		}
		if b.full() {
			l.Close()
			return true
		}
	}
}

// boxConn is a connection from the box, handed over: closing it frees
// its place among the MaxNetOpen. CloseWrite half-closes a TCP one.
type boxConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *boxConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (c *boxConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
