package vm

import (
	"bytes"

	"golang.org/x/sys/unix"
)

// Alive reports whether pid is a live process whose arguments contain
// marker, so that a recycled pid is never taken for ours. kern.procargs2
// holds argc, the executable's path and the arguments; a zombie has none.
func Alive(pid int, marker string) bool {
	if pid <= 0 {
		return false
	}
	args, err := unix.SysctlRaw("kern.procargs2", pid)
	return err == nil && bytes.Contains(args, []byte(marker))
}
