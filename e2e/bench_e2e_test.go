package e2e

// BenchmarkReport is `make bench` (scripts/bench.sh runs it once, with
// -benchtime=1x): PyBox and the alternatives a user would pick instead,
// measured the same way in the same run, written as a table to
// $BENCH_OUT/results.md and results.json. It reuses the e2e helpers
// (newVMEnv, linkImages, the Go SDK's client) and, unlike the
// Benchmark* functions beside it, keeps every sample, so that the report
// can give medians with their spread. Knobs are environment variables
// (see benchKnobs); the defaults finish in about ten minutes under TCG.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/client"
	"pybox/host/paths"
	"pybox/shared/wire"
)

// benchKnobs are the bench's sizes, from the environment.
type benchKnobs struct {
	Runs      int `json:"runs"`       // BENCH_RUNS: samples per figure
	Boots     int `json:"boots"`      // BENCH_BOOTS: VM boots (each also a fresh-VM-per-call sample)
	Calls     int `json:"calls"`      // BENCH_CALLS: sequential calls in the long-life/throughput run
	PlotRuns  int `json:"plot_runs"`  // BENCH_PLOT_RUNS: matplotlib PNG calls (15 s each under TCG)
	PandasAlt int `json:"pandas_alt"` // BENCH_PANDAS_RUNS: pandas samples per alternative
	WarmRuns  int `json:"warm_runs"`  // BENCH_WARM_RUNS: calls of each program in each series, warm and cold
	// BENCH_ONLY: a comma-separated subset of the parts (alternatives,
	// boots, vm, warm, data, packages, memory, hardening, arm64, relay,
	// outdir, jail, agents, net); empty runs them all.
	Only string `json:"only,omitempty"`
}

// benchParts are the bench's parts, in the order they run.
var benchParts = []string{"alternatives", "boots", "vm", "warm", "data", "packages", "memory", "hardening", "arm64", "relay", "outdir", "jail", "agents", "net"}

// runs says whether the part is in this run.
func (k benchKnobs) runs(part string) bool {
	return k.Only == "" || slices.Contains(strings.Split(k.Only, ","), part)
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func readKnobs() benchKnobs {
	return benchKnobs{
		Runs:      envInt("BENCH_RUNS", 7),
		Boots:     envInt("BENCH_BOOTS", 3),
		Calls:     envInt("BENCH_CALLS", 500),
		PlotRuns:  envInt("BENCH_PLOT_RUNS", 2),
		PandasAlt: envInt("BENCH_PANDAS_RUNS", 5),
		WarmRuns:  envInt("BENCH_WARM_RUNS", 3),
		Only:      os.Getenv("BENCH_ONLY"),
	}
}

// figure is one measured quantity: its samples and what they summarise.
type figure struct {
	Section string    `json:"section"`
	Name    string    `json:"name"`
	Unit    string    `json:"unit"`
	N       int       `json:"n"`
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	P90     float64   `json:"p90"`
	Max     float64   `json:"max"`
	Ratio   float64   `json:"ratio,omitempty"` // trivial, pandas: to bare python3 on the host; goals: to bare python3 in the guest
	Note    string    `json:"note,omitempty"`
	Samples []float64 `json:"samples"`
}

func newFigure(section, name, unit string, samples []float64, note string) *figure {
	f := &figure{Section: section, Name: name, Unit: unit, N: len(samples), Note: note, Samples: samples}
	if len(samples) == 0 {
		return f
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	f.Median, f.Min, f.Max = median(s), s[0], s[len(s)-1]
	f.P90 = s[int(math.Ceil(0.9*float64(len(s))))-1]
	return f
}

// benchReport is results.json.
type benchReport struct {
	Date    string            `json:"date"`
	Machine map[string]string `json:"machine"`
	Images  map[string]any    `json:"images"`
	Knobs   benchKnobs        `json:"knobs"`
	Figures []*figure         `json:"figures"`
	Skipped map[string]string `json:"skipped"`
	Notes   []string          `json:"notes"`
}

func (r *benchReport) add(f *figure) *figure {
	r.Figures = append(r.Figures, f)
	return f
}

func (r *benchReport) find(section, name string) *figure {
	for _, f := range r.Figures {
		if f.Section == section && f.Name == name {
			return f
		}
	}
	return nil
}

// pairDiff is a[i] − b[i] for each i: the difference of two samples
// taken back to back, which carries less noise than a difference of
// medians.
func pairDiff(a, b []float64) []float64 {
	d := make([]float64, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}

// msSince is the time since t0 in milliseconds.
func msSince(t0 time.Time) float64 {
	return float64(time.Since(t0).Microseconds()) / 1000
}

// timeCmd runs argv n times and returns each wall time in ms; every run
// must exit 0 and print want.
func timeCmd(n int, want string, env []string, argv ...string) ([]float64, error) {
	var ms []float64
	for i := 0; i < n; i++ {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		d := msSince(t0)
		if err != nil || !strings.Contains(out.String(), want) {
			return ms, fmt.Errorf("%s: %v: %.400s", strings.Join(argv, " "), err, out.String())
		}
		ms = append(ms, d)
	}
	return ms, nil
}

const (
	benchTrivial = "print(1)"
	benchPandas  = "import pandas; print(pandas.__version__)"
	benchPlot    = `import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [1, 4, 9])
plt.savefig("/tmp/output/plot.png")
print("ok")`
)

func BenchmarkReport(b *testing.B) {
	if b.N > 1 {
		return // one pass is the report; more would only repeat it
	}
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out, _ = filepath.Abs(filepath.Join("..", "build", "bench"))
	}
	k := readKnobs()
	r := &benchReport{Date: time.Now().UTC().Format(time.RFC3339), Knobs: k,
		Machine: hostFacts(), Images: map[string]any{}, Skipped: map[string]string{}}
	b.Logf("knobs %+v; writing to %s", k, out)

	r.Skipped["effect of image warming"] = "not measured apart: the agent always warms the images before its hello, so every boot figure includes warming; the first pandas call after boot is the cold figure"
	r.Notes = append(r.Notes,
		"Cold boot means the first boot of this bench run with that image set (the notes below say whether the host page cache was dropped first). Cold pandas means the first `import pandas` after boot, after the agent's own warming.",
		"Under TCG every guest instruction is emulated, so absolute PyBox times are far above what KVM gives (the last note gives the emulation factor measured in this run); compare ratios and host-side overheads.")
	for _, p := range strings.Split(k.Only, ",") {
		if p != "" && !slices.Contains(benchParts, p) {
			b.Fatalf("BENCH_ONLY=%s: unknown part %q; the parts are %s", k.Only, p, strings.Join(benchParts, ", "))
		}
	}
	parts := map[string]func(*testing.B, *benchReport, benchKnobs){
		"alternatives": benchAlternatives, "boots": benchBoots, "vm": benchInVM, "warm": benchWarm, "data": benchData, "packages": benchPackages, "memory": benchMemory, "hardening": benchSeal, "arm64": benchArm64, "relay": benchRelay, "outdir": benchOutdir, "jail": benchJail, "agents": benchAgents, "net": benchNet,
	}
	for _, p := range benchParts {
		if k.runs(p) {
			parts[p](b, r, k)
		}
	}
	ratios(r)
	goals(r)

	if err := os.MkdirAll(out, 0o755); err != nil {
		b.Fatal(err)
	}
	js, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "results.json"), append(js, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "results.md"), []byte(markdown(r)), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %s/results.md and results.json", out)
}

// hostFacts names the machine the figures belong to.
func hostFacts() map[string]string {
	m := map[string]string{"cpus": strconv.Itoa(runtime.NumCPU()), "goos": runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				m["cpu_model"] = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	if b, err := exec.Command("uname", "-sr").Output(); err == nil {
		m["host_kernel"] = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("qemu-system-x86_64", "--version").Output(); err == nil {
		m["qemu"] = strings.SplitN(string(b), "\n", 2)[0]
	}
	if b, err := exec.Command("/usr/bin/python3", "--version").Output(); err == nil {
		m["host_python"] = strings.TrimSpace(string(b))
	}
	return m
}

// alternative is one other way to run the same program on this host.
type alternative struct {
	name   string
	argv   []string // the program text is appended
	need   string   // the executable that must exist
	pandas bool
	note   string
}

func alternatives() []alternative {
	py := "/usr/bin/python3"
	bwrap := []string{"bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", py, "-c"}
	runsc := []string{"runsc", "--network=none", "do", py, "-c"}
	node, _ := filepath.Abs(filepath.Join("..", "scripts", "bench", "pyodide", "run.mjs"))
	return []alternative{
		{"bare python3 (host, the floor)", []string{py, "-c"}, py, true, "/usr/bin/python3 -c CODE"},
		{"bubblewrap, fresh namespaces per call", bwrap, "bwrap", true, "bwrap --unshare-all --ro-bind / / ... python3 -c CODE"},
		{"gVisor runsc do", runsc, "runsc", true, "runsc --network=none do python3 -c CODE (Debian 12 runsc 2022-12, its default platform)"},
		{"Pyodide in Node, fresh interpreter per call", []string{"node", node}, "node", false, "node scripts/bench/pyodide/run.mjs CODE"},
	}
}

// usable says why an alternative cannot run here, or "".
func (a alternative) usable() string {
	if _, err := exec.LookPath(a.need); err != nil {
		return fmt.Sprintf("%s not installed: run `make deps`", a.need)
	}
	if a.need == "node" {
		if _, err := os.Stat(filepath.Join(filepath.Dir(a.argv[1]), "node_modules", "pyodide")); err != nil {
			return "no scripts/bench/pyodide/node_modules: run `make deps` (npm ci)"
		}
	}
	if _, err := timeCmd(1, "1", os.Environ(), append(a.argv, benchTrivial)...); err != nil {
		return "cannot run here: " + err.Error()
	}
	return ""
}

// benchAlternatives times the same programs outside PyBox on this host,
// round-robin (one sample of each in turn), so that the shared machine's
// noise falls on all of them alike.
func benchAlternatives(b *testing.B, r *benchReport, k benchKnobs) {
	var alts []alternative
	for _, a := range alternatives() {
		if why := a.usable(); why != "" {
			r.Skipped[a.name] = why
			continue
		}
		if a.pandas {
			if _, err := timeCmd(1, ".", os.Environ(), append(a.argv, benchPandas)...); err != nil {
				r.Skipped[a.name+" / pandas"] = "cannot run here (host python3-pandas: run `make deps`): " + err.Error()
				a.pandas = false
			}
		} else {
			r.Skipped[a.name+" / pandas"] = "the pyodide npm package ships no pandas wheel and loadPackage fetches from its CDN, which is not reachable here"
		}
		alts = append(alts, a)
	}
	roundRobin := func(n int, code, want string, pandas bool) map[string][]float64 {
		ms := map[string][]float64{}
		for i := 0; i < n; i++ {
			for _, a := range alts {
				if pandas && !a.pandas {
					continue
				}
				d, err := timeCmd(1, want, os.Environ(), append(a.argv, code)...)
				if err != nil {
					b.Fatalf("%s: %v", a.name, err)
				}
				ms[a.name] = append(ms[a.name], d...)
			}
		}
		return ms
	}
	b.Logf("alternatives: print(1) x %d", k.Runs)
	trivial := roundRobin(k.Runs, benchTrivial, "1", false)
	b.Logf("alternatives: import pandas x %d", k.PandasAlt)
	pandas := roundRobin(k.PandasAlt, benchPandas, ".", true)
	for _, a := range alts {
		r.add(newFigure("trivial", a.name, "ms", trivial[a.name], a.note))
		if a.pandas {
			r.add(newFigure("pandas", a.name, "ms", pandas[a.name], "warm page cache"))
		}
	}
}

// benchEnv is a fresh PYBOX_HOME with the stdlib and data images linked.
func benchEnv(b *testing.B) *vmEnv {
	e := newVMEnv(b)
	linkImages(b, e, "stdlib", "data")
	return e
}

// benchBoots boots k.Boots times with each image set: with stdlib alone
// it runs print(1) before the stop, the fresh-VM-per-call alternative
// (its whole cost); with stdlib and data it is the boot of the VM the
// rest of the bench uses. The warming each boot did is read from the
// agent's console lines.
func benchBoots(b *testing.B, r *benchReport, k benchKnobs) {
	e := benchEnv(b)
	script := filepath.Join(b.TempDir(), "p.py")
	os.WriteFile(script, []byte(benchTrivial+"\n"), 0o600)
	boot := map[string][]float64{}
	warm := map[string][]float64{}
	var total, stop []float64
	for i := 0; i < k.Boots; i++ {
		for _, images := range []string{"stdlib", "stdlib,data"} {
			if i == 0 {
				// A cold boot: nothing of the kernel, initramfs or images
				// in the host's page cache.
				r.Notes = append(r.Notes, "Cold boot ("+images+"): "+dropCaches())
			}
			var logFrom int64
			if fi, err := os.Stat(paths.ForVM(e.home).ConsoleLog()); err == nil {
				logFrom = fi.Size()
			}
			t0 := time.Now()
			if out, errOut, code := e.pybox("vm", "start", "--images", images); code != 0 {
				b.Fatalf("vm start: %s%s", out, errOut)
			}
			boot[images] = append(boot[images], float64(e.state().BootMS))
			for name, ms := range warmedMS(e, logFrom) {
				warm[images+": "+name] = append(warm[images+": "+name], ms)
			}
			if images == "stdlib" {
				if _, errOut, code := e.pybox("run", script); code != 0 {
					b.Fatalf("pybox run: %s", errOut)
				}
			}
			t1 := time.Now()
			e.pybox("vm", "stop")
			stop = append(stop, msSince(t1))
			if images == "stdlib" {
				total = append(total, msSince(t0))
			}
			b.Logf("boot %d with %s: boot_ms %.0f, whole %.0f ms", i, images, boot[images][i], msSince(t0))
		}
	}
	for _, images := range []string{"stdlib", "stdlib,data"} {
		r.add(newFigure("boot", "vm start → hello, --images "+images+", cold (first boot of the run)", "ms", boot[images][:1],
			"supervisor boot_ms: QEMU start to the agent's hello, image warming included"))
		if len(boot[images]) > 1 {
			r.add(newFigure("boot", "vm start → hello, --images "+images+", warm (later boots)", "ms", boot[images][1:], ""))
		}
	}
	names := make([]string, 0, len(warm))
	for n := range warm {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r.add(newFigure("boot", "of which warming image "+strings.SplitN(n, ": ", 2)[1]+" (boot with "+strings.SplitN(n, ": ", 2)[0]+")", "ms", warm[n],
			"the agent reads what Python needs of each image before hello (15 s budget in all)"))
	}
	r.add(newFigure("boot", "`pybox vm stop` wall", "ms", stop, ""))
	r.add(newFigure("trivial", "fresh QEMU VM per call (start + run + stop)", "ms", total,
		"pybox vm start --images stdlib; pybox run; pybox vm stop; same kernel and image"))
	r.Skipped["fresh QEMU VM per call / pandas"] = "not measured: it is the stdlib,data boot plus the first-after-boot pandas call"
}

// dropCaches empties the host's page cache (root only) and says what it
// did; BENCH_DROP_CACHES=0 leaves the cache alone.
func dropCaches() string {
	if os.Getenv("BENCH_DROP_CACHES") == "0" {
		return "the host page cache was left as it was (BENCH_DROP_CACHES=0), so the kernel, initramfs and images may be cached from earlier use"
	}
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Sprintf("the host page cache could not be dropped (%v; it needs root), so the kernel, initramfs and images may be cached from earlier use", err)
	}
	return "the host page cache was dropped just before it (sync; echo 3 > /proc/sys/vm/drop_caches)"
}

// warmedMS reads the agent's "warmed image" console lines written after
// offset from (where this boot's lines start): ms by image.
func warmedMS(e *vmEnv, from int64) map[string]float64 {
	ms := map[string]float64{}
	b, err := os.ReadFile(paths.ForVM(e.home).ConsoleLog())
	if err != nil {
		return ms
	}
	if from <= int64(len(b)) {
		b = b[from:] // else the log was rotated: it is all this boot's
	}
	for _, l := range strings.Split(string(b), "\n") {
		_, rest, ok := strings.Cut(l, "warmed image ")
		if !ok {
			continue
		}
		name, rest, _ := strings.Cut(rest, ":")
		_, rest, _ = strings.Cut(rest, " in ")
		if f := strings.Fields(rest); len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				ms[name] = v
			}
		}
	}
	return ms
}

// mcpSession is a `pybox mcp` server with the Go SDK's client, reconnected
// before the 32-call session limit; the reconnects are not timed.
type mcpSession struct {
	b        *testing.B
	e        *vmEnv
	args     []string // pybox mcp's options beyond images and the timeout
	images   string   // --images; stdlib,data when empty
	cs       *sdk.ClientSession
	calls    int
	failed   []string // calls that did not end ok
	lastText string   // the last result's text
}

func (m *mcpSession) connect() {
	if m.cs != nil {
		m.cs.Close()
	}
	cmd := exec.Command(m.e.bin, append([]string{"mcp", "--images", cmp.Or(m.images, "stdlib,data"), "--max-timeout", "30"}, m.args...)...)
	cmd.Env = m.e.env
	c := sdk.NewClient(&sdk.Implementation{Name: "pybox-bench", Version: "0"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		m.b.Fatal(err)
	}
	m.cs, m.calls = cs, 0
}

// benchReceipt is what the bench reads of a tools/call result.
type benchReceipt struct {
	Execution struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
		WallMS int64  `json:"wall_ms"`
		Memory struct {
			PeakBytes int64 `json:"peak_bytes"`
		} `json:"memory"`
		Capture struct {
			Stdout string `json:"stdout"`
			Stderr string `json:"stderr"`
		} `json:"capture"`
	} `json:"execution"`
	Files *[]struct {
		Bytes int64 `json:"bytes"`
	} `json:"files"`
}

// call runs args through tools/call and returns the round trip in ms and
// the receipt. A run that ends other than ok (a timeout on a loaded
// machine) is counted in m.failed and reported, not fatal: the report
// says what happened rather than losing every other figure.
func (m *mcpSession) call(args map[string]any) (float64, *benchReceipt) {
	if m.cs == nil || m.calls >= 30 {
		m.connect()
	}
	m.calls++
	t0 := time.Now()
	res, err := m.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_python", Arguments: args})
	d := msSince(t0)
	if err != nil {
		m.b.Fatalf("tools/call: %v", err)
	}
	var rc benchReceipt
	text := res.Content[0].(*sdk.TextContent).Text
	m.lastText = text
	if err := json.Unmarshal([]byte(text), &rc); err != nil || rc.Execution.Status == "" {
		m.b.Fatalf("tools/call gave no receipt (%v): %.600s", err, text)
	}
	if rc.Execution.Status != wire.StatusOK {
		m.failed = append(m.failed, fmt.Sprintf("%.40q ended %s after %.0f ms", args["code"], rc.Execution.Status, d))
		m.b.Logf("tools/call did not end ok: %.400s", text)
	}
	return d, &rc
}

// times calls args n times and returns round trips and receipt wall_ms.
func (m *mcpSession) times(n int, args map[string]any) (rtt, wall []float64, last *benchReceipt) {
	for i := 0; i < n; i++ {
		d, rc := m.call(args)
		if rc.Execution.Status == wire.StatusOK {
			rtt, wall, last = append(rtt, d), append(wall, float64(rc.Execution.WallMS)), rc
		}
	}
	return rtt, wall, last
}

// benchInVM measures one long-lived VM, as a user runs it, on the cold
// path: every call's box made for it (--warm 0), so that the box's phases
// are a whole box's. The warm part times warm boxes.
func benchInVM(b *testing.B, r *benchReport, k benchKnobs) {
	e := benchEnv(b)
	if out, errOut, code := e.pybox("vm", "start", "--images", "stdlib,data", "--warm", "0"); code != 0 {
		b.Fatalf("vm start: %s%s", out, errOut)
	}
	defer e.pybox("vm", "stop")
	vmFacts(b, r, e)
	m := &mcpSession{b: b, e: e}
	defer func() {
		if m.cs != nil {
			m.cs.Close()
		}
		if len(m.failed) > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d calls did not end ok and are left out of the figures: %s", len(m.failed), strings.Join(m.failed, "; ")))
		}
	}()
	pandas := map[string]any{"code": benchPandas, "image": "data", "timeout_s": 30}

	// The first pandas call after boot, before anything else touched the
	// data image's pandas files (the agent's warming read what its warm
	// list names before hello).
	d, rc := m.call(pandas)
	r.add(newFigure("pandas", "PyBox via pybox mcp, first call after boot", "ms", []float64{d},
		fmt.Sprintf("status %s, receipt wall_ms %d, memory.peak %.1f MiB", rc.Execution.Status, rc.Execution.WallMS, mib(rc.Execution.Memory.PeakBytes))))

	m.call(map[string]any{"code": benchTrivial, "timeout_s": 10}) // the first stdlib call after boot is not a warm one
	benchPaths(b, r, k, e, m)

	rtt, wall, _ := m.times(k.PandasAlt, pandas)
	r.add(newFigure("pandas", "PyBox via pybox mcp, cold box, later calls", "ms", rtt, "import pandas on the data image, its files in the guest's page cache"))
	r.add(newFigure("pybox", "import pandas, cold box, later calls: receipt wall_ms", "ms", wall, ""))

	benchBare(b, r, k, e)

	plot := map[string]any{"code": benchPlot, "image": "data", "timeout_s": 30, "return_files": true}
	rtt, wall, last := m.times(k.PlotRuns, plot)
	png := "no PNG came back"
	if last != nil && last.Files != nil && len(*last.Files) == 1 {
		png = fmt.Sprintf("PNG %d bytes", (*last.Files)[0].Bytes)
	}
	r.add(newFigure("pybox", "matplotlib PNG via pybox mcp (savefig, PNG returned)", "ms", rtt, png))
	r.add(newFigure("pybox", "matplotlib PNG: receipt wall_ms", "ms", wall, ""))

	benchGrowth(b, r, k, m)
	benchDrift(b, r, k, m)
	vmMemory(b, r, e)
}

func mib(n int64) float64 { return math.Round(float64(n)/(1<<20)*10) / 10 }

// vmFacts records the accel, guest kernel and image digests of the VM.
func vmFacts(b *testing.B, r *benchReport, e *vmEnv) {
	st := e.state()
	r.Machine["accel"] = st.Accel
	r.Machine["machine"] = st.Machine
	r.Machine["guest_kernel"] = st.GuestKernel
	r.Machine["vm"] = fmt.Sprintf("%d vCPU, %d MiB, channel %s", st.CPUs, st.MemoryMiB, st.Channel)
	r.Machine["agent"] = st.AgentVersion + " " + st.AgentCommit
	home, _ := paths.Home()
	for _, im := range st.Images {
		size := int64(0)
		if fi, err := os.Stat(filepath.Join(paths.ImagesDir(home), im.Name, "image.erofs")); err == nil {
			size = fi.Size()
		}
		r.Images[im.Name] = map[string]any{"sha256": im.Digest, "bytes": size}
	}
}

// benchPaths times print(1) through the three host paths in turn (MCP,
// host/client, the `pybox run` command), pass through host/client, and
// the bare ping: where the host's time goes.
func benchPaths(b *testing.B, r *benchReport, k benchKnobs, e *vmEnv, m *mcpSession) {
	c, err := client.Dial(e.home)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var ping []float64
	for i := 0; i < 10*k.Runs; i++ {
		t0 := time.Now()
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		ping = append(ping, msSince(t0))
	}
	r.add(newFigure("pybox", "ping round trip (host → supervisor → guest agent → back)", "ms", ping, "no program work"))

	clientRun := func(code string) (float64, *wire.Receipt) {
		run := &wire.Run{RunID: wire.NewRunID(""), Code: code, Image: "stdlib", TimeoutSeconds: 10, MaxOutputBytes: 4096}
		t0 := time.Now()
		res, err := c.Run(ctx, mustCheck(b, run))
		d := msSince(t0)
		if err != nil || res.Receipt.Status != wire.StatusOK {
			b.Fatalf("run %q: %v %+v", code, err, res)
		}
		return d, &res.Receipt
	}
	script := filepath.Join(b.TempDir(), "p.py")
	os.WriteFile(script, []byte(benchTrivial+"\n"), 0o600)
	var viaMCP, mcpWall, viaClient, viaCLI, passRTT, passWall []float64
	var passIDs []string
	var peak int64
	for i := 0; i < k.Runs; i++ {
		d, rc := m.call(map[string]any{"code": benchTrivial, "timeout_s": 10})
		viaMCP, mcpWall, peak = append(viaMCP, d), append(mcpWall, float64(rc.Execution.WallMS)), rc.Execution.Memory.PeakBytes
		d, _ = clientRun(benchTrivial)
		viaClient = append(viaClient, d)
		t0 := time.Now()
		if _, errOut, code := e.pybox("run", script); code != 0 {
			b.Fatalf("pybox run: %s", errOut)
		}
		viaCLI = append(viaCLI, msSince(t0))
		d, rec := clientRun("pass")
		passRTT, passWall = append(passRTT, d), append(passWall, float64(rec.WallMS))
		passIDs = append(passIDs, rec.RunID)
	}
	r.add(newFigure("trivial", "PyBox via pybox mcp, cold box (VM running)", "ms", viaMCP, "tools/call round trip, Go SDK client, one long-lived `pybox mcp`, a box made for the call"))
	r.add(newFigure("pybox", "print(1) via pybox mcp: tools/call round trip", "ms", viaMCP, ""))
	r.add(newFigure("pybox", "print(1) via host/client (no MCP): round trip", "ms", viaClient, "same run, the supervisor socket directly"))
	r.add(newFigure("pybox", "print(1) via `pybox run` command wall", "ms", viaCLI, "includes starting the pybox process"))
	r.add(newFigure("pybox", "print(1): receipt wall_ms (program start → exit, in the box)", "ms", mcpWall, "the guest's own work"))
	r.add(newFigure("pybox", "pass via host/client: round trip (the sealed run, end to end)", "ms", passRTT, ""))
	r.add(newFigure("pybox", "pass: receipt wall_ms (python3 start → exit inside the box)", "ms", passWall, ""))
	r.add(newFigure("memory", "memory.peak of the trivial run (receipt)", "MiB", []float64{mib(peak)}, "print(1) on stdlib"))

	r.add(newFigure("goals", "MCP path on top of the guest's own work: tools/call round trip − receipt wall_ms, print(1)", "ms", pairDiff(viaMCP, mcpWall),
		"goal ≤ 5 ms on KVM; this is box setup + teardown + staging + relay + MCP"))
	r.add(newFigure("goals", "of which the MCP layer: tools/call − host/client round trip, print(1)", "ms", pairDiff(viaMCP, viaClient),
		"JSON-RPC over stdio, argument checks, result JSON; within noise when near 0"))
	r.add(newFigure("goals", "of which the box: host/client round trip − receipt wall_ms, pass", "ms", pairDiff(passRTT, passWall),
		"namespaces, cgroup, staging tmpfs, posture report, seccomp load, output collection, cleanup, plus one ping-sized relay"))
	phases := boxPhases(e, passIDs)
	if len(phases) == 0 {
		r.Skipped["the box's phases"] = "no phase lines for the pass runs in the console log"
	}
	for _, ph := range phaseNames {
		if v := phases[ph]; len(v) > 0 {
			r.add(newFigure("goals", "pass, box phase: "+ph, "ms", v, phaseNotes[ph]))
		}
	}
}

// The box's phases, as the agent logs them for each run ("box: run ID:
// T ms in all: cgroup 1.2, staging 3.4, ... (ms)").
var (
	phaseNames = []string{"in all", "cgroup", "staging", "spawn", "box-init", "program", "settle", "output", "cleanup"}
	phaseNotes = map[string]string{
		"in all":   "in the guest, from the request to the receipt",
		"cgroup":   "make the run's cgroup and set its limits",
		"staging":  "the /tmp tmpfs and the input files",
		"spawn":    "clone box-init into new namespaces and the cgroup",
		"box-init": "mounts, pivot_root, dropping privileges, seccomp, the posture check",
		"program":  "python3 start → exit (receipt wall_ms)",
		"settle":   "kill what is left, wait for the cgroup to empty, drain the pipes",
		"output":   "collect /tmp/output",
		"cleanup":  "read the counters, remove the tmpfs and the cgroup, check they are gone",
	}
	rePhases = regexp.MustCompile(`box: run (\S+) \((?:warm|cold)\): ([0-9.]+) ms in all: (.*) \(ms\)`)
)

// boxPhases reads the phase lines of the given runs from the console log.
func boxPhases(e *vmEnv, ids []string) map[string][]float64 {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := map[string][]float64{}
	b, _ := os.ReadFile(paths.ForVM(e.home).ConsoleLog())
	for _, g := range rePhases.FindAllStringSubmatch(string(b), -1) {
		if !want[g[1]] {
			continue
		}
		if v, err := strconv.ParseFloat(g[2], 64); err == nil {
			out["in all"] = append(out["in all"], v)
		}
		for _, part := range strings.Split(g[3], ", ") {
			name, val, _ := strings.Cut(part, " ")
			if v, err := strconv.ParseFloat(val, 64); err == nil {
				out[name] = append(out[name], v)
			}
		}
	}
	return out
}

// bareInBox starts python3 k times from inside one box and prints the
// wall time of each in ms: python3 started bare (no new box) in the same
// guest. It still runs under the box's seccomp filter and cgroup, which
// is the closest to bare the guest offers.
const bareInBox = `import subprocess, sys, time
ms = []
for _ in range(%d):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-B", "-c", "pass"], check=True)
    ms.append((time.perf_counter() - t0) * 1000)
print(" ".join("%%.1f" %% x for x in ms))`

func benchBare(b *testing.B, r *benchReport, k benchKnobs, e *vmEnv) {
	c, err := client.Dial(e.home)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	run := &wire.Run{RunID: wire.NewRunID(""), Code: fmt.Sprintf(bareInBox, k.Runs), Image: "stdlib", TimeoutSeconds: 30, MaxOutputBytes: 4096}
	res, err := c.Run(context.Background(), mustCheck(b, run))
	if err != nil || res.Receipt.Status != wire.StatusOK {
		b.Fatalf("bare python3 in the box: %v %+v", err, res)
	}
	var ms []float64
	for _, f := range strings.Fields(res.Receipt.Capture.Stdout) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			b.Fatalf("bare python3 in the box printed %q", res.Receipt.Capture.Stdout)
		}
		ms = append(ms, v)
	}
	r.add(newFigure("pybox", "pass: python3 -I -B started bare inside a box (same guest, no new box)", "ms", ms,
		"subprocess.run from a running box: no namespaces, cgroup or staging of its own, but still under the box's seccomp filter"))
}

// benchGrowth measures per-call cost against input and output sizes.
func benchGrowth(b *testing.B, r *benchReport, k benchKnobs, m *mcpSession) {
	for _, size := range []int{0, 64 << 10, 256 << 10} {
		args := map[string]any{"code": "pass", "timeout_s": 10}
		if size > 0 {
			args["files"] = []map[string]any{{"name": "in.bin", "encoding": "base64",
				"content": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'x'}, size))}}
		}
		rtt, _, _ := m.times(k.Runs, args)
		r.add(newFigure("growth", fmt.Sprintf("input file %d KiB (pass)", size>>10), "ms", rtt, "tools/call round trip"))
	}
	outputs := []struct{ name, code string }{
		{"output 0 B (pass)", "pass"},
		{"output 8 KiB per stream", "import sys; sys.stdout.write('o' * 8192); sys.stderr.write('e' * 8192)"},
		{"output 48 KiB of files returned", "open('/tmp/output/a.bin', 'wb').write(b'z' * (48 << 10))"},
	}
	for _, o := range outputs {
		args := map[string]any{"code": o.code, "max_output_bytes": 8192, "timeout_s": 10}
		if strings.Contains(o.name, "files") {
			args["return_files"] = true
		}
		rtt, _, _ := m.times(k.Runs, args)
		r.add(newFigure("growth", o.name, "ms", rtt, "tools/call round trip"))
	}
}

// benchDrift makes k.Calls sequential trivial calls: throughput, and
// whether a long VM life makes calls slower.
func benchDrift(b *testing.B, r *benchReport, k benchKnobs, m *mcpSession) {
	var all []float64
	t0 := time.Now()
	for i := 0; i < k.Calls; i++ {
		d, _ := m.call(map[string]any{"code": benchTrivial, "timeout_s": 10})
		all = append(all, d)
	}
	total := time.Since(t0)
	dec := max(1, k.Calls/10)
	first := r.add(newFigure("drift", fmt.Sprintf("first decile of %d sequential print(1) calls", k.Calls), "ms", all[:dec], ""))
	last := r.add(newFigure("drift", fmt.Sprintf("last decile of %d sequential print(1) calls", k.Calls), "ms", all[len(all)-dec:], ""))
	cpm := float64(k.Calls) / total.Minutes()
	r.add(newFigure("drift", "calls per minute, sustained (one client, sequential)", "calls/min", []float64{math.Round(cpm*10) / 10},
		fmt.Sprintf("%d calls in %.1f s, including an MCP reconnect every 30 calls", k.Calls, total.Seconds())))
	r.Notes = append(r.Notes, fmt.Sprintf("Drift: last-decile median / first-decile median = %.2f over %d calls (BENCH_CALLS).", last.Median/first.Median, k.Calls))
}

// vmMemory reads QEMU's resident memory on the host and the agent's in
// the guest.
func vmMemory(b *testing.B, r *benchReport, e *vmEnv) {
	st := e.state()
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.QEMUPid))
	if err != nil {
		b.Logf("QEMU status: %v", err)
		return
	}
	for _, l := range strings.Split(string(s), "\n") {
		for _, key := range []string{"VmRSS", "VmHWM"} {
			if strings.HasPrefix(l, key+":") {
				kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
				r.add(newFigure("memory", "QEMU "+key+" on the host, after the bench", "MiB", []float64{math.Round(kb/1024*10) / 10},
					fmt.Sprintf("guest has %d MiB; page cache of the images counts once read", st.MemoryMiB)))
			}
		}
	}
	// The agent's own view of itself, from its console.
	status := agentConsole(b, e.home, "status")
	if g := reAgentMemory.FindStringSubmatch(status); g != nil {
		for i, what := range []string{"resident (VmRSS)", "peak resident (VmHWM)", "anonymous resident (RssAnon)"} {
			kb, _ := strconv.ParseFloat(g[i+1], 64)
			r.add(newFigure("memory", "guest agent "+what+", after the bench", "MiB", []float64{math.Round(kb/1024*10) / 10}, "the agent's console status"))
		}
	} else {
		r.Skipped["agent RSS in the guest"] = "the agent's console status has no memory line: " + status
	}
}

// goals compares the sealed run of pass with python3 started bare in the
// same guest (the 30 % goal for the box's own cost).
func goals(r *benchReport) {
	sealed := r.find("pybox", "pass via host/client: round trip (the sealed run, end to end)")
	inBox := r.find("pybox", "pass: receipt wall_ms (python3 start → exit inside the box)")
	bare := r.find("pybox", "pass: python3 -I -B started bare inside a box (same guest, no new box)")
	if sealed == nil || bare == nil || bare.Median == 0 {
		return
	}
	f := r.add(newFigure("goals", "sealed run of pass (host round trip) − bare python3 start in the same guest", "ms",
		[]float64{sealed.Median - bare.Median}, fmt.Sprintf("ratio %.2f× (goal ≤ 1.30×); medians %s vs %s ms", sealed.Median/bare.Median, num(sealed.Median), num(bare.Median))))
	f.Ratio = math.Round(sealed.Median/bare.Median*100) / 100
	if host := r.find("trivial", "bare python3 (host, the floor)"); host != nil && inBox != nil && host.Median > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("Emulation factor on this machine (%s): python3 start → exit takes %s ms in the guest (receipt wall_ms of pass) against %s ms for print(1) on the host, %.0f×.",
			r.Machine["accel"], num(inBox.Median), num(host.Median), inBox.Median/host.Median))
	}
	if inBox != nil {
		g := r.add(newFigure("goals", "python3 start in the box (receipt wall_ms) − bare start in the same guest", "ms",
			[]float64{inBox.Median - bare.Median}, fmt.Sprintf("ratio %.2f×: the program itself once the box is up (bare is timed with subprocess.run, which adds a fork from Python)", inBox.Median/bare.Median)))
		g.Ratio = math.Round(inBox.Median/bare.Median*100) / 100
	}
}

// ratios sets each trivial and pandas figure's ratio to the host floor.
func ratios(r *benchReport) {
	for _, sec := range []string{"trivial", "pandas"} {
		floor := r.find(sec, "bare python3 (host, the floor)")
		if floor == nil || floor.Median == 0 {
			continue
		}
		for _, f := range r.Figures {
			if f.Section == sec {
				f.Ratio = math.Round(f.Median/floor.Median*100) / 100
			}
		}
	}
}

// markdown renders the report as results.md.
func markdown(r *benchReport) string {
	var w strings.Builder
	fmt.Fprintf(&w, "# PyBox benchmark, %s\n\n", r.Date)
	keys := make([]string, 0, len(r.Machine))
	for k := range r.Machine {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w.WriteString("| machine | |\n|---|---|\n")
	for _, k := range keys {
		fmt.Fprintf(&w, "| %s | %s |\n", k, r.Machine[k])
	}
	names := make([]string, 0, len(r.Images))
	for n := range r.Images {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		im := r.Images[n].(map[string]any)
		fmt.Fprintf(&w, "| image %s | sha256 %s, %.1f MiB |\n", n, im["sha256"], float64(im["bytes"].(int64))/(1<<20))
	}
	fmt.Fprintf(&w, "\nKnobs: BENCH_RUNS=%d BENCH_BOOTS=%d BENCH_CALLS=%d BENCH_PLOT_RUNS=%d BENCH_PANDAS_RUNS=%d BENCH_WARM_RUNS=%d BENCH_ONLY=%s. "+
		"Figures are medians with [min–max] and p90 over n samples, all measured in this one run.\n",
		r.Knobs.Runs, r.Knobs.Boots, r.Knobs.Calls, r.Knobs.PlotRuns, r.Knobs.PandasAlt, r.Knobs.WarmRuns, cmp.Or(r.Knobs.Only, "(all)"))
	titles := []struct{ sec, title string }{
		{"trivial", "print(1), one call, against the alternatives (ratio to bare python3 on the host)"},
		{"pandas", "import pandas, one call, against the alternatives"},
		{"boot", "VM boot"},
		{"goals", "Goal figures (reported, not asserted) and where the time goes"},
		{"warm", "Warm boxes against cold boxes (--warm 0), the same calls on two VMs taking turns"},
		{"data", "Data folders: the first call on a large one, and reading from one"},
		{"packages", "A binary wheel from a package index (image build --pip) beside numpy from Debian's packages: import, warm and cold (--warm 0), two VMs taking turns"},
		{"pybox", "PyBox paths and programs"},
		{"growth", "Growth with input and output size (tools/call round trip)"},
		{"drift", "Long VM life and throughput"},
		{"hardening", "What the posture check and the seccomp filter cost (benchmark build of the agent, same VM)"},
		{"memory", "Memory: the VM on the host, and what giving freed memory back costs"},
		{"arm64", "The arm64 guest (the Mac's) under QEMU's emulation, beside this host's guest, taking turns (for the record)"},
		{"relay", "The host's round trip beside the code before the relay became a router of framed bytes (two VMs, turns taken)"},
		{"jail", "QEMU jailed against unjailed"},
		{"agents", "Several agents on one VM (sized for 4 runs, 2 vCPUs): calls back to back at once, and one agent beside a CPU spinner"},
		{"net", "The network opened with --allow-net: a 100 MB download through the box's proxy beside curl on the host, taking turns, and what the option costs a call that opens no connection"},
	}
	// A section without a title still shows, under its own name.
	for _, f := range r.Figures {
		if !slices.ContainsFunc(titles, func(t struct{ sec, title string }) bool { return t.sec == f.Section }) {
			titles = append(titles, struct{ sec, title string }{f.Section, f.Section})
		}
	}
	for _, t := range titles {
		if !slices.ContainsFunc(r.Figures, func(f *figure) bool { return f.Section == t.sec }) {
			continue // a part BENCH_ONLY left out
		}
		fmt.Fprintf(&w, "\n## %s\n\n| what | n | median | min–max | p90 | ratio | note |\n|---|---|---|---|---|---|---|\n", t.title)
		for _, f := range r.Figures {
			if f.Section != t.sec {
				continue
			}
			ratio := ""
			if f.Ratio != 0 {
				ratio = fmt.Sprintf("%.2f×", f.Ratio)
			}
			fmt.Fprintf(&w, "| %s | %d | %s %s | %s–%s | %s | %s | %s |\n", f.Name, f.N, num(f.Median), f.Unit,
				num(f.Min), num(f.Max), num(f.P90), ratio, f.Note)
		}
	}
	if len(r.Skipped) > 0 {
		w.WriteString("\n## Not measured\n\n")
		skipped := make([]string, 0, len(r.Skipped))
		for k := range r.Skipped {
			skipped = append(skipped, k)
		}
		sort.Strings(skipped)
		for _, k := range skipped {
			fmt.Fprintf(&w, "- %s: %s\n", k, r.Skipped[k])
		}
	}
	if len(r.Notes) > 0 {
		w.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&w, "- %s\n", n)
		}
	}
	return w.String()
}

func num(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
