package client

import (
	"fmt"
	"sync"
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
