//go:build pyboxbench

package agent

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"pybox/shared/wire"
)

// sealRunner is a fake runner whose seal can be switched.
type sealRunner struct {
	*fakeRunner
	mode string
}

func (s *sealRunner) Seal() string { return s.mode }
func (s *sealRunner) SetSeal(mode string) error {
	if mode == "bogus" {
		return errors.New("unknown seal mode")
	}
	s.mode = mode
	return nil
}

func TestConsoleSeal(t *testing.T) {
	r := &sealRunner{fakeRunner: newFakeRunner(), mode: "sealed"}
	a := newAgent(t, r.fakeRunner, nil)
	a.cfg.Runner = r
	for _, c := range []struct{ line, want, mode string }{
		{"seal", "seal sealed\n", "sealed"},
		{"seal neither", "seal neither\n", "neither"},
		{"seal bogus", "unknown seal mode\n", "neither"},
		{"seal a b", "usage: seal [sealed|no-posture|neither]\n", "neither"},
		{"seal no-posture", "seal no-posture\n", "no-posture"},
	} {
		if got := answer(a, c.line); got != c.want || r.mode != c.mode {
			t.Errorf("%q answered %q with mode %q, want %q and mode %q", c.line, got, r.mode, c.want, c.mode)
		}
	}
	if got := answer(a, "help"); !strings.Contains(got, "benchmark build only") {
		t.Errorf("help does not list seal: %q", got)
	}
	// It says what it is, so that the host's commands run nothing on it.
	if !slices.Contains(Capabilities, wire.CapUnsealable) {
		t.Errorf("the benchmark agent announces %v", Capabilities)
	}
	// A runner that cannot switch says so.
	if got := answer(newAgent(t, newFakeRunner(), nil), "seal neither"); !strings.Contains(got, "no seal to switch") {
		t.Errorf("seal on a plain runner: %q", got)
	}
}
