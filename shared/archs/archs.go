// Package archs names the guest architectures PyBox knows, as host and
// guest spell them everywhere: build/ARCH and lib/pybox/ARCH for the
// guest files, the image store's NAME@ARCH, `--arch` on the command line,
// "arch" in state.json and an image's meta.json, and the guest's own
// errors.
package archs

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
)

const (
	X86_64 = "x86_64"
	Arm64  = "arm64"
)

// All are the architectures PyBox builds guests and images for.
var All = []string{X86_64, Arm64}

// Host is this machine's architecture: what a build makes and a VM runs
// unless asked for another.
func Host() string { return Of(runtime.GOARCH) }

// Of names Go's GOARCH as PyBox does.
func Of(goarch string) string {
	if goarch == "amd64" {
		return X86_64
	}
	return goarch
}

// Check refuses an architecture PyBox does not build for.
func Check(a string) error {
	if !slices.Contains(All, a) {
		return fmt.Errorf("architecture %q: use %s", a, strings.Join(All, " or "))
	}
	return nil
}
