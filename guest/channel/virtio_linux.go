package channel

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// PortName is the name the host gives the virtio-serial port
// (-device virtserialport,name=pybox).
const PortName = "pybox"

// Polling bounds. The guest has no udev and the kernel adds ports after
// it has started PID 1, so the port is looked for until it shows; and a
// port whose host side is not connected reads 0 bytes at once (poll says
// POLLHUP), so the only way to wait for the host is to sleep and retry.
const (
	pollFirst = 5 * time.Millisecond
	pollMax   = 100 * time.Millisecond
	findSlow  = 2 * time.Second // after looking this long, look less often
	findMax   = time.Second
)

// Port is the virtio-serial port as a Listener. The port can be open only
// once, so Accept hands out one connection at a time: it waits until the
// previous one is closed, then reopens the port. Reopening is also how a
// connection is dropped: the kernel discards what it buffered for the
// closed port, and reads start afresh.
type Port struct {
	name  string
	sysfs string // /sys/class/virtio-ports
	dev   string // /dev
	logf  func(string, ...any)
	free  chan struct{} // holds a token while no connection is open
	quit  chan struct{}
	once  sync.Once
	count int
}

// VirtioPort returns a Listener for the virtio-serial port with this name.
// It does not fail when the port is missing: Accept waits for it.
func VirtioPort(name string, logf func(string, ...any)) *Port {
	return newPort(name, "/sys/class/virtio-ports", "/dev", logf)
}

func newPort(name, sysfs, dev string, logf func(string, ...any)) *Port {
	p := &Port{name: name, sysfs: sysfs, dev: dev, logf: logf,
		free: make(chan struct{}, 1), quit: make(chan struct{})}
	p.free <- struct{}{}
	return p
}

func (p *Port) String() string { return "virtio-serial port " + p.name }

// Close makes Accept return; an open connection stays open.
func (p *Port) Close() error {
	p.once.Do(func() { close(p.quit) })
	return nil
}

// Accept waits until no connection is open, finds the port and opens it.
func (p *Port) Accept() (io.ReadWriteCloser, error) {
	select {
	case <-p.free:
	case <-p.quit:
		return nil, errClosed(p)
	}
	select {
	case <-p.quit:
		p.free <- struct{}{}
		return nil, errClosed(p)
	default:
	}
	f, err := p.open()
	if err != nil {
		p.free <- struct{}{}
		return nil, err
	}
	p.count++
	c := &portConn{rw: f, name: fmt.Sprintf("%s#%d", p.name, p.count), closing: make(chan struct{})}
	c.release = func() { p.free <- struct{}{} }
	return c, nil
}

// open looks for the port until it finds it and can open it, or Close.
func (p *Port) open() (*os.File, error) {
	start := time.Now()
	wait := pollFirst
	warned := false
	for {
		path, err := p.find()
		if err == nil {
			f, oerr := os.OpenFile(path, os.O_RDWR, 0)
			if oerr == nil {
				return f, nil
			}
			err = oerr
		}
		if !warned && time.Since(start) > findSlow {
			p.logf("channel: still looking for %s: %v", p, err)
			warned = true
		}
		select {
		case <-time.After(wait):
		case <-p.quit:
			return nil, errClosed(p)
		}
		wait = min(wait*2, findMax)
	}
}

// find returns the device node of the port with p's name.
func (p *Port) find() (string, error) {
	names, _ := filepath.Glob(filepath.Join(p.sysfs, "*", "name"))
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err == nil && strings.TrimSpace(string(b)) == p.name {
			return filepath.Join(p.dev, filepath.Base(filepath.Dir(n))), nil
		}
	}
	return "", fmt.Errorf("channel: no virtio-serial port named %q in %s (the host adds it with -device virtserialport,name=%s)", p.name, p.sysfs, p.name)
}

func errClosed(p *Port) error { return fmt.Errorf("channel: %s: %w", p, os.ErrClosed) }

// portConn is one session on the port.
type portConn struct {
	rw      io.ReadWriteCloser
	name    string
	seen    bool // the host has sent something in this session
	closing chan struct{}
	once    sync.Once
	release func()
}

func (c *portConn) String() string { return c.name }

// Read reads from the port. Zero bytes means the host side is not
// connected. Before the host has sent anything that is a wait: sleep and
// retry, backing off, never spinning. After it has, the host went away
// mid-session and Read says io.EOF, so the agent drops the connection and
// the next Accept starts clean for the next host.
func (c *portConn) Read(b []byte) (int, error) {
	wait := pollFirst
	for {
		n, err := c.rw.Read(b)
		if n > 0 {
			c.seen = true
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if c.seen {
			return 0, io.EOF
		}
		select {
		case <-time.After(wait):
		case <-c.closing:
			return 0, os.ErrClosed
		}
		wait = min(wait*2, pollMax)
	}
}

func (c *portConn) Write(b []byte) (int, error) { return c.rw.Write(b) }

// SetWriteDeadline bounds a write to a host that does not read: the port
// is pollable, so *os.File supports deadlines.
func (c *portConn) SetWriteDeadline(t time.Time) error {
	if d, ok := c.rw.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return d.SetWriteDeadline(t)
	}
	return nil
}

// Close closes the port and lets Accept open it again.
func (c *portConn) Close() error {
	err := os.ErrClosed
	c.once.Do(func() {
		close(c.closing)
		err = c.rw.Close()
		c.release()
	})
	return err
}
