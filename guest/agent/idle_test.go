package agent

import (
	"sync"
	"testing"
	"time"
)

// idleLog records what the idler did, in order.
type idleLog struct {
	mu   sync.Mutex
	what []string
}

func (l *idleLog) add(s string) error {
	l.mu.Lock()
	l.what = append(l.what, s)
	l.mu.Unlock()
	return nil
}

func (l *idleLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.what...)
}

// Memory goes back only once no run has come for the idle time, and
// giving it back stops as a run starts; runs that keep coming never give
// anything back.
func TestIdleGivesBackOnlyWhenIdle(t *testing.T) {
	var l idleLog
	d := newIdler(&Idle{After: 150 * time.Millisecond,
		Busy: func() error { return l.add("busy") }, GiveBack: func() error { return l.add("give back") }}, t.Logf)
	for range 5 { // runs 50 ms apart: never idle long enough
		d.started()
		time.Sleep(20 * time.Millisecond)
		d.ended()
		time.Sleep(50 * time.Millisecond)
	}
	if got := l.get(); len(got) != 0 {
		t.Fatalf("while runs came: %q", got)
	}
	time.Sleep(300 * time.Millisecond)
	if got := l.get(); len(got) != 1 || got[0] != "give back" {
		t.Fatalf("after the idle time: %q", got)
	}
	d.started()
	d.started() // a second start changes nothing
	if got := l.get(); len(got) != 2 || got[1] != "busy" {
		t.Fatalf("as a run starts: %q", got)
	}
	d.ended()
	d.started() // a run before the idle time: nothing given back
	time.Sleep(300 * time.Millisecond)
	if got := l.get(); len(got) != 2 {
		t.Fatalf("a run in progress gave back: %q", got)
	}
	var nothing *idler // a guest that keeps its memory
	nothing.started()
	nothing.ended()
}

// From boot on the guest counts as idle.
func TestIdleFromBoot(t *testing.T) {
	var l idleLog
	newIdler(&Idle{After: 50 * time.Millisecond, Busy: func() error { return l.add("busy") },
		GiveBack: func() error { return l.add("give back") }}, t.Logf)
	time.Sleep(200 * time.Millisecond)
	if got := l.get(); len(got) != 1 || got[0] != "give back" {
		t.Fatalf("%q", got)
	}
}
