package reap

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func start(t *testing.T, script string) int {
	t.Helper()
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", script}, &os.ProcAttr{})
	if err != nil {
		t.Fatalf("start sh: %v", err)
	}
	return p.Pid
}

// waitReaped waits until the loop has taken pid's status.
func waitReaped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		_, ok := done[pid]
		mu.Unlock()
		if ok {
			return
		}
	}
	t.Fatalf("pid %d was not reaped within 5 s", pid)
}

func TestWaitAfterExit(t *testing.T) {
	Start()
	pid := start(t, "exit 3")
	waitReaped(t, pid)
	ws, ru := Wait(pid)
	if !ws.Exited() || ws.ExitStatus() != 3 {
		t.Fatalf("status %v, want exit 3", ws)
	}
	if ru == nil {
		t.Fatal("no rusage")
	}
	if _, n := Stats(); n != 0 {
		t.Fatalf("%d statuses still kept after the claim", n)
	}
}

func TestWaitBeforeExit(t *testing.T) {
	Start()
	pid := start(t, "sleep 0.2; exit 4")
	ws, _ := Wait(pid)
	if ws.ExitStatus() != 4 {
		t.Fatalf("status %v, want exit 4", ws)
	}
}

func TestWaitSignalled(t *testing.T) {
	Start()
	pid := start(t, "kill -TERM $$")
	ws, _ := Wait(pid)
	if !ws.Signaled() || ws.Signal() != unix.SIGTERM {
		t.Fatalf("status %v, want killed by SIGTERM", ws)
	}
}

// A status kept for a pid that is alive again belongs to an earlier
// process with that pid and must not be handed to the new one's waiter.
func TestStaleStatusIgnored(t *testing.T) {
	Start()
	pid := start(t, "sleep 0.2; exit 5")
	mu.Lock()
	remember(pid, exit{status: 0})
	mu.Unlock()
	ws, _ := Wait(pid)
	if ws.ExitStatus() != 5 {
		t.Fatalf("got status %v: the stale status was handed out", ws)
	}
}

func TestUnclaimedBounded(t *testing.T) {
	mu.Lock()
	defer mu.Unlock()
	for pid := 1 << 30; pid < 1<<30+keep+10; pid++ {
		remember(pid, exit{})
	}
	if len(done) != keep || len(order) != keep {
		t.Fatalf("kept %d (%d in order), want %d", len(done), len(order), keep)
	}
	if _, ok := done[1<<30]; ok {
		t.Fatal("the oldest status was not dropped")
	}
	for pid := 1 << 30; pid < 1<<30+keep+10; pid++ {
		forget(pid)
	}
}
