package client

import (
	"sync"

	"pybox/shared/wire"
)

// spool hands a run's output parts to the caller's take from a goroutine
// of its own, so that the connection's reader does not wait on the
// caller's disk. The supervisor drops a client that takes no frame for
// ten seconds (and the guest's channel stalls behind one that is slow),
// so a disk busy with someone else's writes would otherwise cost the run:
// its receipt lost and its cleanup unknown. It holds up to limit bytes of
// parts not yet taken, the run's own delivery bound, so one run's output
// fits whole; past that the reader waits, and the guest is slowed to what
// the disk takes.
//
// A part also costs memory beside its data (partCost), and empty parts
// hold no data: a guest (untrusted once user code has run) could flood
// them without end. What they cost is bounded apart from the data, by
// room for every part a run's own output may take, rather than counted
// into limit: limit stays the run's delivery bound as the caller set it,
// and a run of many small files, under a small limit, still fits whole.
type spool struct {
	take  func(*wire.OutputChunk)
	limit int64 // bytes of data
	room  int64 // bytes of partCost

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []*wire.OutputChunk
	held   int64 // data of the parts queued or being taken
	kept   int64 // their partCost
	closed bool
	done   chan struct{}
}

// partOverhead is what a part costs beside its data and strings: its
// struct and its slot in the queue, rounded up generously.
const partOverhead = 128

// partCost is what a part costs the spool beside its data.
func partCost(c *wire.OutputChunk) int64 {
	return partOverhead + int64(len(c.RunID)+len(c.Name))
}

func newSpool(take func(*wire.OutputChunk), limit int64) *spool {
	// A run's output is at most a part per file, and one more per
	// MaxOutputChunk of its data; each may have the longest names.
	parts := wire.MaxDeliveredFiles + limit/wire.MaxOutputChunk + 1
	room := parts * (partOverhead + wire.MaxRunIDBytes + wire.MaxFileNameBytes)
	s := &spool{take: take, limit: limit, room: room, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s
}

// put queues c, waiting while the parts not yet taken fill the spool.
func (s *spool) put(c *wire.OutputChunk) {
	n, k := int64(len(c.Data)), partCost(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.full(n, k) && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return
	}
	s.queue = append(s.queue, c)
	s.held += n
	s.kept += k
	s.cond.Broadcast()
}

// full reports whether a part of n bytes of data, costing k, must wait.
// One past a bound goes when nothing else is held, so that it is not
// kept out for good.
func (s *spool) full(n, k int64) bool {
	return s.held > 0 && s.held+n > s.limit || s.kept > 0 && s.kept+k > s.room
}

func (s *spool) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		c := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()
		s.take(c)
		s.mu.Lock()
		s.held -= int64(len(c.Data))
		s.kept -= partCost(c)
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// drain waits until every part queued has been taken, then stops the
// spool: a part that comes later is dropped.
func (s *spool) drain() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
}
