//go:build linux && pyboxbench

package box

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// The benchmark build (the pyboxbench tag; `make bench-guest` builds
// it, never `make` or `make guest`) can run boxes without the posture
// check, or without it and the seccomp filter, so that `make bench` can
// time what those two cost per run against the same VM, side by side.
// Its agent says "-bench" after its version.
const benchBuild = true

// Seal modes, from the product's own to the barest.
const (
	SealFull      = "sealed"     // as in every other build
	SealNoPosture = "no-posture" // seccomp on, posture not checked
	SealNeither   = "neither"    // no seccomp filter, posture not checked
)

var sealModes = []string{SealFull, SealNoPosture, SealNeither}

// sealMode is the mode of the next runs; nil means SealFull.
var sealMode atomic.Pointer[string]

// Seal is the mode the next run will use.
func (b *Runner) Seal() string {
	if m := sealMode.Load(); m != nil {
		return *m
	}
	return SealFull
}

// SetSeal sets the mode of the runs that start from now on.
func (b *Runner) SetSeal(mode string) error {
	if !slices.Contains(sealModes, mode) {
		return fmt.Errorf("unknown seal mode %q: want one of %s", mode, strings.Join(sealModes, ", "))
	}
	sealMode.Store(&mode)
	return nil
}

func (b *Runner) skips() (posture, seccomp bool) {
	switch b.Seal() {
	case SealNoPosture:
		return true, false
	case SealNeither:
		return true, true
	}
	return false, false
}
