//go:build linux

// Command pybox-guest is the guest's /init: PID 1 of the VM, and the first
// process of every box, which the agent starts as "/proc/self/exe box-init".
package main

import (
	"os"

	"pybox/guest/agent"
	"pybox/guest/box"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "box-init" {
		box.ChildMain()
	} else {
		agent.Main()
	}
}
