package agent

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"pybox/shared/wire"
)

func consoleAgent(t *testing.T) *Agent {
	a := newAgent(t, newFakeRunner(), nil)
	a.cfg.Files = fstest.MapFS{
		"proc/self/mounts":                  {Data: []byte("proc /proc proc rw 0 0\n")},
		"proc/self/fd/0":                    {},
		"proc/self/fd/1":                    {},
		"proc/self/status":                  {Data: []byte("Name:\tinit\nVmHWM:\t    6144 kB\nVmRSS:\t    5120 kB\nRssAnon:\t    2048 kB\nThreads:\t5\n")},
		"sys/fs/cgroup/agent/cgroup.procs":  {Data: []byte("1\n")},
		"sys/fs/cgroup/agent/memory.low":    {Data: []byte("67108864\n")},
		"sys/fs/cgroup/runs/r1/pids.max":    {Data: []byte("128\n")},
		"sys/fs/cgroup/runs/r1/memory.peak": {Data: []byte("1000\n")},
	}
	a.cfg.LogLines = func() []string { return []string{"[    0.100] first", "[    0.200] second"} }
	return a
}

func answer(a *Agent, cmd string) string {
	var b strings.Builder
	a.Command(cmd, &b)
	return b.String()
}

func TestConsoleCommands(t *testing.T) {
	a := consoleAgent(t)
	for cmd, want := range map[string][]string{
		"help": {"status", "mounts", "cgroups", "runs", "last", "log"},
		"status": {Version, "6.1.0-test", "healthy", "stdlib", "nothing", "goroutines", "procs=1 memory.low=67108864",
			"rss 5120 KiB (peak 6144 KiB, anonymous 2048 KiB)"},
		"mounts":   {"proc /proc proc"},
		"cgroups":  {"/sys/fs/cgroup/agent", "/sys/fs/cgroup/runs/r1", "memory.peak=1000 pids.max=128"},
		"runs":     {"RUN", "IMAGE", "STATUS"},
		"last":     {"no run has finished yet"},
		"log":      {"first\n", "second\n"},
		" help ":   {"status"},
		"reboot":   {`unknown command "reboot": type help`},
		"status x": {"status takes no arguments"},
	} {
		got := answer(a, cmd)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%q answered %q, want it to contain %q", cmd, got, w)
			}
		}
	}
	if got := answer(a, ""); got != "" {
		t.Errorf("an empty line answered %q", got)
	}
}

func TestConsoleRunsAndLast(t *testing.T) {
	a := consoleAgent(t)
	res := &wire.Result{Receipt: wire.Receipt{RunID: "r1", Status: wire.StatusOK, WallMS: 42,
		Cleanup: wire.Cleanup{Status: wire.CleanupRemoved}}}
	a.finish(&activeRun{id: "r1", image: "stdlib", started: time.Now()}, res, nil)
	if got := answer(a, "runs"); !strings.Contains(got, "r1") || !strings.Contains(got, "REMOVED") || !strings.Contains(got, "42 ms") {
		t.Errorf("runs: %q", got)
	}
	if got := answer(a, "last"); !strings.Contains(got, `"run_id": "r1"`) {
		t.Errorf("last: %q", got)
	}
}

func TestConsoleLoop(t *testing.T) {
	a := consoleAgent(t)
	var out strings.Builder
	if err := a.Console(strings.NewReader("help\nnope\n"), &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.Count(got, prompt) != 2 || !strings.Contains(got, "unknown command") {
		t.Errorf("console wrote %q", got)
	}
}

// writes records each Write apart.
type writes struct{ got []string }

func (w *writes) Write(p []byte) (int, error) { w.got = append(w.got, string(p)); return len(p), nil }

// Each answer leaves in one Write, its prompt included, so the log's
// lines (written between Writes) never split an answer.
func TestConsoleAnswersWhole(t *testing.T) {
	a := consoleAgent(t)
	w := &writes{}
	if err := a.Console(strings.NewReader("status\nhelp\n"), NewConsoleWriter(w)); err != nil {
		t.Fatal(err)
	}
	if len(w.got) != 2 {
		t.Fatalf("%d writes for 2 commands: %q", len(w.got), w.got)
	}
	for i, want := range []string{"agent", "status"} {
		if !strings.Contains(w.got[i], want) || !strings.HasSuffix(w.got[i], prompt) {
			t.Errorf("write %d = %q: want the whole answer (with %q) and the prompt", i, w.got[i], want)
		}
	}
}
