package supervisor

import (
	"time"

	"pybox/host/vm"
	"pybox/shared/wire"
)

// balloon drives the memory of a VM whose guest does not give freed
// memory back by itself (vz's traditional balloon): after each ping it
// lowers the guest's memory to what it needs once it has run nothing for
// vm.BalloonIdle, and gives it all back as soon as a run is seen.
type balloon struct {
	whole  int64     // the VM's memory, in bytes
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
	want := b.whole
	switch {
	case st == nil || st.Run != nil || st.Memory == nil:
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

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// steer sets the machine's memory target after a ping answered st.
func (s *supervisor) steer(b *balloon, m *vm.Machine, st *wire.AgentStatus) {
	target, change := b.next(st, time.Now())
	if !change || !m.SetMemoryTarget(target) {
		return
	}
	if target == b.whole {
		s.logf("memory: the guest has all its %d MiB again", target>>20)
	} else {
		s.logf("memory: idle for %v: the guest keeps %d MiB of %d and gives the rest back", vm.BalloonIdle, target>>20, b.whole>>20)
	}
}
