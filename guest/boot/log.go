package boot

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// queueLines bounds the lines waiting for the console. When the console
// stops draining (nobody reads the serial port on the host), lines are
// dropped and counted rather than blocking the agent.
const queueLines = 256

// Log writes timestamped lines to the console from a goroutine of its own
// and keeps the most recent ones for the console prompt's "log" command.
type Log struct {
	uptime func() time.Duration
	queue  chan entry

	mu      sync.Mutex
	ring    []string
	next    int
	full    bool
	dropped int
}

// NewLog starts a logger writing to w and keeping the last keep lines.
// uptime stamps each line; the guest passes the time since boot, so the
// agent's lines sort with the kernel's.
func NewLog(w io.Writer, keep int, uptime func() time.Duration) *Log {
	l := &Log{
		uptime: uptime,
		queue:  make(chan entry, queueLines),
		ring:   make([]string, keep),
	}
	go l.drain(w)
	return l
}

// Printf logs one line. It never blocks on the console.
func (l *Log) Printf(format string, args ...any) {
	msg := strings.TrimRight(fmt.Sprintf(format, args...), "\n")
	line := fmt.Sprintf("[%9.3f] %s", l.uptime().Seconds(), msg)
	l.mu.Lock()
	l.ring[l.next] = line
	l.next = (l.next + 1) % len(l.ring)
	l.full = l.full || l.next == 0
	l.mu.Unlock()
	select {
	case l.queue <- entry{line: line}:
	default:
		l.mu.Lock()
		l.dropped++
		l.mu.Unlock()
	}
}

// Lines returns the kept lines, oldest first.
func (l *Log) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.full {
		return append([]string(nil), l.ring[:l.next]...)
	}
	return append(append([]string(nil), l.ring[l.next:]...), l.ring[:l.next]...)
}

// Flush waits up to d for the queued lines to reach the console: a fatal
// error's last words must be written before the VM powers off.
func (l *Log) Flush(d time.Duration) {
	done := make(chan struct{})
	timeout := time.After(d)
	select {
	case l.queue <- entry{flushed: done}:
	case <-timeout:
		return
	}
	select {
	case <-done:
	case <-timeout:
	}
}

// entry is a line for the console, or a Flush marker.
type entry struct {
	line    string
	flushed chan struct{}
}

func (l *Log) drain(w io.Writer) {
	for e := range l.queue {
		if e.flushed != nil {
			close(e.flushed)
			continue
		}
		l.mu.Lock()
		lost := l.dropped
		l.dropped = 0
		l.mu.Unlock()
		if lost > 0 {
			fmt.Fprintf(w, "(console: %d log lines dropped while it was not draining)\n", lost)
		}
		io.WriteString(w, e.line+"\n")
	}
}
