package vm

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Alive reports whether pid is a live (not zombie) process whose command
// line contains marker, so that a recycled pid is never taken for ours.
func Alive(pid int, marker string) bool {
	if pid <= 0 {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	// A zombie's cmdline is empty: it is gone in every way that matters.
	if err != nil || len(cmdline) == 0 {
		return false
	}
	return bytes.Contains(cmdline, []byte(marker))
}

// HostMemory is what the VM process holds in the host's memory now (its
// resident set, /proc/PID/status VmRSS), in bytes.
func HostMemory(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := bytes.Fields(rest)
			if len(f) == 2 && string(f[1]) == "kB" {
				kb, err := strconv.ParseInt(string(f[0]), 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("vm: no VmRSS for process %d", pid)
}
