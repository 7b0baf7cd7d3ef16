package e2e

// End-to-end tests that every run ends within its bound (the timeout plus
// the allowances of shared/wire/bound.go), however a program tries to
// stretch the phases after it, and that a guest which stops answering is
// noticed and restarted by its supervisor.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"pybox/host/supervisor"
	"pybox/shared/wire"
)

// stretchOutput leaves /tmp/output as costly to collect as a program can
// make it: files at the size limit that take no space (sparse), named to
// sort first so that they are among the files listed (and hashed), and
// thousands of small ones. It also reports whether a file past the limit
// can be made at all.
const stretchOutput = `
import errno, os
def res(name, v): print("RESULT", name, v)
with open("/tmp/output/past-the-limit", "wb") as f:
    try:
        f.truncate(1 << 40); res("fsize", "allowed")
    except OSError as e:
        res("fsize", errno.errorcode[e.errno])
os.remove("/tmp/output/past-the-limit")
for i in range(16):
    with open("/tmp/output/0sparse%02d" % i, "wb") as f:
        f.truncate(64 << 20)
for i in range(3000):
    with open("/tmp/output/s%04d" % i, "w") as f:
        f.write("x")
res("made", "yes")
`

// zeros64MiB is the sha256 of a sparse file of 64 MiB: all zeros.
var zeros64MiB = func() string {
	s := sha256.Sum256(make([]byte, 64<<20))
	return hex.EncodeToString(s[:])
}()

// expectWithinBound checks that a run took no longer than its bound, as a
// user waits for it (a few seconds for the host's side on top).
func expectWithinBound(t *testing.T, elapsed time.Duration, timeoutS float64) {
	t.Helper()
	if limit := wire.RunBound(timeoutS) + 10*time.Second; elapsed > limit {
		t.Errorf("the call took %v; its bound is %v", elapsed.Round(time.Millisecond), limit)
	}
}

func TestBounds(t *testing.T) {
	e := boxVM(t)

	for _, ask := range []bool{false, true} {
		t.Run(fmt.Sprintf("output that takes long to collect, return_files %v", ask), func(t *testing.T) {
			flags := []string{"--timeout", "20"}
			if ask {
				flags = append(flags, "--out", t.TempDir())
			}
			r := runPy(t, e, stretchOutput, flags...)
			rc := expectEnd(t, r, wire.StatusOK)
			expectResults(t, rc, []probe{{"fsize", "EFBIG"}, {"made", "yes"}})
			expectWithinBound(t, r.elapsed, 20)
			expectCollected(t, rc)
			t.Logf("collected in %v of %v: %d returned, %d listed, %d more; overruns %q",
				r.elapsed.Round(time.Millisecond), wire.RunBound(20), len(rc.Output.Returned), len(rc.Output.NotReturned), rc.Output.NotListed, rc.Overruns)
			// The next call, from a new client, runs at once.
			next := runPy(t, e, `print("next")`, "--timeout", "10")
			expectEnd(t, next, wire.StatusOK)
			if next.elapsed > 15*time.Second {
				t.Errorf("the next call took %v", next.elapsed)
			}
		})
	}

	t.Run("a file that grows while it is collected", func(t *testing.T) {
		// A child in its own session appends to a file after the program
		// exits; the box is emptied before /tmp/output is read, so the
		// file stops growing and comes back whole or is listed.
		r := runPy(t, e, `
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", """
f = open('/tmp/output/grow', 'ab')
while True:
    f.write(b'y' * 4096); f.flush()
"""], start_new_session=True)
import time; time.sleep(0.5)
print("RESULT started yes")
`, "--timeout", "10", "--out", t.TempDir())
		rc := expectEnd(t, r, wire.StatusOK)
		expectResults(t, rc, []probe{{"started", "yes"}})
		expectWithinBound(t, r.elapsed, 10)
		seen := len(rc.Output.Returned) + len(rc.Output.NotReturned)
		if seen != 1 {
			t.Errorf("grow: %d entries, want 1: %+v", seen, rc.Output)
		}
		for _, nr := range rc.Output.NotReturned {
			if nr.Reason == wire.NotReturnedChanged {
				t.Errorf("grow changed while it was read: the box was not empty (%+v)", nr)
			}
		}
	})

	t.Run("a cancel during collection returns at once and frees the VM", func(t *testing.T) {
		c := e.rawClient(t, true, "--max-timeout", "30")
		c.initialize()
		c.send(callLine(1, pyArgs(stretchOutput, `,"timeout_s":20`)))
		sent := time.Now()
		// Wait until the guest says the run is collecting its output.
		for {
			if p := guestRun(t, e); p != nil && p.Phase == "output" {
				break
			}
			if time.Since(sent) > wire.RunBound(20) {
				t.Fatal("the run was never seen collecting its output")
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancelled := time.Now()
		c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"test"}}`)
		c.stderr.waitFor(t, 20*time.Second, "cleanup "+wire.CleanupRemoved)
		took := time.Since(cancelled)
		t.Logf("the cancelled run's cleanup was reported %v after the cancel", took.Round(time.Millisecond))
		if took > 10*time.Second {
			t.Errorf("the cancelled run ended %v after its cancel", took)
		}
		if !strings.Contains(c.stderr.String(), "cancelled") {
			t.Errorf("the server's report does not say cancelled:\n%s", c.stderr)
		}
		// The VM takes the next call at once, in the same session.
		c.send(callLine(2, pyArgs(`print("after")`, `,"timeout_s":2`)))
		res := rawResult(t, c.reply("2", 30*time.Second))
		if res.Execution.Status != wire.StatusOK || res.Execution.Cleanup.Status != wire.CleanupRemoved {
			t.Fatalf("the call after the cancel: %s", res.Text)
		}
	})
	expectClean(t, e)
}

// expectCollected checks that every file of stretchOutput is accounted
// for: a sparse file listed has its right sha256, or none and the reason
// "time limit"; and that the receipt says so when collection overran.
func expectCollected(t *testing.T, rc *wire.Receipt) {
	t.Helper()
	limited := 0
	for _, nr := range rc.Output.NotReturned {
		switch {
		case strings.HasPrefix(nr.Reason, wire.NotReturnedTimeLimit):
			limited++
			if nr.SHA256 != "" {
				t.Errorf("%s: a sha256 with reason %q", nr.Name, nr.Reason)
			}
		case strings.HasPrefix(nr.Name, "0sparse") && nr.SHA256 != zeros64MiB:
			t.Errorf("%s: sha256 %q, want that of 64 MiB of zeros", nr.Name, nr.SHA256)
		}
	}
	if n := len(rc.Output.Returned) + len(rc.Output.NotReturned) + rc.Output.NotListed; n != 3016 {
		t.Errorf("%d files accounted for, want 3016", n)
	}
	overran := false
	for _, o := range rc.Overruns {
		overran = overran || strings.HasPrefix(o, "output:")
	}
	if (limited > 0) != overran {
		t.Errorf("%d files cut short by the time limit, but overruns %q", limited, rc.Overruns)
	}
}

// guestRun asks `pybox vm status --json` where the guest's run is.
func guestRun(t *testing.T, e *vmEnv) *wire.RunProgress {
	t.Helper()
	out, _, _ := e.pybox("vm", "status", "--json")
	var s supervisor.Status
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Guest == nil {
		return nil
	}
	if len(s.Guest.Runs) == 0 {
		return nil
	}
	return &s.Guest.Runs[0]
}

// A guest that stops answering (here: its QEMU stopped with SIGSTOP) does
// not hang anyone: the call in flight ends with cleanup UNKNOWN within
// its bound, `pybox vm status` says the guest is not answering, and the
// supervisor restarts the VM by itself, after which calls run again.
func TestWedgedGuestIsRestarted(t *testing.T) {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	e.mustStart("--images", "stdlib")
	before := e.state()

	cmd := runCmdFor(t, e, "import time\ntime.sleep(2)\nprint('never')", "--timeout", "5")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for guestRun(t, e) == nil {
		if time.Since(t0) > time.Minute {
			t.Fatal("the run never showed in `pybox vm status`")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(before.QEMUPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("QEMU %d stopped %v after the call", before.QEMUPid, time.Since(t0).Round(time.Millisecond))

	// The supervisor notices: status shows the health, then the restart.
	sawHealth := false
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := e.state()
		if st != nil && strings.HasPrefix(st.Health, "not answering") {
			sawHealth = true
		}
		if st != nil && st.Phase == supervisor.PhaseRunning && len(st.Restarts) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no restart within 2 minutes; state %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !sawHealth {
		t.Error("state.json never said the guest was not answering")
	}

	err := cmd.Wait()
	elapsed := time.Since(t0)
	r := finishRun(t, cmd, err, elapsed, out.String(), errb.String())
	if r.Receipt != nil || r.Error == nil {
		t.Fatalf("the call on the stopped guest: %s", r.raw)
	}
	if r.Error.Cleanup == nil || r.Error.Cleanup.Status != wire.CleanupUnknown || !strings.Contains(r.Error.Message, "restarts the VM") {
		t.Errorf("its error %+v says cleanup %+v; want UNKNOWN, and that the VM is restarted", r.Error, r.Error.Cleanup)
	}
	if limit := wire.HostDeadline(5) + 5*time.Second; elapsed > limit {
		t.Errorf("the call ended after %v; its deadline is %v", elapsed, limit)
	}

	after := e.state()
	t.Logf("restarted: %+v; the call ended after %v with %s", after.Restarts, elapsed.Round(time.Millisecond), r.Error.Message)
	if after.QEMUPid == before.QEMUPid || after.Health != "" {
		t.Errorf("after the restart: QEMU pid %d (was %d), health %q", after.QEMUPid, before.QEMUPid, after.Health)
	}
	if err := syscall.Kill(before.QEMUPid, 0); err == nil {
		t.Errorf("the stopped QEMU %d is still there", before.QEMUPid)
	}
	statusOut, _, code := e.pybox("vm", "status")
	if code != 0 || !strings.Contains(statusOut, "restarted:") || !strings.Contains(statusOut, "answering") {
		t.Errorf("vm status after the restart (exit %d):\n%s", code, statusOut)
	}
	next := runPy(t, e, `print("again")`, "--timeout", "10")
	if rc := next.receipt(t); rc.Status != wire.StatusOK || rc.Cleanup.Status != wire.CleanupRemoved {
		t.Errorf("the call after the restart: %s", next.dump())
	}
}
