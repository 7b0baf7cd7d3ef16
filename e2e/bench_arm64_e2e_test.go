package e2e

// The arm64 part of `make bench`: the Mac's guest, booted here on QEMU's
// emulation of aarch64 (TCG), beside a guest of this host's own
// architecture, for the record. The two take turns: a boot of one, its
// calls, its stop, then the other.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"pybox/shared/archs"
)

func benchArm64(b *testing.B, r *benchReport, k benchKnobs) {
	if archs.Host() == archs.Arm64 {
		r.Skipped["arm64 guest"] = "this host is arm64: its guest is the host's own, measured by the other parts"
		return
	}
	script := filepath.Join(b.TempDir(), "p.py")
	os.WriteFile(script, []byte(benchTrivial+"\n"), 0o600)
	guests := []string{archs.Host(), archs.Arm64}
	envs := map[string]*vmEnv{}
	for _, a := range guests {
		envs[a] = newArchEnv(b, a)
		linkImages(b, envs[a], "stdlib")
	}
	var accel string // the host's guest's
	boot := map[string][]float64{}
	call := map[string][]float64{}
	for i := range max(1, k.Boots) {
		for _, a := range guests {
			e := envs[a]
			if out, errOut, code := e.pybox("vm", "start", "--images", "stdlib"); code != 0 {
				b.Fatalf("vm start (%s guest): %s%s", a, out, errOut)
			}
			st := e.state()
			boot[a] = append(boot[a], float64(st.BootMS))
			if a == archs.Host() {
				accel = st.Accel
			}
			// The first call waits for the warm box the boot started.
			if _, errOut, code := e.pybox("run", script); code != 0 {
				b.Fatalf("pybox run (%s guest): %s", a, errOut)
			}
			ms, err := timeCmd(max(1, k.Runs/max(1, k.Boots)), "1", e.env, e.bin, "run", script)
			if err != nil {
				b.Fatalf("%s guest: %v", a, err)
			}
			call[a] = append(call[a], ms...)
			e.pybox("vm", "stop")
			b.Logf("%s guest, boot %d: boot_ms %.0f, print(1) %v ms", a, i, boot[a][i], ms)
		}
	}
	for _, a := range guests {
		what := a + " guest (this host's, the other parts' VM)"
		if a == archs.Arm64 {
			what = a + " guest (emulated by QEMU, tcg)"
		}
		r.add(newFigure("arm64", "vm start → hello, --images stdlib, "+what, "ms", boot[a], "supervisor boot_ms: QEMU start to the agent's hello, the stdlib image read in"))
		r.add(newFigure("arm64", "print(1) via pybox run, warm box, "+what, "ms", call[a], "round trip of the CLI, each after the call that waited for the warm box"))
	}
	for _, m := range []struct {
		kind    string
		samples map[string][]float64
	}{{"vm start → hello", boot}, {"print(1) via pybox run", call}} {
		hm, am := median(m.samples[archs.Host()]), median(m.samples[archs.Arm64])
		if hm > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("arm64 guest against the %s guest (%s): %s %.1f× (medians %s vs %s ms).",
				archs.Host(), accel, m.kind, math.Round(am/hm*10)/10, num(am), num(hm)))
		}
	}
}
