package client

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pybox/shared/wire"
)

// A slow taker (a busy disk) does not hold up the reader while the parts
// fit the spool; every part is taken, in order, by the time drain returns.
func TestSpoolKeepsTheReaderGoing(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got []string
	s := newSpool(func(c *wire.OutputChunk) {
		<-release
		mu.Lock()
		got = append(got, c.Name)
		mu.Unlock()
	}, 10)
	put := make(chan struct{})
	go func() {
		for i := range 5 {
			s.put(&wire.OutputChunk{Name: fmt.Sprint(i), Data: []byte("ab")})
		}
		close(put)
	}()
	select {
	case <-put:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader waited on the taker with 10 bytes of room for 10 bytes")
	}
	close(release)
	s.drain()
	if fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Errorf("taken %v", got)
	}
}

// Past its bound the reader waits: a guest that sends more than the run
// may deliver is slowed to the taker, not held in memory.
func TestSpoolBound(t *testing.T) {
	release := make(chan struct{})
	s := newSpool(func(*wire.OutputChunk) { <-release }, 4)
	s.put(&wire.OutputChunk{Data: make([]byte, 3)})
	s.put(&wire.OutputChunk{Data: make([]byte, 1)}) // held 4 (or 1, if the first was taken)
	done := make(chan struct{})
	go func() {
		s.put(&wire.OutputChunk{Data: make([]byte, 4)})
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a part past the bound was queued while the taker was stuck")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	<-done
	s.drain()
}

// Empty parts hold no data, yet each costs memory (its struct and
// names): a guest (untrusted once user code has run) that floods them
// while the taker is stuck is slowed to the taker too, not held; every
// part put is still taken, in order.
func TestSpoolBoundsEmptyParts(t *testing.T) {
	release := make(chan struct{})
	var got []int64 // the spool's goroutine's until drain returns
	s := newSpool(func(c *wire.OutputChunk) {
		<-release
		got = append(got, c.Offset)
	}, 10)
	const n = 100_000
	var queued atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range int64(n) {
			s.put(&wire.OutputChunk{RunID: "r", Name: "f", Offset: i})
			queued.Add(1)
		}
	}()
	stuck := waitStuck(t, &queued, done)
	t.Logf("the reader waited after %d empty parts", stuck)
	// Room for a run's own parts (one per file, with names up to
	// wire.MaxFileNameBytes) holds a few times as many of these, not n.
	if bound := int64(4 * (wire.MaxDeliveredFiles + 1)); stuck > bound {
		t.Errorf("%d empty parts queued before the reader waited, want at most %d", stuck, bound)
	}
	close(release)
	<-done
	s.drain()
	if len(got) != n {
		t.Fatalf("%d parts taken, want %d", len(got), n)
	}
	for i, off := range got {
		if off != int64(i) {
			t.Fatalf("part %d taken as %d-th", off, i)
		}
	}
}

// waitStuck waits until the count of parts put stops growing, and
// returns it; the putter ending first (done) fails the test.
func waitStuck(t *testing.T, queued *atomic.Int64, done <-chan struct{}) int64 {
	t.Helper()
	last := int64(-1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-done:
			t.Fatalf("all %d parts were queued while the taker was stuck", queued.Load())
		case <-time.After(200 * time.Millisecond):
		}
		q := queued.Load()
		if q == last {
			return q
		}
		last = q
	}
	t.Fatalf("the reader never waited: %d parts queued", queued.Load())
	return 0
}
