package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pybox/shared/needs"
	"pybox/shared/wire"
)

// The benchmark build of the agent (make bench-guest) can run boxes
// unsealed. If a VM is ever started with it, the product's paths run
// nothing on it and say how to get the product's agent back: `vm start`
// and `vm status` warn, `pybox run` and `pybox mcp` refuse with nothing
// run. Its seal switch works only here.
func TestBenchAgentRunsNothing(t *testing.T) {
	guestArtifactsForTest(t)
	initramfs, _ := filepath.Abs(filepath.Join("..", "build", guestArch, "bench", "initramfs.cpio"))
	if _, err := os.Stat(initramfs); err != nil {
		needs.Unavailable(t, "no "+initramfs+": run `make bench-guest` (make test builds it)")
	}
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	out, errOut, code := e.pybox("vm", "start", "--initramfs", initramfs, "--images", "stdlib")
	if code != 0 {
		t.Fatalf("vm start with the benchmark agent: %s%s", out, errOut)
	}
	defer func() {
		e.pybox("vm", "stop")
		e.expectGone()
	}()
	const warning = "warning: this is the benchmark build of the guest agent"
	if !strings.Contains(errOut, warning) {
		t.Errorf("vm start did not warn:\n%s%s", out, errOut)
	}
	if out, errOut, _ := e.pybox("vm", "status"); !strings.Contains(errOut, warning) {
		t.Errorf("vm status did not warn:\n%s%s", out, errOut)
	}

	script := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(script, []byte("open('/tmp/output/ran', 'w').write('yes')\nprint('ran')\n"), 0o600)
	out, errOut, code = e.pybox("run", script)
	if code == 0 || strings.Contains(out, "ran") || !strings.Contains(errOut, "benchmark build of the guest agent") ||
		!strings.Contains(errOut, "cleanup NOT_ATTEMPTED") || !strings.Contains(errOut, "pybox vm start") {
		t.Errorf("pybox run on the benchmark agent: exit %d\n%s%s", code, out, errOut)
	}

	cs, _ := e.goClient(t)
	r := goCall(t, cs, map[string]any{"code": "print('ran')"})
	if !r.IsError || r.Doc.Error == nil || r.Doc.Error.Code != wire.ErrUnhealthy || r.Execution.Cleanup.Status != wire.CleanupNotAttempted ||
		!strings.Contains(r.Doc.Error.Message, "benchmark build") || !strings.Contains(r.Doc.Error.Message, "Nothing ran") {
		t.Errorf("pybox mcp on the benchmark agent: %s", r.Text)
	}

	// Nothing reached the guest: its agent has finished no run.
	if runs := agentConsole(t, e.home, "runs"); strings.Count(strings.TrimSpace(runs), "\n") > 1 {
		t.Errorf("the agent ran something:\n%s", runs)
	}
	if got := agentConsole(t, e.home, "seal"); !strings.HasSuffix(got, "\nseal sealed\n") {
		t.Errorf("the benchmark agent's seal: %q", got)
	}
}
