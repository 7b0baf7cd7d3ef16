//go:build !linux

package jail

import (
	"fmt"
	"os"
	"runtime"
)

// Main fails: the jail is built on Linux only (on macOS,
// Virtualization.framework runs each VM in a sandboxed service of its
// own).
func Main() int {
	fmt.Fprintf(os.Stderr, "pybox: the VM jail is for Linux; on %s there is nothing to build\n", runtime.GOOS)
	return 1
}

// LandlockABI is 0: Landlock is Linux's.
func LandlockABI() int { return 0 }
