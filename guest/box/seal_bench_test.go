//go:build linux && pyboxbench

package box

import "testing"

// The benchmark build switches the seal per run, and box-init accepts
// what it is switched to.
func TestSealModes(t *testing.T) {
	b := &Runner{}
	defer b.SetSeal(SealFull)
	for _, c := range []struct {
		mode             string
		posture, seccomp bool
	}{
		{SealNeither, true, true},
		{SealNoPosture, true, false},
		{SealFull, false, false},
	} {
		if err := b.SetSeal(c.mode); err != nil {
			t.Fatal(err)
		}
		cfg := childConfig{Root: "/images/stdlib", Staging: "/run/staging/r1/tmp", Argv: []string{"python3"}, UID: programID, GID: programID, FileSizeMax: tmpBytes}
		cfg.SkipPosture, cfg.SkipSeccomp = b.skips()
		if b.Seal() != c.mode || cfg.SkipPosture != c.posture || cfg.SkipSeccomp != c.seccomp {
			t.Errorf("mode %s: seal %s, skips posture %v seccomp %v", c.mode, b.Seal(), cfg.SkipPosture, cfg.SkipSeccomp)
		}
		if err := cfg.check(); err != nil {
			t.Errorf("mode %s: box-init refuses: %v", c.mode, err)
		}
	}
	if err := b.SetSeal("off"); err == nil || b.Seal() != SealFull {
		t.Errorf("an unknown mode: %v, seal now %s", err, b.Seal())
	}
}
