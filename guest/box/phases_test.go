//go:build linux

package box

import (
	"testing"
	"time"
)

func TestPhases(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	m := milestones{begun: t0, cgroup: ms(1.5), staged: ms(4), spawned: ms(10), settled: ms(320), collected: ms(321), cleaned: ms(340)}
	if got, want := m.phases(ms(60), ms(300)),
		"340.0 ms in all: cgroup 1.5, staging 2.5, spawn 6.0, box-init 50.0, program 240.0, settle 20.0, output 1.0, cleanup 19.0 (ms)"; got != want {
		t.Errorf("phases:\n got %s\nwant %s", got, want)
	}
	// box-init never reported a good posture: the program never started.
	if got, want := m.phases(time.Time{}, ms(300)),
		"340.0 ms in all: cgroup 1.5, staging 2.5, spawn 6.0, box-init -, program -, settle 20.0, output 1.0, cleanup 19.0 (ms)"; got != want {
		t.Errorf("phases without a start:\n got %s\nwant %s", got, want)
	}
}
