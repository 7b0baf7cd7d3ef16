package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pybox/host/client"
	"pybox/shared/wire"
)

// sealProbe makes sealProbeCalls cheap system calls and prints the mean
// time of one in µs, then the Seccomp mode the program runs under: the
// filter runs on every system call, so this is where it costs.
const (
	sealProbeCalls = 50000
	sealProbe      = `import os, time
n = %d
t0 = time.perf_counter()
for _ in range(n):
    os.getppid()
us = (time.perf_counter() - t0) * 1e6 / n
mode = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0]
print("%%.3f %%s" %% (us, mode))`
)

// benchSeal times what the posture check and the seccomp filter cost per
// run: on one VM running the benchmark build of the agent
// (`make bench-guest`, whose console can switch both off), the same runs
// alternate between the full seal, no posture check, and neither, so
// that all three see the same machine at the same time.
func benchSeal(b *testing.B, r *benchReport, k benchKnobs) {
	const what = "posture check and seccomp filter, with against without"
	initramfs := os.Getenv("BENCH_INITRAMFS")
	if initramfs == "" {
		r.Skipped[what] = "not measured: it needs the benchmark build of the agent; `make bench` builds it (make bench-guest) and sets BENCH_INITRAMFS"
		return
	}
	e := benchEnv(b)
	// Cold boxes only: a warm box is sealed before its call, in whichever
	// mode was set when it was made.
	if out, errOut, code := e.pybox("vm", "start", "--initramfs", initramfs, "--images", "stdlib", "--warm", "0"); code != 0 {
		b.Fatalf("vm start with the benchmark agent: %s%s", out, errOut)
	}
	defer e.pybox("vm", "stop")
	if st := e.state(); !slices.Contains(st.Capabilities, wire.CapUnsealable) {
		b.Fatalf("BENCH_INITRAMFS=%s holds agent %s, not the benchmark build (make bench-guest)", initramfs, st.AgentVersion)
	}
	c, err := client.Dial(e.home)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	run := func(code string) *wire.Receipt {
		res, err := c.Run(context.Background(), mustCheck(b, &wire.Run{RunID: wire.NewRunID(""), Code: code, Image: "stdlib", TimeoutSeconds: 30, MaxOutputBytes: 4096}))
		if err != nil || res.Receipt.Status != wire.StatusOK || res.Receipt.Cleanup.Status != wire.CleanupRemoved {
			b.Fatalf("run %.40q: %v %+v", code, err, res)
		}
		return &res.Receipt
	}
	modes := []struct {
		name, seccomp string // the mode, and the Seccomp the program must see in it
		posture       bool   // whether the receipt carries a checked posture
	}{{"sealed", "2", true}, {"no-posture", "2", false}, {"neither", "0", false}}
	rtt := map[string][]float64{}
	wall := map[string][]float64{}
	perCall := map[string][]float64{}
	ids := map[string][]string{}
	probe := fmt.Sprintf(sealProbe, sealProbeCalls)
	for i := 0; i < 3*k.Runs; i++ {
		for j := range modes {
			m := modes[(i+j)%len(modes)] // each mode goes first, second and third in turn
			// The agent's log lines may cut into the echo and the answer,
			// even mid-word: look only for a refusal. The receipts below
			// check that the mode took.
			if got := agentConsole(b, e.home, "seal "+m.name); strings.Contains(got, "usage") || strings.Contains(got, "unknown") || strings.Contains(got, "no seal") {
				b.Fatalf("seal %s: the console answered %q", m.name, got)
			}
			t0 := time.Now()
			rc := run("pass")
			rtt[m.name] = append(rtt[m.name], msSince(t0))
			ids[m.name] = append(ids[m.name], rc.RunID)
			wall[m.name] = append(wall[m.name], float64(rc.WallMS))
			if checked := rc.Posture != nil && rc.Posture.Seccomp == 2; checked != m.posture {
				b.Fatalf("seal %s: the receipt's posture is %+v", m.name, rc.Posture)
			}
			out := strings.Fields(run(probe).Capture.Stdout)
			us, err := strconv.ParseFloat(out[0], 64)
			if err != nil || len(out) != 2 || out[1] != m.seccomp {
				b.Fatalf("seal %s: the probe printed %q, want a time and Seccomp %s", m.name, out, m.seccomp)
			}
			perCall[m.name] = append(perCall[m.name], us)
		}
	}
	agentConsole(b, e.home, "seal sealed")
	for _, m := range modes {
		r.add(newFigure("hardening", "pass, "+m.name+": host/client round trip", "ms", rtt[m.name], ""))
	}
	for _, m := range modes {
		r.add(newFigure("hardening", "pass, "+m.name+": receipt wall_ms", "ms", wall[m.name], "python3 start → exit; the posture check is before it"))
	}
	for _, m := range modes {
		r.add(newFigure("hardening", "os.getppid(), "+m.name+": one call", "µs", perCall[m.name], fmt.Sprintf("mean of %d in one run, seen from Python", sealProbeCalls)))
	}
	r.add(newFigure("hardening", "cost of the posture check per run: round trip sealed − no-posture", "ms",
		pairDiff(rtt["sealed"], rtt["no-posture"]), "reading /proc/thread-self: status, fds, mountinfo, namespaces; within noise when near 0"))
	r.add(newFigure("hardening", "cost of the seccomp filter per run: round trip no-posture − neither", "ms",
		pairDiff(rtt["no-posture"], rtt["neither"]), "loading the filter, and running it on each of python3's system calls"))
	r.add(newFigure("hardening", "cost of the seccomp filter per system call: getppid no-posture − neither", "µs",
		pairDiff(perCall["no-posture"], perCall["neither"]), ""))
	// The agent's own timing of each phase: box-init holds the seccomp
	// load and the posture check, the program phase the filter's cost on
	// python3's system calls.
	phaseMedian := map[string]map[string]float64{}
	for _, m := range modes {
		phases := boxPhases(e, ids[m.name])
		phaseMedian[m.name] = map[string]float64{}
		for _, ph := range []string{"box-init", "program", "in all"} {
			if len(phases[ph]) == 0 {
				continue
			}
			f := r.add(newFigure("hardening", "pass, "+m.name+": box phase "+ph+" (agent's log)", "ms", phases[ph], phaseNotes[ph]))
			phaseMedian[m.name][ph] = f.Median
		}
	}
	for _, c := range []struct{ name, with, without, note string }{
		{"posture check: box-init phase, sealed − no-posture", "sealed", "no-posture", "medians"},
		{"seccomp filter load: box-init phase, no-posture − neither", "no-posture", "neither", "medians"},
	} {
		a, okA := phaseMedian[c.with]["box-init"]
		b, okB := phaseMedian[c.without]["box-init"]
		if okA && okB {
			r.add(newFigure("hardening", c.name, "ms", []float64{math.Round((a-b)*10) / 10}, c.note))
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("Hardening: the benchmark agent (%s) ran %d rounds of pass and the getppid probe in each seal mode, rotating which mode went first.",
		e.state().AgentVersion, 3*k.Runs))
}
