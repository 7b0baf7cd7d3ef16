//go:build pyboxbench

package agent

import (
	"fmt"
	"io"

	"pybox/shared/wire"
)

// The benchmark build's console has one more command, seal, which
// switches the box between its full seal and one without the posture
// check or without the check and the seccomp filter (guest/box's
// seal_bench.go), so that `make bench` can time both in one VM. No
// other build has it.
func init() {
	// The host's commands refuse to run anything on this agent.
	Capabilities = append(Capabilities, wire.CapUnsealable)
	commands = append(commands, command{
		name:     "seal",
		help:     "benchmark build only: `seal` shows, `seal MODE` sets how the next boxes are sealed (sealed, no-posture, neither)",
		withArgs: (*Agent).cmdSeal,
	})
}

// sealer is a Runner whose seal can be switched.
type sealer interface {
	Seal() string
	SetSeal(mode string) error
}

func (a *Agent) cmdSeal(w io.Writer, args []string) {
	s, ok := a.cfg.Runner.(sealer)
	switch {
	case !ok:
		fmt.Fprintln(w, "this agent's runner has no seal to switch")
		return
	case len(args) > 1:
		fmt.Fprintln(w, "usage: seal [sealed|no-posture|neither]")
		return
	case len(args) == 1:
		if err := s.SetSeal(args[0]); err != nil {
			fmt.Fprintln(w, err)
			return
		}
	}
	fmt.Fprintf(w, "seal %s\n", s.Seal())
}
