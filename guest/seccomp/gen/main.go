//go:build linux && cgo

// Command gen compiles the box's seccomp policy (pybox/guest/seccomp's
// Policy table) to classic BPF with libseccomp, one program per
// architecture, and writes policy_<goarch>.bpf into -out. It needs cgo
// and libseccomp-dev; the guest that loads the programs does not.
//
//	go generate ./guest/seccomp
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	out := flag.String("out", ".", "directory to write policy_<goarch>.bpf into")
	flag.Parse()
	goarches := make([]string, 0, len(arches))
	for a := range arches {
		goarches = append(goarches, a)
	}
	slices.Sort(goarches)
	for _, a := range goarches {
		prog, missing, err := Compile(a)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		name := filepath.Join(*out, "policy_"+a+".bpf")
		if err := os.WriteFile(name, prog, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "gen: %s: %d instructions; not on %s: %s\n",
			name, len(prog)/8, a, strings.Join(missing, " "))
	}
}
