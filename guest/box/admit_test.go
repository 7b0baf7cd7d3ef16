//go:build linux

package box

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"pybox/shared/wire"
)

// memoryRunner is a Runner whose guest has total bytes of memory of which
// the kernel and agent use used, and no cgroups (the boxes' own holdings
// are the VM's to measure).
func memoryRunner(total, used int64, runsAtOnce int) *Runner {
	return &Runner{cfg: Config{
		Images:     map[string]wire.ImageInfo{"stdlib": {Name: "stdlib"}},
		RunsAtOnce: runsAtOnce,
		Memory: func() (*wire.GuestMemory, error) {
			return &wire.GuestMemory{Total: total, Used: used, Free: total - used}, nil
		},
	}}
}

func admitRun(id string) *wire.Run { return &wire.Run{RunID: id, Image: "stdlib"} }

// A run is admitted while its bound fits what is left once the runs
// admitted, the guest and the headroom have theirs; the next is refused
// with what holds the memory and what to do, and admitted again once a
// run gives its room back.
func TestAdmitByMemory(t *testing.T) {
	// Room for exactly two runs: the guest's 100 MiB, the shared
	// headroom, and two runs' bounds with their share of it.
	total := int64(100<<20) + headroomGuest + 2*runNeeds
	b := memoryRunner(total, 100<<20, 2)
	for _, id := range []string{"a", "b"} {
		if err := b.Admit(admitRun(id)); err != nil {
			t.Fatalf("run %s refused: %v", id, err)
		}
	}
	err := b.Admit(admitRun("c"))
	var full *NoRoomError
	if !errors.As(err, &full) || !errors.Is(err, ErrNoRoom) || !full.NoMemory() {
		t.Fatalf("a third run: %v, want a NoRoomError", err)
	}
	for _, want := range []string{"2 running hold up to 1024 MiB", "the guest itself 100 MiB", "a run needs 528 MiB", "Nothing ran", "pybox vm start --runs 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	room := b.Room()
	if room.Runs != 2*memoryMax || room.Headroom != headroomGuest+2*headroomPerRun || room.Left != 0 || room.Total != total {
		t.Errorf("room %+v", room)
	}
	if err := b.Admit(admitRun("a")); err == nil || errors.Is(err, ErrNoRoom) {
		t.Errorf("a run admitted twice: %v", err)
	}
	b.release("a")
	if err := b.Admit(admitRun("c")); err != nil {
		t.Errorf("after a's end: %v", err)
	}
	b.Cancel("c") // admitted, never run: its room is given back
	if err := b.Admit(admitRun("d")); err != nil {
		t.Errorf("after c was given back: %v", err)
	}
}

// The guest's memory counts as whole while the host's balloon holds part
// of it: the host gives it back before it sends a run.
func TestAdmitCountsBalloonedMemory(t *testing.T) {
	total := int64(100<<20) + headroomGuest + 2*runNeeds
	mem := &wire.GuestMemory{Total: total, Used: 100 << 20}
	b := memoryRunner(0, 0, 2)
	b.cfg.Memory = func() (*wire.GuestMemory, error) { m := *mem; return &m, nil }
	if r := b.Room(); r.Left != 2*runNeeds {
		t.Fatalf("room %+v, want %d left", r, 2*runNeeds)
	}
	mem.Total = total - 600<<20 // the balloon holds 600 MiB
	for _, id := range []string{"a", "b"} {
		if err := b.Admit(admitRun(id)); err != nil {
			t.Fatalf("run %s refused while ballooned: %v", id, err)
		}
	}
}

// Admissions at once never admit more than fits.
func TestAdmitConcurrently(t *testing.T) {
	total := int64(100<<20) + headroomGuest + 3*runNeeds
	b := memoryRunner(total, 100<<20, 3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Admit(admitRun(fmt.Sprint("r", i))) == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 3 {
		t.Errorf("%d runs admitted at once, want 3", admitted)
	}
}

// A run that reads the guest's memory and cannot is refused, not
// admitted blind.
func TestAdmitWithoutMemoryReading(t *testing.T) {
	b := memoryRunner(0, 0, 1)
	b.cfg.Memory = func() (*wire.GuestMemory, error) { return nil, errors.New("no /proc/meminfo") }
	if err := b.Admit(admitRun("a")); err == nil || !strings.Contains(err.Error(), "meminfo") {
		t.Errorf("Admit without a memory reading: %v", err)
	}
}
