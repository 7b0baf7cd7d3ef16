package supervisor

import (
	"testing"
	"time"

	"pybox/host/vm"
	"pybox/shared/wire"
)

func TestBalloonGivesBackWhenIdleAndAllWhenBusy(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	b := newBalloon(2048, t0)
	idle := &wire.AgentStatus{Memory: &wire.GuestMemory{Total: 2048 << 20, Used: 120 << 20, Cache: 300 << 20, Free: 1628 << 20}}
	busy := &wire.AgentStatus{Memory: idle.Memory, Runs: []wire.RunProgress{{}}}
	type step struct {
		at     time.Duration
		st     *wire.AgentStatus
		target int64
		change bool
	}
	for i, s := range []step{
		{5 * time.Second, idle, 2048 << 20, false}, // not idle long enough
		{vm.BalloonIdle, idle, 888 << 20, true},    // used + a run's 512 MiB + 256 MiB
		{vm.BalloonIdle + 5*time.Second, idle, 888 << 20, false},
		{vm.BalloonIdle + 10*time.Second, busy, 2048 << 20, true},  // a run: all of it at once
		{vm.BalloonIdle + 15*time.Second, idle, 2048 << 20, false}, // idle again, but not for long
		{2*vm.BalloonIdle + 10*time.Second, idle, 888 << 20, true},
		{2*vm.BalloonIdle + 15*time.Second, nil, 2048 << 20, true}, // no status: all of it
	} {
		target, change := b.next(s.st, t0.Add(s.at))
		if target != s.target || change != s.change {
			t.Errorf("step %d: target %d MiB, change %v; want %d MiB, %v", i, target>>20, change, s.target>>20, s.change)
		}
	}
}

func TestBalloonIgnoresSmallMoves(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	b := newBalloon(2048, t0)
	at := t0.Add(vm.BalloonIdle)
	mem := func(used int64) *wire.AgentStatus {
		return &wire.AgentStatus{Memory: &wire.GuestMemory{Total: 2048 << 20, Used: used << 20}}
	}
	if target, change := b.next(mem(200), at); !change || target != 968<<20 {
		t.Fatalf("first: %d MiB, %v", target>>20, change)
	}
	if _, change := b.next(mem(230), at); change {
		t.Errorf("a 30 MiB move was made")
	}
	if target, change := b.next(mem(300), at); !change || target != 1068<<20 {
		t.Errorf("a 100 MiB move: %d MiB, %v", target>>20, change)
	}
}

func TestBalloonTargetKeepsFloorAndCeiling(t *testing.T) {
	for _, c := range []struct {
		used   int64
		memory int
		want   int64
	}{
		{0, 4096, 768 << 20},          // the floor
		{100 << 20, 4096, 868 << 20},  // used + 512 + 256 MiB
		{900 << 20, 1024, 1024 << 20}, // never above the VM's memory
	} {
		if got := vm.BalloonTarget(wire.GuestMemory{Used: c.used}, c.memory); got != c.want {
			t.Errorf("used %d MiB of %d: %d MiB, want %d", c.used>>20, c.memory, got>>20, c.want>>20)
		}
	}
}

// A run about to be sent gets all the memory back first, before any ping
// has seen it: a second run arriving at an idle guest finds the memory
// its admission counts on. The next pings keep it whole until idle again.
func TestBalloonGivesAllBackBeforeARun(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	b := newBalloon(2048, t0)
	idle := &wire.AgentStatus{Memory: &wire.GuestMemory{Total: 2048 << 20, Used: 120 << 20}}
	if target, change := b.next(idle, t0.Add(vm.BalloonIdle)); !change || target == 2048<<20 {
		t.Fatalf("idle: %d MiB, %v", target>>20, change)
	}
	at := t0.Add(vm.BalloonIdle + time.Second)
	if target, change := b.run(at); !change || target != 2048<<20 {
		t.Errorf("before a run: %d MiB, change %v; want all 2048 MiB", target>>20, change)
	}
	if _, change := b.run(at); change {
		t.Errorf("a second run changed the target again")
	}
	if target, change := b.next(idle, at.Add(5*time.Second)); change || target != 2048<<20 {
		t.Errorf("a ping 5 s after the run: %d MiB, %v; want all of it, unchanged", target>>20, change)
	}
}
