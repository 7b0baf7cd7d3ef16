//go:build !pyboxbench

package agent

import (
	"slices"
	"strings"
	"testing"

	"pybox/shared/wire"
)

// Only the benchmark build can switch a box's seal: the product's
// console does not know the command, and help does not list it.
func TestConsoleHasNoSeal(t *testing.T) {
	a := consoleAgent(t)
	for _, line := range []string{"seal", "seal neither", "seal sealed"} {
		if got := answer(a, line); !strings.Contains(got, `unknown command "seal"`) {
			t.Errorf("%q answered %q", line, got)
		}
	}
	if got := answer(a, "help"); strings.Contains(got, "seal") {
		t.Errorf("help lists seal: %q", got)
	}
	if slices.Contains(Capabilities, wire.CapUnsealable) {
		t.Errorf("the product's agent announces %v", Capabilities)
	}
}
