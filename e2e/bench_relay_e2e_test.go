package e2e

// The relay part of `make bench`: the host's round trip of this tree
// beside PyBox as it was before the supervisor became a router of framed
// bytes (the commit BENCH_BEFORE names; scripts/bench-before.sh builds it
// into BENCH_BEFORE_DIR). Two figures a side: a bare ping (host →
// supervisor → guest agent → back) and print(1) through `pybox mcp`. Both
// VMs run at once, one vCPU each, idle but for the call in flight, and the
// samples alternate between them, each after a pause and each side first
// in turn, so what loads the machine loads both alike.

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"pybox/host/guestfiles"
	"pybox/host/paths"
)

// relayPing is a program built inside each tree (by go build -overlay, so
// neither tree is written to) against that tree's host/client: it dials
// the supervisor of PYBOX_HOME once, pings it as many times as its
// argument says, and prints each round trip in microseconds. Dial and Ping
// have the same signatures on both sides of the change.
const relayPing = `package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"pybox/host/client"
)

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	c, err := client.Dial(os.Getenv("PYBOX_HOME"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := c.Ping(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(time.Since(t0).Microseconds())
	}
}
`

// relaySide is one tree: its VM, its ping program and its MCP session.
type relaySide struct {
	name string
	e    *vmEnv
	ping string
	m    *mcpSession
}

func benchRelay(b *testing.B, r *benchReport, k benchKnobs) {
	dir := os.Getenv("BENCH_BEFORE_DIR")
	if dir == "" {
		r.Skipped["the relay against the code before it"] = "BENCH_BEFORE_DIR is not set (make bench builds it with scripts/bench-before.sh)"
		return
	}
	before := beforeEnv(b, dir)
	now := newVMEnv(b)
	linkImages(b, now, "stdlib")
	repo, _ := filepath.Abs("..")
	commit := filepath.Base(dir)
	sides := []*relaySide{
		{name: "this tree", e: now, ping: buildRelayPing(b, repo)},
		{name: "before (" + commit + ")", e: before, ping: buildRelayPing(b, filepath.Join(dir, "src"))},
	}
	for _, s := range sides {
		s.e.mustStart("--images", "stdlib")
		defer s.e.pybox("vm", "stop")
		defer s.open(b)()
	}
	ping := map[string][]float64{}
	call := map[string][]float64{}
	host := map[string][]float64{}
	ids := map[string][]string{}
	callMS := map[string]float64{}
	inTurns(k.Runs, sides, func(s *relaySide) {
		ping[s.name] = append(ping[s.name], pingTimes(b, s, 10)...)
		d, rc := s.m.call(map[string]any{"code": benchTrivial, "timeout_s": 10})
		call[s.name] = append(call[s.name], d)
		ids[s.name] = append(ids[s.name], rc.Execution.RunID)
		callMS[rc.Execution.RunID] = d
	})
	// What the host adds: the call's round trip less the guest's own
	// time for it, request to receipt, as its agent logged it.
	for _, s := range sides {
		guest := guestRunMS(s.e)
		for _, id := range ids[s.name] {
			if g, ok := guest[id]; ok {
				host[s.name] = append(host[s.name], callMS[id]-g)
			}
		}
		if len(host[s.name]) < len(ids[s.name]) {
			r.Notes = append(r.Notes, fmt.Sprintf("relay, %s: %d of %d calls had no phase line in the console log", s.name, len(ids[s.name])-len(host[s.name]), len(ids[s.name])))
		}
	}
	for _, s := range sides {
		r.add(newFigure("relay", "ping round trip, "+s.name, "ms", ping[s.name], "one client connection, 10 pings per turn"))
		r.add(newFigure("relay", "print(1) via pybox mcp, warm box, "+s.name, "ms", call[s.name], "tools/call round trip, Go SDK client"))
		r.add(newFigure("relay", "print(1) via pybox mcp − the guest's time for the run, "+s.name, "ms", host[s.name], "pybox mcp, the client, the relay and the channel: the box's phases, as the agent logs them, taken out"))
	}
	ratioNotes(r, "The relay against the code before it ("+commit+")", sides, []sideFigure{{"ping round trip", ping}, {"print(1) via pybox mcp", call}, {"print(1) on the host's side", host}})
}

// open starts s's MCP session and warms both ways in (the first ping and
// call pay for the connection); the returned func closes the session.
func (s *relaySide) open(b *testing.B) func() {
	s.m = &mcpSession{b: b, e: s.e, images: "stdlib"}
	pingTimes(b, s, 3)
	s.m.call(map[string]any{"code": benchTrivial, "timeout_s": 10})
	return func() {
		if s.m.cs != nil {
			s.m.cs.Close()
		}
	}
}

// inTurns measures each side runs times. A side's warm box is made again
// after its call, which loads the machine: each side is measured after a
// pause that lets both be ready, and the sides take turns at going first.
func inTurns(runs int, sides []*relaySide, measure func(*relaySide)) {
	for i := 0; i < runs; i++ {
		for j := range sides {
			time.Sleep(2 * time.Second)
			measure(sides[(i+j)%len(sides)])
		}
	}
}

// sideFigure is one figure measured on every side, by side name.
type sideFigure struct {
	what    string
	samples map[string][]float64
}

// ratioNotes notes the first side's median against the second's for
// each figure.
func ratioNotes(r *benchReport, title string, sides []*relaySide, figures []sideFigure) {
	n, o := sides[0].name, sides[1].name
	for _, f := range figures {
		if om := median(f.samples[o]); om > 0 {
			nm := median(f.samples[n])
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %s %.2f× (medians %s vs %s ms, side by side).", title, f.what, math.Round(nm/om*100)/100, num(nm), num(om)))
		}
	}
}

// beforeEnv is a fresh PYBOX_HOME for the tree built in dir: its binary,
// kernel and initramfs, and its own stdlib image linked in.
func beforeEnv(b *testing.B, dir string) *vmEnv {
	src := filepath.Join(dir, "src")
	build := filepath.Join(src, "build", guestArch)
	k, i := filepath.Join(build, guestfiles.KernelName(guestArch)), filepath.Join(build, guestfiles.InitramfsName)
	bin := filepath.Join(src, "bin", "pybox")
	for _, p := range []string{bin, k, i} {
		if _, err := os.Stat(p); err != nil {
			b.Fatalf("BENCH_BEFORE_DIR=%s has no %s: build it with scripts/bench-before.sh", dir, p)
		}
	}
	home, err := os.MkdirTemp("", "pybox-before")
	if err != nil {
		b.Fatal(err)
	}
	e := &vmEnv{t: b, bin: bin, home: home, arch: guestArch}
	e.env = append(os.Environ(), "PYBOX_HOME="+home, "PYBOX_KERNEL="+k, "PYBOX_INITRAMFS="+i)
	b.Cleanup(func() {
		e.pybox("vm", "stop")
		e.killAll()
		os.RemoveAll(home)
	})
	images := paths.ImagesDir(home)
	if err := os.MkdirAll(images, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(paths.ImagesDir(filepath.Join(dir, "home")), "stdlib"), filepath.Join(images, "stdlib")); err != nil {
		b.Fatal(err)
	}
	return e
}

// buildRelayPing builds relayPing inside the module at tree and returns
// the binary.
func buildRelayPing(b *testing.B, tree string) string {
	tmp := b.TempDir()
	src, bin := filepath.Join(tmp, "main.go"), filepath.Join(tmp, "relayping")
	if err := os.WriteFile(src, []byte(relayPing), 0o644); err != nil {
		b.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	virtual := filepath.Join(tree, "cmd", "pybox-bench-relayping", "main.go")
	if err := os.WriteFile(ov, []byte(fmt.Sprintf(`{"Replace":{%q:%q}}`, virtual, src)), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", ov, "-o", bin, "./cmd/pybox-bench-relayping")
	cmd.Dir = tree
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the ping program in %s: %v\n%s", tree, err, out)
	}
	return bin
}

// pingTimes runs s's ping program for n pings and returns them in ms.
func pingTimes(b *testing.B, s *relaySide, n int) []float64 {
	cmd := exec.Command(s.ping, strconv.Itoa(n))
	cmd.Env = s.e.env
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("ping (%s): %v: %s", s.name, err, errb.String())
	}
	var ms []float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		us, err := strconv.ParseFloat(sc.Text(), 64)
		if err != nil {
			b.Fatalf("ping (%s) printed %q", s.name, sc.Text())
		}
		ms = append(ms, us/1000)
	}
	if len(ms) != n {
		b.Fatalf("ping (%s): %d round trips of %d", s.name, len(ms), n)
	}
	return ms
}

// guestRunMS is each run's time in the guest, request to receipt, from the
// agent's phase lines in e's console log.
func guestRunMS(e *vmEnv) map[string]float64 {
	ms := map[string]float64{}
	b, _ := os.ReadFile(paths.ForVM(e.home).ConsoleLog())
	for _, g := range rePhases.FindAllStringSubmatch(string(b), -1) {
		if v, err := strconv.ParseFloat(g[2], 64); err == nil {
			ms[g[1]] = v
		}
	}
	return ms
}
