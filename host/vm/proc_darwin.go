package vm

import (
	"bytes"
	"errors"

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

// HostMemory is not measured on macOS: the VM's memory is held by
// Virtualization.framework's own process, not by PyBox's.
func HostMemory(pid int) (int64, error) {
	return 0, errors.New("vm: the VM's host memory is not measured on macOS (see Activity Monitor's com.apple.Virtualization.VirtualMachine)")
}
