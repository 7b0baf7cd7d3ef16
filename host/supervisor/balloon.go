package supervisor

import (
	"sync"
	"time"

	"pybox/host/vm"
	"pybox/shared/wire"
)

// balloon drives the memory of a VM whose guest does not give freed
// memory back by itself (vz's traditional balloon): after each ping it
// lowers the guest's memory to what it needs once it has run nothing for
// vm.BalloonIdle, and gives it all back before each run is sent (run)
// and whenever a run is seen. The guest admits runs by its whole memory,
// ballooned or not: the second of two runs that arrive while it is idle
// finds the memory given back, not a refusal.
type balloon struct {
	whole int64 // the VM's memory, in bytes

	mu     sync.Mutex
	busyAt time.Time // when the guest was last seen running something
	target int64     // the target set last; whole at first
}

func newBalloon(memoryMiB int, now time.Time) *balloon {
	whole := int64(memoryMiB) << 20
	return &balloon{whole: whole, busyAt: now, target: whole}
}

// balloonStep is the least change of target worth making: smaller moves
// would only make the guest's balloon driver churn.
const balloonStep = 64 << 20

// next is the target for what the guest said at now, and whether it
// differs enough from the last one to be set.
func (b *balloon) next(st *wire.AgentStatus, now time.Time) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	want := b.whole
	switch {
	case st == nil || len(st.Runs) > 0 || st.Memory == nil:
		// Running, or not saying what it holds: all of it.
		b.busyAt = now
	case now.Sub(b.busyAt) >= vm.BalloonIdle:
		want = vm.BalloonTarget(*st.Memory, int(b.whole>>20))
	}
	if want == b.target || (want != b.whole && abs(want-b.target) < balloonStep) {
		return b.target, false
	}
	b.target = want
	return want, true
}

// run is the target as a run is about to be sent: all of it, and whether
// that is a change.
func (b *balloon) run(now time.Time) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.busyAt = now
	if b.target == b.whole {
		return b.whole, false
	}
	b.target = b.whole
	return b.whole, true
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// steer sets the machine's memory target after a ping answered st.
func (s *supervisor) steer(b *balloon, m *vm.Machine, st *wire.AgentStatus) {
	target, change := b.next(st, time.Now())
	s.setTarget(b, m, target, change)
}

// setTarget sets the machine's memory target, when it changed.
func (s *supervisor) setTarget(b *balloon, m *vm.Machine, target int64, change bool) {
	if !change || !m.SetMemoryTarget(target) {
		return
	}
	if target == b.whole {
		s.logf("memory: the guest has all its %d MiB again", target>>20)
	} else {
		s.logf("memory: idle for %v: the guest keeps %d MiB of %d and gives the rest back", vm.BalloonIdle, target>>20, b.whole>>20)
	}
}
