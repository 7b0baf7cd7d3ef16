package e2e

// The warm part of `make bench`: the same calls, in one run, on a VM
// with warm boxes (the default) and on one without (--warm 0), the two
// taking turns series by series: with a short think time between calls,
// as an agent leaves one; back to back, where a call may find the next
// warm box still warming; and, on the warm VM, with its warm box ready
// before each call, as it is when an agent thinks for longer than the
// preload takes.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchThink is the pause before each call of the "think" series.
const benchThink = 2 * time.Second

// warmSeries is how calls follow each other: a pause before each, none,
// or (think < 0) a wait until every warm box is ready.
type warmSeries struct {
	name  string
	think time.Duration
}

// benchReady names the series whose calls each wait until every warm box
// is ready.
const benchReady = "box ready"

// warmPrograms are the calls timed warm and cold: what users mostly
// bring, and a trivial one in each image.
var warmPrograms = []struct {
	name string
	args map[string]any
}{
	{"print(1) in stdlib", map[string]any{"code": benchTrivial, "timeout_s": 30}},
	{"print(1) in data", map[string]any{"code": benchTrivial, "image": "data", "timeout_s": 30}},
	{"pandas: read a CSV, sum", map[string]any{"code": "import pandas as pd\nprint(pd.read_csv('/tmp/input/sales.csv').sum())",
		"image": "data", "timeout_s": 30, "files": []map[string]string{{"name": "sales.csv", "content": "region,sales\nnorth,120\nsouth,80\n"}}}},
	{"matplotlib PNG", map[string]any{"code": benchPlot, "image": "data", "timeout_s": 30, "return_files": true}},
	{benchDataFolder, map[string]any{"code": "import pandas as pd\nprint(pd.read_csv('/data/sales/sales.csv').groupby('region')['units'].sum())",
		"image": "data", "timeout_s": 30, "data": []string{"sales"}}},
}

// benchDataFolder is the product's main use: pandas on a data folder.
const benchDataFolder = "pandas: a data folder's CSV, grouped"

// benchSalesCSV is a data folder holding sales.csv of rows rows.
func benchSalesCSV(b *testing.B, rows int) string {
	dir := openTempDir(b)
	var sb strings.Builder
	sb.WriteString("region,units\n")
	for i := range rows {
		fmt.Fprintf(&sb, "%s,%d\n", []string{"north", "south", "east", "west"}[i%4], i%97)
	}
	if err := os.WriteFile(filepath.Join(dir, "sales.csv"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// warmReceipt is what the warm part reads of a result.
type warmReceipt struct {
	Execution struct {
		Status string `json:"status"`
		WallMS int64  `json:"wall_ms"`
		Memory struct {
			PeakBytes    int64 `json:"peak_bytes"`
			PreloadBytes int64 `json:"preload_bytes"`
		} `json:"memory"`
		Box struct {
			Warm         bool  `json:"warm"`
			PrepareMS    int64 `json:"prepare_ms"`
			PrepareCPUMS int64 `json:"prepare_cpu_ms"`
		} `json:"box"`
	} `json:"execution"`
}

func benchWarm(b *testing.B, r *benchReport, k benchKnobs) {
	// Both VMs run at once and take turns, series by series, so that the
	// machine's noise falls on both alike. Each series starts with the
	// warm VM's boxes ready, so that neither VM's background work falls on
	// the other's calls.
	vms := []*warmVM{{name: "warm"}, {name: "cold", args: []string{"--warm", "0"}}}
	sales := benchSalesCSV(b, 500) // a few hundred rows
	for _, v := range vms {
		v.e = benchEnv(b)
		if out, errOut, code := v.e.pybox(append([]string{"vm", "start", "--images", "stdlib,data", "--data", "sales=" + sales}, v.args...)...); code != 0 {
			b.Fatalf("vm start: %s%s", out, errOut)
		}
		v.m = &mcpSession{b: b, e: v.e, args: []string{"--data", "sales"}}
		defer v.stop()
	}
	warm := vms[0]
	for _, p := range warmPrograms {
		for _, series := range []warmSeries{{"think " + benchThink.String(), benchThink}, {"back to back", 0}, {benchReady, -1}} {
			for _, v := range vms {
				if series.think < 0 && v != warm {
					continue // a cold VM has no box to wait for
				}
				waitWarm(b, warm.e)
				v.series(r, k, p.name, p.args, series)
			}
		}
	}
	benchBareWarm(b, r, k, warm.e)
	warmGoals(r)
}

// warmVM is one of the warm part's two VMs.
type warmVM struct {
	name string // warm or cold
	args []string
	e    *vmEnv
	m    *mcpSession
}

func (v *warmVM) stop() {
	if v.m.cs != nil {
		v.m.cs.Close()
	}
	v.e.pybox("vm", "stop")
}

// series times k.WarmRuns calls of one program, one series, on v.
func (v *warmVM) series(r *benchReport, k benchKnobs, prog string, args map[string]any, s warmSeries) {
	var rtt, prepCPU, preload []float64
	for i := 0; i < k.WarmRuns; i++ {
		if s.think < 0 {
			waitWarm(v.m.b, v.e)
		}
		time.Sleep(max(s.think, 0))
		d, _ := v.m.call(args)
		var wr warmReceipt
		json.Unmarshal([]byte(v.m.lastText), &wr)
		if wr.Execution.Status != "ok" {
			continue
		}
		if (v.name == "warm") != wr.Execution.Box.Warm {
			r.Notes = append(r.Notes, fmt.Sprintf("a %s call of %s ran in a %v box", v.name, prog, map[bool]string{true: "warm", false: "cold"}[wr.Execution.Box.Warm]))
		}
		rtt = append(rtt, d)
		prepCPU = append(prepCPU, float64(wr.Execution.Box.PrepareCPUMS))
		preload = append(preload, mib(wr.Execution.Memory.PreloadBytes))
	}
	note := "tools/call round trip"
	if v.name == "warm" && len(prepCPU) > 0 {
		note += fmt.Sprintf("; warming cost per call: CPU %s ms (median), preload held %s MiB", num(median(prepCPU)), num(median(preload)))
	}
	r.add(newFigure("warm", fmt.Sprintf("%s, %s, %s", prog, v.name, s.name), "ms", rtt, note))
}

// waitWarm waits until every image's warm box is ready.
func waitWarm(b *testing.B, e *vmEnv) {
	for _, image := range []string{"stdlib", "data"} {
		waitWarmReady(b, e.home, image)
	}
}

// benchBareWarm is benchBare on the warm VM, under its own name.
func benchBareWarm(b *testing.B, r *benchReport, k benchKnobs, e *vmEnv) {
	before := len(r.Figures)
	benchBare(b, r, k, e)
	for _, f := range r.Figures[before:] {
		f.Section, f.Name = "warm", "bare python3 -I -B -c pass started inside a box (same guest)"
	}
}

// warmGoals sets the warm boxes' goals, as ratios from this run.
func warmGoals(r *benchReport) {
	find := func(prog, mode, series string) *figure {
		return r.find("warm", fmt.Sprintf("%s, %s, %s", prog, mode, series))
	}
	think := "think " + benchThink.String()
	ratio := func(name string, a, b *figure, goal string) {
		if a == nil || b == nil || b.Median == 0 {
			return
		}
		f := r.add(newFigure("goals", name, "×", []float64{a.Median / b.Median}, fmt.Sprintf("%s; medians %s vs %s ms", goal, num(a.Median), num(b.Median))))
		f.Ratio = math.Round(a.Median/b.Median*100) / 100
	}
	// The warm box beside the alternatives: print(1), and pandas reading a
	// CSV and summing it (import pandas included).
	for _, alt := range []struct{ section, prog, name string }{
		{"trivial", "print(1) in stdlib", "PyBox via pybox mcp, warm box ready"},
		{"pandas", "pandas: read a CSV, sum", "PyBox via pybox mcp, warm box ready (read a CSV, sum)"},
	} {
		if f := find(alt.prog, "warm", benchReady); f != nil {
			r.add(newFigure(alt.section, alt.name, "ms", f.Samples, "tools/call round trip; the warm part's figure"))
		}
	}
	ratio("warm pandas call ÷ warm print(1), both in data, box ready", find("pandas: read a CSV, sum", "warm", benchReady), find("print(1) in data", "warm", benchReady), "goal ≤ 2×")
	ratio("warm pandas call on a data folder ÷ warm print(1) in data, box ready", find(benchDataFolder, "warm", benchReady), find("print(1) in data", "warm", benchReady), "goal ≤ 2×")
	ratio("warm print(1) in stdlib (round trip, box ready) ÷ bare python3 -I -B -c pass in the same guest", find("print(1) in stdlib", "warm", benchReady),
		r.find("warm", "bare python3 -I -B -c pass started inside a box (same guest)"), "goal ≤ 0.5×")
	for _, p := range warmPrograms {
		ratio("warm (box ready) ÷ cold (think "+benchThink.String()+"): "+p.name, find(p.name, "warm", benchReady), find(p.name, "cold", think), "goal ≤ 1× (no call slower than the cold path)")
		ratio("warm ÷ cold, think "+benchThink.String()+": "+p.name, find(p.name, "warm", think), find(p.name, "cold", think), "goal ≤ 1×")
		ratio("warm ÷ cold, back to back: "+p.name, find(p.name, "warm", "back to back"), find(p.name, "cold", "back to back"), "goal ≤ 1×")
	}
}
