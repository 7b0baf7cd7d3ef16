package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"pybox/shared/wire"
)

const prompt = "pybox> "

// command is one of the console prompt's commands. Most take no
// arguments (do); one that does has withArgs instead.
type command struct {
	name, help string
	do         func(a *Agent, w io.Writer)
	withArgs   func(a *Agent, w io.Writer, args []string)
}

// commands are the console prompt's commands, in the order help lists
// them.
var commands = []command{
	{name: "help", help: "this list"}, // answered by Command: it lists this table
	{name: "status", help: "version, health, the current run, the agent's own resources", do: (*Agent).cmdStatus},
	{name: "mounts", help: "the mount table", do: (*Agent).cmdMounts},
	{name: "cgroups", help: "the agent's and the runs' cgroups with their memory and pids", do: (*Agent).cmdCgroups},
	{name: "runs", help: "the current run and the last finished ones", do: (*Agent).cmdRuns},
	{name: "last", help: "the last receipt, as JSON", do: (*Agent).cmdLast},
	{name: "log", help: "the agent's recent log lines", do: (*Agent).cmdLog},
	{name: "warm", help: "each image's warm box; `warm discard IMAGE` discards the one waiting, and the next starts warming; `warm kill IMAGE` kills it as the OOM killer would", withArgs: (*Agent).cmdWarm},
}

// warmKeeper is a Runner whose warm boxes can be discarded or killed by
// hand.
type warmKeeper interface {
	DiscardWarm(image string) error
	KillWarm(image string) error
}

func (a *Agent) cmdWarm(w io.Writer, args []string) {
	if len(args) == 0 {
		for _, wb := range a.cfg.Runner.Warm() {
			fmt.Fprintf(w, "%s: %s\n", warmName(wb), describeWarm(wb))
		}
		return
	}
	if len(args) != 2 || args[0] != "discard" && args[0] != "kill" {
		fmt.Fprintln(w, "usage: warm [discard IMAGE | kill IMAGE]")
		return
	}
	k, ok := a.cfg.Runner.(warmKeeper)
	if !ok {
		fmt.Fprintln(w, "this agent's runner keeps no warm boxes")
		return
	}
	do, done := k.DiscardWarm, "discarded"
	if args[0] == "kill" {
		do, done = k.KillWarm, "killed"
	}
	if err := do(args[1]); err != nil {
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintf(w, "%s %s's warm box\n", done, args[1])
}

// Console runs the prompt on the serial console: a line in, a plain text
// answer out. It returns when in ends. Each answer, with the prompt after
// it, goes out in one Write: the log shares the console (see
// ConsoleWriter), and a log line must not land inside an answer, where a
// reader on the host would take it for part of the status.
func (a *Agent) Console(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	var answer bytes.Buffer
	for sc.Scan() {
		answer.Reset()
		a.Command(sc.Text(), &answer)
		answer.WriteString(prompt)
		if _, err := out.Write(answer.Bytes()); err != nil {
			return err
		}
	}
	return sc.Err()
}

// ConsoleWriter is the console shared by its two writers, the log and the
// prompt: one Write at a time, each whole. A tty takes a write() whole
// against other writers, but the console is non-blocking, so a long
// answer can go out in several write()s, between which the log could
// write.
type ConsoleWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewConsoleWriter shares w.
func NewConsoleWriter(w io.Writer) *ConsoleWriter { return &ConsoleWriter{w: w} }

func (c *ConsoleWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Write(p)
}

// Command answers one console line.
func (a *Agent) Command(line string, w io.Writer) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return
	}
	name, args := fields[0], fields[1:]
	for _, c := range commands {
		if c.name != name {
			continue
		}
		switch {
		case c.withArgs != nil:
			c.withArgs(a, w, args)
		case len(args) > 0:
			fmt.Fprintf(w, "%s takes no arguments\n", name)
		case c.do == nil:
			cmdHelp(w)
		default:
			c.do(a, w)
		}
		return
	}
	fmt.Fprintf(w, "unknown command %q: type help\n", name)
}

func cmdHelp(w io.Writer) {
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.help)
	}
}

func (a *Agent) cmdStatus(w io.Writer) {
	a.mu.Lock()
	stopping, open, served, runs := a.stopping, a.open, a.served, len(a.history)
	a.mu.Unlock()
	aside := a.cfg.Runner.SetAside()
	health := a.health(aside)
	if stopping {
		health += " (shutting down)"
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "agent\t%s (%s), protocol %d, up %s\n", Version, Commit, a.hello.Protocol, time.Since(a.started).Round(time.Second))
	fmt.Fprintf(tw, "kernel\t%s\n", a.cfg.Kernel)
	fmt.Fprintf(tw, "health\t%s\n", health)
	fmt.Fprintf(tw, "images\t%s\n", a.imageList())
	progress := a.cfg.Runner.Runs()
	for _, p := range progress {
		fmt.Fprintf(tw, "running\t%s (image %s) for %s\n", p.RunID, p.Image, (time.Duration(p.RunMS) * time.Millisecond).String())
		fmt.Fprintf(tw, "phase %s\t%s for %d ms (%d ms of the run's bound of %d ms), %d MiB of its %d MiB\n",
			p.RunID, p.Phase, p.PhaseMS, p.RunMS, p.BoundMS, p.MemoryBytes>>20, p.LimitBytes>>20)
	}
	if len(progress) == 0 {
		fmt.Fprintf(tw, "running\tnothing\n")
	}
	if r := a.cfg.Runner.Room(); r != nil {
		fmt.Fprintf(tw, "room\t%s\n", describeRoom(r))
	}
	for _, l := range aside {
		fmt.Fprintf(tw, "set aside\t%s\n", l)
	}
	for _, w := range a.cfg.Runner.Warm() {
		fmt.Fprintf(tw, "warm %s\t%s\n", warmName(w), describeWarm(w))
	}
	fmt.Fprintf(tw, "runs\t%d finished (kept %d)\n", runs, keepRuns)
	fmt.Fprintf(tw, "connections\t%d open, %d served\n", open, served)
	fmt.Fprintf(tw, "goroutines\t%d\n", runtime.NumGoroutine())
	fmt.Fprintf(tw, "open fds\t%s\n", a.countFDs())
	fmt.Fprintf(tw, "go heap\t%d KiB in use, %d KiB from the OS\n", ms.HeapInuse>>10, ms.Sys>>10)
	fmt.Fprintf(tw, "memory\t%s\n", a.rss())
	fmt.Fprintf(tw, "cgroup\t%s\n", a.cgroupLine("sys/fs/cgroup/agent"))
	tw.Flush()
}

// warmName names a warm box by its image, and its kind.
func warmName(w wire.WarmBox) string {
	if w.Net {
		return w.Image + " (with the proxy)"
	}
	return w.Image
}

// describeWarm says how an image's warm box is, in a few words.
func describeWarm(w wire.WarmBox) string {
	switch w.State {
	case "warming":
		if w.Importing != "" {
			return fmt.Sprintf("warming for %d ms, importing %s", w.ForMS, w.Importing)
		}
		return fmt.Sprintf("warming for %d ms", w.ForMS)
	case "ready":
		return fmt.Sprintf("ready for %d ms (preloaded: %s)", w.ForMS, strings.Join(w.Preloaded, " "))
	case "cold":
		if w.Reason != "" {
			return "cold: " + w.Reason
		}
	}
	return w.State
}

func (a *Agent) countFDs() string {
	if a.cfg.Files == nil {
		return "unknown"
	}
	ents, err := fs.ReadDir(a.cfg.Files, "proc/self/fd")
	if err != nil {
		return "unknown: " + err.Error()
	}
	// ReadDir itself holds one fd open while it reads.
	return fmt.Sprint(len(ents) - 1)
}

// rss reads the agent's resident memory from its own status file: the
// current and the peak resident set, and the part that is anonymous
// (heap and stacks, not the binary's pages).
func (a *Agent) rss() string {
	if a.cfg.Files == nil {
		return "unknown"
	}
	b, err := fs.ReadFile(a.cfg.Files, "proc/self/status")
	if err != nil {
		return "unknown: " + err.Error()
	}
	kib := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			if f := strings.Fields(v); len(f) == 2 && f[1] == "kB" {
				kib[k] = f[0]
			}
		}
	}
	if kib["VmRSS"] == "" {
		return "unknown: no VmRSS in proc/self/status"
	}
	return fmt.Sprintf("rss %s KiB (peak %s KiB, anonymous %s KiB)", kib["VmRSS"], kib["VmHWM"], kib["RssAnon"])
}

func (a *Agent) cmdMounts(w io.Writer) { a.cat(w, "proc/self/mounts") }

func (a *Agent) cat(w io.Writer, name string) {
	if a.cfg.Files == nil {
		fmt.Fprintln(w, "no filesystem to read")
		return
	}
	b, err := fs.ReadFile(a.cfg.Files, name)
	if err != nil {
		fmt.Fprintf(w, "%v\n", err)
		return
	}
	w.Write(b)
}

func (a *Agent) cmdCgroups(w io.Writer) {
	if a.cfg.Files == nil {
		fmt.Fprintln(w, "no filesystem to read")
		return
	}
	dirs := []string{"sys/fs/cgroup/agent", "sys/fs/cgroup/runs"}
	ents, _ := fs.ReadDir(a.cfg.Files, "sys/fs/cgroup/runs")
	for _, e := range ents {
		if e.IsDir() {
			dirs = append(dirs, path.Join("sys/fs/cgroup/runs", e.Name()))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, d := range dirs {
		fmt.Fprintf(tw, "/%s\t%s\n", d, a.cgroupLine(d))
	}
	tw.Flush()
}

// cgroupLine reads the few files that say what a cgroup holds.
func (a *Agent) cgroupLine(dir string) string {
	if a.cfg.Files == nil {
		return "unknown"
	}
	var parts []string
	for _, f := range []string{"cgroup.procs", "memory.current", "memory.peak", "memory.low", "memory.max", "pids.current", "pids.max"} {
		b, err := fs.ReadFile(a.cfg.Files, path.Join(dir, f))
		if err != nil {
			continue
		}
		v := strings.Join(strings.Fields(string(b)), ",")
		if f == "cgroup.procs" {
			f, v = "procs", fmt.Sprint(len(strings.Fields(string(b))))
		}
		parts = append(parts, f+"="+v)
	}
	if len(parts) == 0 {
		return "unreadable"
	}
	return strings.Join(parts, " ")
}

func (a *Agent) cmdRuns(w io.Writer) {
	a.mu.Lock()
	var cur []*activeRun
	for _, ar := range a.runs {
		cur = append(cur, ar)
	}
	hist := append([]record(nil), a.history...)
	a.mu.Unlock()
	slices.SortFunc(cur, func(x, y *activeRun) int { return x.started.Compare(y.started) })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tIMAGE\tSTATUS\tCLEANUP\tWALL\tENDED")
	for _, ar := range cur {
		fmt.Fprintf(tw, "%s\t%s\trunning\t-\t%s\t-\n", ar.id, ar.image, time.Since(ar.started).Round(time.Millisecond))
	}
	for i := len(hist) - 1; i >= 0; i-- {
		r := hist[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d ms\t%s ago\n", r.id, r.image, r.status, r.cleanup, r.wallMS, time.Since(r.ended).Round(time.Second))
	}
	tw.Flush()
}

func (a *Agent) cmdLast(w io.Writer) {
	a.mu.Lock()
	last := a.last
	a.mu.Unlock()
	if last == nil {
		fmt.Fprintln(w, "no run has finished yet")
		return
	}
	b, err := json.MarshalIndent(last.Receipt, "", "  ")
	if err != nil {
		fmt.Fprintf(w, "%v\n", err)
		return
	}
	fmt.Fprintf(w, "%s\n", b)
}

func (a *Agent) cmdLog(w io.Writer) {
	if a.cfg.LogLines == nil {
		fmt.Fprintln(w, "no log kept")
		return
	}
	for _, l := range a.cfg.LogLines() {
		fmt.Fprintln(w, l)
	}
}

// describeRoom says how the guest's memory is shared between runs.
func describeRoom(r *wire.Room) string {
	return fmt.Sprintf("%d MiB: runs %d, warm boxes %d, the guest %d, headroom %d, left %d (sized for %d runs at once)",
		r.Total>>20, r.Runs>>20, r.Warm>>20, r.Guest>>20, r.Headroom>>20, r.Left>>20, r.RunsAtOnce)
}
