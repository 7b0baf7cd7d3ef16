package boot

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLogRingAndConsole(t *testing.T) {
	var out syncBuffer
	l := NewLog(&out, 3, func() time.Duration { return 1500 * time.Millisecond })
	for i := 1; i <= 5; i++ {
		l.Printf("line %d\n", i)
	}
	l.Flush(time.Second)
	lines := l.Lines()
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "line 3") || !strings.HasSuffix(lines[2], "line 5") {
		t.Fatalf("ring kept %q, want lines 3..5", lines)
	}
	if want := "[    1.500] line 1\n"; !strings.HasPrefix(out.String(), want) {
		t.Fatalf("console got %q, want it to start with %q", out.String(), want)
	}
	if n := strings.Count(out.String(), "\n"); n != 5 {
		t.Fatalf("console got %d lines, want 5", n)
	}
}

// blockedWriter never returns: a console nobody drains.
type blockedWriter struct{ block chan struct{} }

func (w blockedWriter) Write(p []byte) (int, error) { <-w.block; return len(p), nil }

func TestLogNeverBlocks(t *testing.T) {
	w := blockedWriter{block: make(chan struct{})}
	defer close(w.block)
	l := NewLog(w, 10, func() time.Duration { return 0 })
	done := make(chan struct{})
	go func() {
		for i := 0; i < 10*queueLines; i++ {
			l.Printf("line %d", i)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Printf blocked on a console that does not drain")
	}
	start := time.Now()
	l.Flush(50 * time.Millisecond)
	if time.Since(start) > time.Second {
		t.Fatal("Flush did not give up")
	}
	if got := l.Lines(); got[9] != fmt.Sprintf("[    0.000] line %d", 10*queueLines-1) {
		t.Fatalf("last kept line %q", got[9])
	}
}
