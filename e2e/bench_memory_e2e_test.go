package e2e

// The memory part of `make bench`: what the VM process holds on the host
// just booted, after 20 data calls and 30 s after the last, with freed
// memory given back (the default) and kept (--keep-memory), and what
// giving it back costs a call. The two VMs run side by side, taking turns
// call by call, so that neither meets a quieter machine.

import (
	"fmt"
	"testing"
	"time"

	"pybox/host/vm"
)

// benchMemoryCode is a data call: a 13 MB CSV (1.5 million rows) grouped
// with pandas, and a 240 MB numpy temporary, as an analysis makes and
// drops.
const benchMemoryCode = `import numpy as np, pandas as pd
df = pd.read_csv('/data/m/sales.csv')
print(df.groupby('region')['units'].sum().to_dict(), int(np.arange(30_000_000).sum()))
`

// benchMemoryCalls is how many data calls are made before the footprint
// is read.
const benchMemoryCalls = 20

// memoryVM is one of the memory part's two VMs and what was measured on it.
type memoryVM struct {
	name            string
	e               *vmEnv
	pid             int
	rss             []float64 // just booted, after the calls, 30 s later
	pandas, trivial []float64
}

func (v *memoryVM) readRSS(b *testing.B) {
	n, err := vm.HostMemory(v.pid)
	if err != nil {
		b.Fatal(err)
	}
	v.rss = append(v.rss, float64(n>>20))
}

func (v *memoryVM) call(b *testing.B, code string, args ...string) float64 {
	run := runPy(b, v.e, code, append([]string{"--image", "data", "--timeout", "30"}, args...)...)
	if rc := run.receipt(b); rc.Status != "ok" {
		b.Fatalf("memory %s: %s (%s) %s", v.name, rc.Status, rc.Reason, rc.Capture.Stderr)
	}
	return float64(run.elapsed.Milliseconds())
}

func benchMemory(b *testing.B, r *benchReport, k benchKnobs) {
	dir := benchSalesCSV(b, 1_500_000)
	vms := []*memoryVM{{name: "given back"}, {name: "kept (--keep-memory)"}}
	for i, v := range vms {
		v.e = benchEnv(b)
		args := []string{"vm", "start", "--images", "stdlib,data", "--data", "m=" + dir}
		if i == 1 {
			args = append(args, "--keep-memory")
		}
		if out, errOut, code := v.e.pybox(args...); code != 0 {
			b.Fatalf("vm start: %s%s", out, errOut)
		}
		defer v.e.pybox("vm", "stop")
		v.pid = v.e.state().QEMUPid
		waitWarmReady(b, v.e.home, "data")
	}
	time.Sleep(10 * time.Second) // the warm boxes' start settles
	for _, v := range vms {
		v.readRSS(b)
	}
	for range benchMemoryCalls {
		for _, v := range vms {
			v.pandas = append(v.pandas, v.call(b, benchMemoryCode, "--data", "m"))
		}
	}
	for _, v := range vms {
		v.readRSS(b)
	}
	time.Sleep(30 * time.Second)
	for _, v := range vms {
		v.readRSS(b)
	}
	for range max(1, k.Runs) {
		for _, v := range vms {
			v.trivial = append(v.trivial, v.call(b, benchTrivial))
		}
	}
	for _, v := range vms {
		booted, after, idle := v.rss[0], v.rss[1], v.rss[2]
		r.add(newFigure("memory", "host RSS just booted, warm boxes ready, memory "+v.name, "MiB", []float64{booted}, "QEMU's resident set"))
		r.add(newFigure("memory", fmt.Sprintf("host RSS after %d data calls, memory %s", benchMemoryCalls, v.name), "MiB", []float64{after}, "QEMU's resident set"))
		r.add(newFigure("memory", "host RSS 30 s after the last call, memory "+v.name, "MiB", []float64{idle}, fmt.Sprintf("QEMU's resident set; %.2f× just booted (goal ≤ 1.5×)", idle/booted)))
	}
	// The ratio, on the given-back rows: given back ÷ kept.
	const turns = "pybox run round trip, the two VMs taking turns; ratio: given back ÷ kept"
	for _, calls := range []struct {
		name string
		of   func(*memoryVM) []float64
	}{
		{"data call (13 MB CSV grouped, 240 MB numpy)", func(v *memoryVM) []float64 { return v.pandas }},
		{"print(1) in data", func(v *memoryVM) []float64 { return v.trivial }},
	} {
		given := r.add(newFigure("memory", calls.name+", memory "+vms[0].name, "ms", calls.of(vms[0]), turns))
		kept := r.add(newFigure("memory", calls.name+", memory "+vms[1].name, "ms", calls.of(vms[1]), turns))
		if kept.Median > 0 {
			given.Ratio = given.Median / kept.Median
		}
	}
}
