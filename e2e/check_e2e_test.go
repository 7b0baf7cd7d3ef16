package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// `pybox check` against the real `pybox mcp` and a real VM: every check
// passes, under MCP 2026-07-28 (discover, and the shared session) and
// 2025-11-25 (initialize, a session of its own with a tools/list and a
// run), and a server started with other options than the check's is
// caught by exactly the checks that see options.
func TestCheckWithVM(t *testing.T) {
	e := startMCPVM(t)
	// A generous ceiling: the first run in a cold image is slow under TCG.
	opts := []string{"--images", "stdlib,data", "--max-timeout", "10"}

	out, errOut, code := e.pybox(append([]string{"check", "--json", "--vm-down"}, opts...)...)
	var names []string
	details := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Name                string
			Pass                bool
			Expected, Got, Hint string
			Detail              string
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a line that is not JSON: %q (%v)", line, err)
		}
		names = append(names, r.Name)
		details[r.Name] = r.Detail
		if !r.Pass {
			t.Errorf("FAIL %s: expected %s; got %s; hint %s", r.Name, r.Expected, r.Got, r.Hint)
		} else {
			t.Logf("PASS %s: %s", r.Name, r.Detail)
		}
	}
	want := []string{"discover", "initialize", "tools-list", "stdlib-run", "memory-final", "image:stdlib", "image:data", "fresh", "files",
		"chart", "unknown-argument", "timeout-ceiling", "output-is-data", "busy", "cancel", "timeout", "trimmed",
		"oversize-message", "vm-down", "stdout-protocol-only"}
	if !slices.Equal(names, want) {
		t.Errorf("checks %q, want %q", names, want)
	}
	if code != exitOK || !strings.Contains(errOut, "20 passed, 0 failed") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	// Each revision as the check saw it: discover at the newest, no
	// handshake; initialize at the older one, with a run.
	if d := details["discover"]; !strings.Contains(d, "MCP 2026-07-28 by server/discover") || !strings.Contains(d, "pybox") {
		t.Errorf("discover: %q", d)
	}
	if d := details["initialize"]; !strings.Contains(d, "MCP 2025-11-25 by initialize") || !strings.Contains(d, "cleanup REMOVED") {
		t.Errorf("initialize: %q", d)
	}
	if d := details["tools-list"]; !strings.Contains(d, "ttlMs 86400000 (private)") {
		t.Errorf("tools-list: %q", d)
	}

	// The server allows only stdlib; the check expects stdlib and data
	// (and makes its chart in data).
	server := []string{"--server", e.bin, "mcp", "--images", "stdlib", "--max-timeout", "10"}
	out, errOut, code = e.pybox(append(append([]string{"check"}, opts...), server...)...)
	var failed []string
	for _, line := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(line, "FAIL "); ok {
			failed = append(failed, strings.Fields(name)[0])
		}
	}
	if code != exitFailure || !slices.Equal(failed, []string{"tools-list", "image:data", "chart"}) || !strings.HasSuffix(out, "16 passed, 3 failed\n") {
		t.Errorf("exit %d, failed %q:\n%s\nstderr:\n%s", code, failed, out, errOut)
	}
}
