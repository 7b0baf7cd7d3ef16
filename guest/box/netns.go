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

// listenIn makes a socket listening at proxyAddr in the network namespace
// of the process pid (box-init, in the agent's pid namespace), bringing
// up that namespace's lo first, which is what gives it 127.0.0.1.
// box-init brings lo up again itself later, which changes nothing.
func listenIn(pid int) (*net.TCPListener, error) {
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	type made struct {
		fd  int
		err error
	}
	done := make(chan made, 1)
	go func() {
		// This thread enters the box's network namespace and is never
		// unlocked, so it ends with this goroutine and no other
		// goroutine ever runs in the box's namespace.
		runtime.LockOSThread()
		fd, err := func() (int, error) {
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
				return -1, &os.SyscallError{Syscall: "setns(net)", Err: err}
			}
			if err := loopbackUp(); err != nil {
				return -1, err
			}
			return listenSocket()
		}()
		done <- made{fd, err}
	}()
	m := <-done
	if m.err != nil {
		return nil, m.err
	}
	f := os.NewFile(uintptr(m.fd), "box proxy")
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	return l.(*net.TCPListener), nil
}

// listenSocket makes the socket listening at proxyAddr, in the calling
// thread's network namespace.
func listenSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, &os.SyscallError{Syscall: "socket", Err: err}
	}
	err = func() error {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return &os.SyscallError{Syscall: "setsockopt(SO_REUSEADDR)", Err: err}
		}
		ap := netip.MustParseAddrPort(proxyAddr)
		sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		if err := unix.Bind(fd, sa); err != nil {
			return &os.SyscallError{Syscall: "bind " + proxyAddr, Err: err}
		}
		if err := unix.Listen(fd, proxyBacklog); err != nil {
			return &os.SyscallError{Syscall: "listen", Err: err}
		}
		return nil
	}()
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// proxy is a run's listener in its box and the loop that accepts from it.
type proxy struct {
	l     *net.TCPListener
	done  chan struct{} // closed by close: the loop stops waiting for a free stream
	ended chan struct{} // closed when the loop has returned
	once  sync.Once
}

// serveProxy accepts the program's connections on l and hands each to
// take (see acceptLoop) until close. logf notes when the run reached
// MaxNetStreams.
func serveProxy(l *net.TCPListener, take func(net.Conn) bool, logf func(string)) *proxy {
	p := &proxy{l: l, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(p.ended)
		if acceptLoop(l, take, p.done) {
			logf("the program opened " + strconv.Itoa(wire.MaxNetStreams) + " connections, the most a run may: its proxy takes no more")
		}
	}()
	return p
}

// close closes the listener and waits for the loop: once it returns,
// take is not called again. The connections handed over are take's to
// close, the run's end or not. close may be called more than once.
func (p *proxy) close() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		p.l.Close()
		close(p.done)
	})
	<-p.ended
}

// acceptLoop accepts connections on l and hands each to take, which
// says whether it took the connection (and will close it); one it did
// not take is closed here. At most wire.MaxNetOpen handed over are open
// at once: until one is closed the rest wait in the listener's backlog.
// After wire.MaxNetStreams in all it closes l, so that further connects
// are refused at once rather than accepted and dropped, and returns
// true. It returns false when l is closed or done is.
func acceptLoop(l net.Listener, take func(net.Conn) bool, done <-chan struct{}) bool {
	open := make(chan struct{}, wire.MaxNetOpen) // a token per connection open
	for n := 0; n < wire.MaxNetStreams; {
		select {
		case open <- struct{}{}:
		case <-done:
			return false
		}
		c, err := l.Accept()
		if err != nil {
			<-open
			if errors.Is(err, net.ErrClosed) {
				return false
			}
			// Out of descriptors or memory, for a moment: the
			// connections wait in the backlog meanwhile.
			select {
			case <-time.After(50 * time.Millisecond):
			case <-done:
				return false
			}
			continue
		}
		n++
		bc := &boxConn{TCPConn: c.(*net.TCPConn), open: open}
		if !take(bc) {
			bc.Close()
		}
	}
	l.Close()
	return true
}

// boxConn is a connection from the box, handed over: closing it frees
// its place among the MaxNetOpen. It keeps *net.TCPConn's methods
// (CloseWrite for a half-close, deadlines).
type boxConn struct {
	*net.TCPConn
	open <-chan struct{}
	once sync.Once
}

func (c *boxConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(func() { <-c.open })
	return err
}
