package agent

import (
	"errors"
	"sync"
	"testing"
	"time"

	"pybox/shared/wire"
)

// The guest's clock is stepped to the host's time in a run request when
// it is behind it (a boot, a sleep) or ahead of it by more than a
// request's transit (the host's clock was set back), and left alone in
// between; a request without the host's time changes nothing.
func TestSyncClock(t *testing.T) {
	host := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		guest   time.Duration // the guest's clock minus the host's
		stepped bool
	}{
		{"behind by the RTC's second", -270 * time.Millisecond, true},
		{"behind after a sleep", -3 * time.Hour, true},
		{"a transit ahead", 4 * time.Millisecond, false},
		{"equal", 0, false},
		{"ahead by more than a transit: the host's clock stepped back", maxAhead + time.Millisecond, true},
	} {
		var set time.Time
		chk, err := syncClock(host.UnixNano(), func() time.Time { return host.Add(c.guest) },
			func(t time.Time) error { set = t; return nil })
		if err != nil || chk == nil || chk.Stepped != c.stepped || chk.OffsetMS != float64(c.guest.Microseconds())/1000 {
			t.Errorf("%s: %+v, %v", c.name, chk, err)
		}
		if c.stepped != !set.IsZero() || c.stepped && !set.Equal(host) {
			t.Errorf("%s: set to %v", c.name, set)
		}
	}
	chk, err := syncClock(0, time.Now, func(time.Time) error { t.Error("set without a host time"); return nil })
	if chk != nil || err != nil {
		t.Errorf("no host time: %+v, %v", chk, err)
	}
	boom := errors.New("EPERM")
	chk, err = syncClock(host.UnixNano(), func() time.Time { return host.Add(-time.Second) }, func(time.Time) error { return boom })
	if !errors.Is(err, boom) || chk == nil || chk.Stepped || chk.OffsetMS != -1000 {
		t.Errorf("a clock that cannot be set: %+v, %v", chk, err)
	}
}

// A run whose host time is ahead of the guest's clock has the clock set
// before it starts, and its receipt says how far off it was; a run
// without one leaves the clock alone and its receipt says nothing.
func TestRunSetsTheClock(t *testing.T) {
	r := newFakeRunner()
	var set []time.Time
	var mu sync.Mutex
	a := New(Config{Kernel: "6.1.0-test", Images: testImages, Runner: r, Logf: t.Logf, WriteTimeout: 2 * time.Second,
		SetClock: func(t time.Time) error { mu.Lock(); set = append(set, t); mu.Unlock(); return nil }})
	h := connect(t, a)
	h.hello()
	host := time.Now().Add(time.Hour)
	run := validRun("clock")
	run.HostTimeNS = host.UnixNano()
	id := h.send(&wire.Message{Type: wire.TypeRun, Run: run})
	<-r.started
	r.release <- struct{}{}
	rc := h.expect(id, wire.TypeReceipt).Result.Receipt
	if c := rc.Agent.Clock; c == nil || !c.Stepped || c.OffsetMS > -3_500_000 || c.OffsetMS < -3_700_000 {
		t.Errorf("the receipt's clock %+v, want about an hour behind, stepped", c)
	}
	mu.Lock()
	if len(set) != 1 || !set[0].Equal(time.Unix(0, host.UnixNano())) {
		t.Errorf("the clock was set to %v, want %v once", set, host)
	}
	mu.Unlock()

	id = h.send(&wire.Message{Type: wire.TypeRun, Run: validRun("no-clock")})
	<-r.started
	r.release <- struct{}{}
	if rc := h.expect(id, wire.TypeReceipt).Result.Receipt; rc.Agent.Clock != nil {
		t.Errorf("a run without the host's time: clock %+v", rc.Agent.Clock)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(set) != 1 {
		t.Errorf("the clock was set %d times", len(set))
	}
}
