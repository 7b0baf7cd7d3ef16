//go:build !linux && !darwin

package vm

import (
	"fmt"
	"io"
	"runtime"
	"syscall"
)

var errUnsupported = fmt.Errorf("vm: running the VM is not supported on %s yet: PyBox runs it with QEMU on Linux", runtime.GOOS)

// Plan fails: there is no backend for this system.
func Plan(home string, cfg Config, requested string) ([]Attempt, []string, error) {
	return nil, nil, errUnsupported
}

// RecordFailure does nothing: there is no backend for this system.
func RecordFailure(home string, cfg Config, a Attempt, reason string) error { return nil }

// Start fails: there is no backend for this system.
func Start(cfg Config, a Attempt, stderr io.Writer) (*Machine, error) { return nil, errUnsupported }

// Alive reports whether pid exists; without /proc it cannot check marker.
func Alive(pid int, marker string) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// HostMemory fails: there is no backend for this system.
func HostMemory(pid int) (int64, error) { return 0, errUnsupported }
