package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pybox/host/client"
	"pybox/shared/wire"
)

// capture runs f with stdout and stderr going to a pipe and returns what
// they got.
func capture(t *testing.T, f func() int) (string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = w, w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	code := f()
	os.Stdout, os.Stderr = oldOut, oldErr
	w.Close()
	return <-out, code
}

func TestHelpEverywhere(t *testing.T) {
	all := map[string]func([]string) int{}
	for n, c := range commands {
		all[n] = c.run
	}
	for n, c := range vmCommands {
		if !c.hidden {
			all["vm "+n] = c.run
		}
	}
	for name, run := range all {
		for _, h := range []string{"--help", "-h"} {
			out, code := capture(t, func() int { return run([]string{h}) })
			if code != exitOK || !strings.Contains(out, "usage: pybox "+strings.Fields(name)[0]) {
				t.Errorf("pybox %s %s: exit %d, output %q", name, h, code, out)
			}
		}
	}
	if out, code := capture(t, func() int { return dispatch([]string{"--help"}) }); code != exitOK || !strings.Contains(out, "vm") {
		t.Errorf("pybox --help: %d %q", code, out)
	}
}

func TestUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"vm", "frobnicate"}, {}, {"vm"}} {
		out, code := capture(t, func() int { return dispatch(args) })
		if code != exitUsage || !strings.Contains(out, "usage:") {
			t.Errorf("pybox %v: exit %d, output %q", args, code, out)
		}
	}
}

func TestBadFlag(t *testing.T) {
	out, code := capture(t, func() int { return dispatch([]string{"vm", "status", "--nope"}) })
	if code != exitUsage || !strings.Contains(out, "nope") {
		t.Errorf("exit %d, output %q", code, out)
	}
}

func TestParseInterleaved(t *testing.T) {
	fs := flags("x", "", "")
	j := fs.Bool("json", false, "")
	n := fs.Int("n", 0, "")
	pos, _, err := parse(fs, []string{"a.py", "--json", "-n", "3", "b"})
	if err != nil || !*j || *n != 3 || !slices.Equal(pos, []string{"a.py", "b"}) {
		t.Fatalf("pos %q json %v n %d err %v", pos, *j, *n, err)
	}
	fs = flags("x", "", "")
	j = fs.Bool("json", false, "")
	pos, _, err = parse(fs, []string{"--", "--json", "-"})
	if err != nil || *j || !slices.Equal(pos, []string{"--json", "-"}) {
		t.Fatalf("after --: pos %q json %v err %v", pos, *j, err)
	}
}

func TestParseRun(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "s.py")
	os.WriteFile(script, []byte("print(open('/tmp/input/data.csv').read())"), 0o600)
	data := filepath.Join(dir, "data.csv")
	os.WriteFile(data, []byte("a,b\n"), 0o600)
	ra, code, ok := parseRun([]string{"--timeout", "5", script, "--file", data, "--out", dir, "--json"})
	if !ok {
		t.Fatalf("parseRun failed: %d", code)
	}
	r := ra.run
	if r.TimeoutSeconds != 5 || r.Image != "stdlib" || !r.ReturnFiles || !ra.asJSON || len(r.Files) != 1 || r.Files[0].Name != "data.csv" {
		t.Errorf("run %+v", r)
	}
	if len(r.RunID) != 16 {
		t.Errorf("run id %q", r.RunID)
	}
	for _, bad := range [][]string{
		{"--timeout", "31", script},
		{"--timeout", "0", script},
		{"--max-output-bytes", "9000", script},
		{"--image", "Bad", script},
		{script, script},
		{},
	} {
		_, code := capture(t, func() int { _, c, _ := parseRun(bad); return c })
		if code != exitUsage {
			t.Errorf("parseRun(%q): exit %d, want %d", bad, code, exitUsage)
		}
	}
}

func TestParseRunAllowNet(t *testing.T) {
	script := filepath.Join(t.TempDir(), "s.py")
	os.WriteFile(script, []byte("print(1)"), 0o600)
	ra, code, ok := parseRun([]string{script})
	if !ok || ra.run.Net || ra.gate != nil || ra.checked.Run().Net {
		t.Fatalf("without --allow-net: %d %+v", code, ra)
	}
	ra, code, ok = parseRun([]string{"--allow-net", "example.com,127.0.0.1:8443", script})
	if !ok {
		t.Fatalf("parseRun failed: %d", code)
	}
	if !ra.run.Net || !ra.checked.Run().Net || ra.gate == nil {
		t.Fatalf("run %+v gate %v", ra.run, ra.gate)
	}
	if _, ok := ra.gate.Allow.Allows("127.0.0.1", 8443); !ok {
		t.Errorf("the gate does not allow 127.0.0.1:8443: %s", ra.gate.Allow)
	}
	if _, ok := ra.gate.Allow.Allows("example.org", 443); ok {
		t.Errorf("the gate allows example.org: %s", ra.gate.Allow)
	}
	for _, bad := range []string{"", "http://example.com", "example.com,,x.org", "*.com", "example.com:0"} {
		out, code := capture(t, func() int { _, c, _ := parseRun([]string{"--allow-net", bad, script}); return c })
		if code != exitUsage || !strings.Contains(out, "--allow-net") {
			t.Errorf("--allow-net %q: exit %d, output %q", bad, code, out)
		}
	}
	out, _ := capture(t, func() int { _, c, _ := parseRun([]string{"--allow-net", "ok.example,bad entry", script}); return c })
	if !strings.Contains(out, `"bad entry"`) {
		t.Errorf("the error does not name the entry: %q", out)
	}
}

func TestNetworkSummary(t *testing.T) {
	if l := networkSummary(nil); l != nil {
		t.Errorf("no network: %q", l)
	}
	nw := &wire.Network{Allowed: "example.com", NotListed: 2, Refused: 11, SentBytes: 2048, ReceivedBytes: 10,
		Connections: []wire.NetConnection{{Host: "example.com", Port: 443, Kind: "tls", Allowed: true}, {Host: "::1", Port: 80, Why: "not on the list"}}}
	for range 9 {
		nw.Connections = append(nw.Connections, wire.NetConnection{Host: "evil.test", Port: 443, Why: "not on\x1b the list"})
	}
	nw.Connections[2].Why = "refused: the TLS server name x is not the host of the CONNECT, evil.test"
	l := networkSummary(nw)
	if len(l) != 1+8+1 || l[0] != "network: 13 connections (11 refused), 2.0 KiB sent, 10 B received" ||
		l[1] != "refused: [::1]:80: not on the list" || l[2] != "refused: evil.test:443: the TLS server name x is not the host of the CONNECT, evil.test" || !strings.HasPrefix(l[9], "refused: 3 more") {
		t.Errorf("summary %q", l)
	}
	// The summary's lines are escaped when printed (runDone).
	rc := &wire.Receipt{RunID: "r", Status: wire.StatusOK, Network: nw, Cleanup: wire.Cleanup{Status: wire.CleanupRemoved}}
	out, _ := capture(t, func() int { return runDone(&runArgs{}, &client.Result{Result: wire.Result{Receipt: *rc}}, nil) })
	if strings.Contains(out, "\x1b") || !strings.Contains(out, "pybox: network: 13 connections") {
		t.Errorf("printed %q", out)
	}
}

// A lookup by the box's resolver is named as one, without a port.
func TestNetworkSummaryLookups(t *testing.T) {
	nw := &wire.Network{Allowed: "example.com", Refused: 1, Connections: []wire.NetConnection{
		{Host: "example.com", Kind: "dns", Allowed: true, Address: "93.184.216.34"},
		{Host: "example.com", Port: 443, Kind: "tls", Allowed: true},
		{Host: "other.example", Kind: "dns", Why: "other.example is not on the list"},
	}}
	l := networkSummary(nw)
	if len(l) != 2 || l[0] != "network: 3 connections and lookups (1 refused), 0 B sent, 0 B received" ||
		l[1] != "refused: the lookup of other.example: other.example is not on the list" {
		t.Errorf("summary %q", l)
	}
}
