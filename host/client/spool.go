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
type spool struct {
	take  func(*wire.OutputChunk)
	limit int64

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []*wire.OutputChunk
	held   int64
	closed bool
	done   chan struct{}
}

func newSpool(take func(*wire.OutputChunk), limit int64) *spool {
	s := &spool{take: take, limit: limit, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s
}

// put queues c, waiting while the parts not yet taken fill the spool.
func (s *spool) put(c *wire.OutputChunk) {
	n := int64(len(c.Data))
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.held > 0 && s.held+n > s.limit && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return
	}
	s.queue = append(s.queue, c)
	s.held += n
	s.cond.Broadcast()
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
