package supervisor

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// consoleLogMax is where the console log rotates; one older file is kept,
// so the log never takes more than twice this.
const consoleLogMax = 1 << 20

// rotatingLog is a file that moves itself to path+".1" when it reaches
// max bytes.
type rotatingLog struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File
	size int64
}

// openRotatingLog starts a fresh log at path; the previous one (an earlier
// boot's) becomes path+".1".
func openRotatingLog(path string, max int64) (*rotatingLog, error) {
	l := &rotatingLog{path: path, max: max}
	if err := l.rotate(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *rotatingLog) rotate() error {
	if l.f != nil {
		l.f.Close()
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	l.f, l.size = f, 0
	return nil
}

func (l *rotatingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.size+int64(len(p)) > l.max && l.size > 0 {
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

func (l *rotatingLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// console copies the VM's serial console into the log and to every
// attached `pybox vm console`, and what they type into the VM.
type console struct {
	log io.Writer

	mu       sync.Mutex
	vm       io.Writer // the current VM's console input; nil between attempts
	attached map[net.Conn]bool
}

func newConsole(log io.Writer) *console {
	return &console{log: log, attached: map[net.Conn]bool{}}
}

// pump copies one VM's console output until it ends (the VM exited).
func (c *console) pump(vm io.ReadWriter) {
	c.mu.Lock()
	c.vm = vm
	c.mu.Unlock()
	buf := make([]byte, 4096)
	for {
		n, err := vm.Read(buf)
		if n > 0 {
			c.log.Write(buf[:n])
			c.broadcast(buf[:n])
		}
		if err != nil {
			break
		}
	}
	c.mu.Lock()
	if c.vm == vm {
		c.vm = nil
	}
	c.mu.Unlock()
	if cl, ok := vm.(io.Closer); ok {
		cl.Close()
	}
}

// note writes a line of the supervisor's own into the console log and to
// attached consoles, so a reader can tell attempts apart.
func (c *console) note(line string) {
	b := []byte("\r\n--- pybox: " + line + " ---\r\n")
	c.log.Write(b)
	c.broadcast(b)
}

func (c *console) broadcast(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a := range c.attached {
		// A viewer that does not keep up is dropped, never waited for.
		a.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := a.Write(p); err != nil {
			a.Close()
			delete(c.attached, a)
		}
	}
}

// serve accepts `pybox vm console` connections until l is closed.
func (c *console) serve(l net.Listener) {
	for {
		a, err := l.Accept()
		if err != nil {
			return
		}
		c.mu.Lock()
		c.attached[a] = true
		c.mu.Unlock()
		go c.input(a)
	}
}

// input types what an attached console sends into the VM.
func (c *console) input(a net.Conn) {
	buf := make([]byte, 1024)
	for {
		n, err := a.Read(buf)
		if n > 0 {
			c.mu.Lock()
			vm := c.vm
			c.mu.Unlock()
			if vm != nil {
				vm.Write(buf[:n])
			}
		}
		if err != nil {
			break
		}
	}
	c.mu.Lock()
	delete(c.attached, a)
	c.mu.Unlock()
	a.Close()
}

// closeAll detaches every console.
func (c *console) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a := range c.attached {
		a.Close()
		delete(c.attached, a)
	}
}
