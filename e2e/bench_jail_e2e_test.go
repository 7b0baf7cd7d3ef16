package e2e

// The jail part of `make bench`: what QEMU's jail costs. Boot to hello,
// and a warm print(1) through `pybox mcp` with a ping beside it, for a VM
// whose QEMU runs in the namespaces jail against one whose QEMU runs
// unjailed (--qemu-jail none), both with the stdlib image and a data
// folder. Boots alternate between the two; the calls run with both VMs
// up, one vCPU each, after a pause, each side first in turn (as the
// relay part does), so what loads the machine loads both alike.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func benchJail(b *testing.B, r *benchReport, k benchKnobs) {
	data := openTempDir(b)
	if err := os.WriteFile(filepath.Join(data, "sales.csv"), []byte("region,sales\nnorth,120\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	repo, _ := filepath.Abs("..")
	ping := buildRelayPing(b, repo)
	sides := []*relaySide{{name: "jailed (namespaces)"}, {name: "unjailed (--qemu-jail none)"}}
	jails := map[string]string{sides[0].name: "namespaces", sides[1].name: "none"}
	for _, s := range sides {
		s.e = newVMEnv(b)
		s.ping = ping
		linkImages(b, s.e, "stdlib")
	}
	start := func(s *relaySide) {
		s.e.mustStart("--images", "stdlib", "--data", "d="+data, "--qemu-jail", jails[s.name])
		if j := s.e.state().Jail; !strings.HasPrefix(j, jails[s.name]) {
			b.Fatalf("%s: the VM runs with jail %q", s.name, j)
		}
	}
	boot := map[string][]float64{}
	for i := 0; i < k.Boots; i++ {
		for j := range sides {
			s := sides[(i+j)%len(sides)]
			start(s)
			boot[s.name] = append(boot[s.name], float64(s.e.state().BootMS))
			s.e.pybox("vm", "stop")
		}
	}
	for _, s := range sides {
		start(s)
		defer s.e.pybox("vm", "stop")
		defer s.open(b)()
	}
	pings := map[string][]float64{}
	call := map[string][]float64{}
	inTurns(k.Runs, sides, func(s *relaySide) {
		pings[s.name] = append(pings[s.name], pingTimes(b, s, 10)...)
		d, _ := s.m.call(map[string]any{"code": benchTrivial, "timeout_s": 10})
		call[s.name] = append(call[s.name], d)
	})
	for _, s := range sides {
		r.add(newFigure("jail", "boot to hello, "+s.name, "ms", boot[s.name], "stdlib and a data folder, 1 vCPU, 768 MiB, the boots alternating"))
		r.add(newFigure("jail", "ping round trip, "+s.name, "ms", pings[s.name], "one client connection, 10 pings per turn"))
		r.add(newFigure("jail", "print(1) via pybox mcp, warm box, "+s.name, "ms", call[s.name], "tools/call round trip, Go SDK client"))
	}
	ratioNotes(r, "QEMU jailed against unjailed", sides, []sideFigure{{"boot to hello", boot}, {"ping round trip", pings}, {"print(1) via pybox mcp", call}})
}
