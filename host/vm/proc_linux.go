package vm

import (
	"bytes"
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
