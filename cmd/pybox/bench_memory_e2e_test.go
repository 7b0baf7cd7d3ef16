package main

// The memory part of `make bench`: what the VM process holds on the host
// just booted, after 20 data calls and 30 s after the last, with freed
// memory given back (the default) and kept (--keep-memory), and what
// giving it back costs a call.

import (
	"fmt"
	"testing"
	"time"

	"pybox/host/vm"
)

// benchMemoryCode is a data call: a 13 MB CSV (1.5 million rows) grouped with pandas, and a
// 240 MB numpy temporary, as an analysis makes and drops.
const benchMemoryCode = `import numpy as np, pandas as pd
df = pd.read_csv('/data/m/sales.csv')
print(df.groupby('region')['units'].sum().to_dict(), int(np.arange(30_000_000).sum()))
`

// benchMemoryCalls is how many data calls are made before the footprint
// is read.
const benchMemoryCalls = 20

func benchMemory(b *testing.B, r *benchReport, k benchKnobs) {
	dir := benchSalesCSV(b, 1_500_000)
	for _, mode := range []struct {
		name string
		args []string
	}{{"given back", nil}, {"kept (--keep-memory)", []string{"--keep-memory"}}} {
		e := benchEnv(b)
		args := append([]string{"vm", "start", "--images", "stdlib,data", "--data", "m=" + dir}, mode.args...)
		if out, errOut, code := e.pybox(args...); code != 0 {
			b.Fatalf("vm start: %s%s", out, errOut)
		}
		pid := e.state().QEMUPid
		rss := func() float64 {
			n, err := vm.HostMemory(pid)
			if err != nil {
				b.Fatal(err)
			}
			return float64(n >> 20)
		}
		waitWarmReady(b, e.home, "data")
		time.Sleep(10 * time.Second) // the warm boxes' start settles
		booted := rss()
		var pandas, trivial []float64
		for range benchMemoryCalls {
			run := runPy(b, e, benchMemoryCode, "--image", "data", "--data", "m", "--timeout", "30")
			if rc := run.receipt(b); rc.Status != "ok" {
				b.Fatalf("data call (%s): %s (%s) %s", mode.name, rc.Status, rc.Reason, rc.Capture.Stderr)
			}
			pandas = append(pandas, float64(run.elapsed.Milliseconds()))
		}
		after := rss()
		time.Sleep(30 * time.Second)
		idle := rss()
		for range max(1, k.Runs) {
			run := runPy(b, e, benchTrivial, "--image", "data", "--timeout", "30")
			if rc := run.receipt(b); rc.Status != "ok" {
				b.Fatalf("print(1) (%s): %s (%s)", mode.name, rc.Status, rc.Reason)
			}
			trivial = append(trivial, float64(run.elapsed.Milliseconds()))
		}
		e.pybox("vm", "stop")
		note := fmt.Sprintf("QEMU's resident set; %.2f× just booted", idle/booted)
		r.add(newFigure("memory", "host RSS just booted, warm boxes ready, memory "+mode.name, "MiB", []float64{booted}, "QEMU's resident set"))
		r.add(newFigure("memory", fmt.Sprintf("host RSS after %d data calls, memory %s", benchMemoryCalls, mode.name), "MiB", []float64{after}, "QEMU's resident set"))
		r.add(newFigure("memory", "host RSS 30 s after the last call, memory "+mode.name, "MiB", []float64{idle}, note))
		r.add(newFigure("memory", "data call (13 MB CSV grouped, 240 MB numpy), memory "+mode.name, "ms", pandas, "pybox run round trip"))
		r.add(newFigure("memory", "print(1) in data, memory "+mode.name, "ms", trivial, "pybox run round trip"))
	}
}
