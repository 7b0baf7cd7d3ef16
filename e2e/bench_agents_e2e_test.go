package e2e

// The agents part of `make bench`: several agents on one VM. 1, 2 and 4
// `pybox mcp` servers call back to back at once, a warm print(1) and then
// a pandas call, on a VM sized for four runs (two vCPUs): the round trip's
// p50 and p95 and the calls a minute for each count of agents, side by
// side in one run. Then fairness: one agent's print(1) alone, and beside
// another agent's run that spins on every CPU.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/vm"
	"pybox/shared/wire"
)

// agentsSpin keeps every CPU of the box busy for secs seconds.
const agentsSpin = `import multiprocessing as mp, os, time
def spin(end):
    while time.time() < end: pass
end = time.time() + %g
ps = [mp.Process(target=spin, args=(end,)) for _ in range(os.cpu_count())]
[p.start() for p in ps]
[p.join() for p in ps]
print("spun", len(ps))`

// atOnce has n sessions make calls calls each of args, back to back,
// all at once, and returns every round trip (ms), the wall time of the
// whole (ms), and what did not end ok.
func atOnce(b *testing.B, e *vmEnv, n, calls int, args map[string]any) (rtt []float64, wallMS float64, bad []string) {
	sessions := make([]*mcpSession, n)
	for i := range sessions {
		sessions[i] = &mcpSession{b: b, e: e}
		sessions[i].connect()
		defer sessions[i].cs.Close()
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	for _, m := range sessions {
		wg.Go(func() {
			for range calls {
				t := time.Now()
				res, err := m.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_python", Arguments: args})
				d := msSince(t)
				var rc benchReceipt
				if err == nil && len(res.Content) > 0 {
					err = json.Unmarshal([]byte(res.Content[0].(*sdk.TextContent).Text), &rc)
				}
				mu.Lock()
				if err != nil || rc.Execution.Status != wire.StatusOK {
					bad = append(bad, fmt.Sprintf("%v %s", err, rc.Execution.Status))
				} else {
					rtt = append(rtt, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return rtt, msSince(t0), bad
}

// warmAll waits until no warm box of the VM is warming and each image has
// one ready.
func warmAll(b *testing.B, e *vmEnv) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		g := guestStatus(b, e)
		ready, warming := map[string]bool{}, false
		for _, w := range g.Warm {
			ready[w.Image] = ready[w.Image] || w.State == "ready"
			warming = warming || w.State == "warming"
		}
		if !warming && ready["stdlib"] && ready["data"] && len(g.Runs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the warm boxes were not ready within 3 minutes: %+v", g.Warm)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// p95 is the 95th percentile of v.
func p95(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[int(math.Ceil(0.95*float64(len(s))))-1]
}

func benchAgents(b *testing.B, r *benchReport, k benchKnobs) {
	e := benchEnv(b)
	if out, errOut, code := e.pybox("vm", "start", "--images", "stdlib,data", "--runs", "4",
		"--memory", strconv.Itoa(vm.MemoryForRuns(4)), "--cpus", "2"); code != 0 {
		b.Fatalf("vm start: %s%s", out, errOut)
	}
	defer e.pybox("vm", "stop")
	warmAll(b, e)
	calls := max(5, k.Runs)
	programs := []struct {
		name  string
		calls int
		args  map[string]any
	}{
		{"print(1), warm box", calls, map[string]any{"code": benchTrivial, "timeout_s": 20}},
		{"pandas call (data), warm box", max(3, calls/3), map[string]any{"code": benchPandas, "image": "data", "timeout_s": 30}},
	}
	p50s := map[string]float64{}
	for _, p := range programs {
		for _, n := range []int{1, 2, 4} {
			time.Sleep(3 * time.Second) // the warm boxes refill
			warmAll(b, e)
			rtt, wall, bad := atOnce(b, e, n, p.calls, p.args)
			for _, x := range bad {
				r.Notes = append(r.Notes, fmt.Sprintf("agents: %s with %d agents: a call did not end ok: %s", p.name, n, x))
			}
			label := fmt.Sprintf("%s, %d agent(s) at once", p.name, n)
			f := newFigure("agents", label, "ms", rtt, fmt.Sprintf("tools/call round trip, each agent %d calls back to back; p95 %.0f ms; %.1f calls a minute in all",
				p.calls, p95(rtt), float64(len(rtt))/(wall/60000)))
			r.add(f)
			p50s[label] = f.Median
		}
		one := p50s[fmt.Sprintf("%s, 1 agent(s) at once", p.name)]
		for _, n := range []int{2, 4} {
			if one > 0 {
				r.Notes = append(r.Notes, fmt.Sprintf("agents: %s: %d agents' p50 is %.2f× one agent's (side by side; goal for print(1) with 4: at most 1.5×).",
					p.name, n, p50s[fmt.Sprintf("%s, %d agent(s) at once", p.name, n)]/one))
			}
		}
	}

	// Fairness: one agent's print(1), alone and beside a run that spins
	// on every CPU of the guest.
	warmAll(b, e)
	alone, _, _ := atOnce(b, e, 1, calls, map[string]any{"code": benchTrivial, "timeout_s": 20})
	spinner := &mcpSession{b: b, e: e}
	spinner.connect()
	defer spinner.cs.Close()
	spun := make(chan struct{})
	go func() {
		defer close(spun)
		spinner.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_python",
			Arguments: map[string]any{"code": fmt.Sprintf(agentsSpin, 25.0), "timeout_s": 30}})
	}()
	time.Sleep(3 * time.Second) // the spinner's processes are up
	beside, _, _ := atOnce(b, e, 1, calls, map[string]any{"code": benchTrivial, "timeout_s": 20})
	<-spun
	fa, fb := newFigure("agents", "print(1), one agent alone", "ms", alone, "tools/call round trip"),
		newFigure("agents", "print(1), one agent beside a run spinning on every CPU", "ms", beside, "the other agent's box runs os.cpu_count() busy processes")
	r.add(fa)
	r.add(fb)
	if fa.Median > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("agents: print(1) beside a run spinning on every CPU: %.2f× alone (medians %s vs %s ms; with equal CPU weights the spinner gets its share, not the CPUs).",
			fb.Median/fa.Median, num(fb.Median), num(fa.Median)))
	}
}
