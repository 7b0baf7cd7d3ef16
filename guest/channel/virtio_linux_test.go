package channel

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fakePort makes a sysfs directory with two ports and a regular file as
// the device node of the one named "pybox".
func fakePort(t *testing.T) *Port {
	t.Helper()
	dir := t.TempDir()
	sysfs, dev := filepath.Join(dir, "sys"), filepath.Join(dir, "dev")
	for port, name := range map[string]string{"vport0p0": "", "vport1p1": "other\n", "vport2p1": "pybox\n"} {
		os.MkdirAll(filepath.Join(sysfs, port), 0o755)
		os.WriteFile(filepath.Join(sysfs, port, "name"), []byte(name), 0o644)
	}
	os.MkdirAll(dev, 0o755)
	os.WriteFile(filepath.Join(dev, "vport2p1"), nil, 0o644)
	return newPort("pybox", sysfs, dev, t.Logf)
}

func TestPortFindsByName(t *testing.T) {
	p := fakePort(t)
	path, err := p.find()
	if err != nil || filepath.Base(path) != "vport2p1" {
		t.Fatalf("find: %q, %v", path, err)
	}
	p.name = "missing"
	if _, err := p.find(); err == nil {
		t.Fatal("found a port that does not exist")
	}
}

// One connection at a time: the second Accept waits for Close.
func TestPortOneConnectionAtATime(t *testing.T) {
	p := fakePort(t)
	c1, err := p.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan io.ReadWriteCloser)
	go func() {
		c2, err := p.Accept()
		if err != nil {
			t.Error(err)
		}
		got <- c2
	}()
	select {
	case <-got:
		t.Fatal("second Accept returned while the first connection was open")
	case <-time.After(50 * time.Millisecond):
	}
	c1.Close()
	select {
	case c2 := <-got:
		c2.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("second Accept did not return after Close")
	}
	p.Close()
	if _, err := p.Accept(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// script plays a port: each step is what one read returns.
type script struct {
	steps []string // "" is a read of 0 bytes: host not connected
	reads int
}

func (s *script) Read(b []byte) (int, error) {
	s.reads++
	if len(s.steps) == 0 {
		return 0, io.EOF
	}
	step := s.steps[0]
	s.steps = s.steps[1:]
	if step == "" {
		return 0, io.EOF
	}
	return copy(b, step), nil
}
func (s *script) Write(b []byte) (int, error) { return len(b), nil }
func (s *script) Close() error                { return nil }

func newConn(rw io.ReadWriteCloser) *portConn {
	return &portConn{rw: rw, closing: make(chan struct{}), release: func() {}}
}

// Before the host connects, reads of 0 bytes are waited out; after it
// has sent data, a read of 0 bytes is the end of the session.
func TestPortConnWaitsForHostThenEnds(t *testing.T) {
	s := &script{steps: []string{"", "", "", "hello"}}
	c := newConn(s)
	b := make([]byte, 16)
	start := time.Now()
	n, err := c.Read(b)
	if err != nil || string(b[:n]) != "hello" {
		t.Fatalf("read %q, %v", b[:n], err)
	}
	if d := time.Since(start); d < 3*pollFirst {
		t.Fatalf("three empty reads took %v: it did not sleep between them", d)
	}
	if n, err := c.Read(b); n != 0 || err != io.EOF {
		t.Fatalf("after the host left: %d, %v; want io.EOF", n, err)
	}
}

func TestPortConnCloseStopsWaiting(t *testing.T) {
	s := &script{steps: make([]string, 1000)}
	c := newConn(s)
	errc := make(chan error)
	go func() {
		_, err := c.Read(make([]byte, 4))
		errc <- err
	}()
	time.Sleep(30 * time.Millisecond)
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("read after Close: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Read did not return after Close")
	}
	if s.reads > 20 {
		t.Fatalf("%d reads in 30 ms: the wait spins", s.reads)
	}
}
