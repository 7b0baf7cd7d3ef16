package initramfs

import (
	"fmt"
	"io"
)

// dirs are the mount points the agent needs before anything is mounted.
var dirs = []string{"dev", "proc", "sys", "run", "tmp", "images"}

// Guest returns the entries of the guest initramfs: agent as /init,
// /dev/console (5,1: without it /init has no stdout), and the mount points.
func Guest(agent []byte) []Entry {
	entries := []Entry{
		{Name: "init", Mode: ModeFile | 0o755, Data: agent},
		{Name: "dev/console", Mode: ModeCharDev | 0o600, Major: 5, Minor: 1},
	}
	for _, d := range dirs {
		entries = append(entries, Entry{Name: d, Mode: ModeDir | 0o755})
	}
	return entries
}

// WriteGuest writes the guest initramfs for the given agent binary.
func WriteGuest(w io.Writer, agent []byte) error {
	if len(agent) < 4 || string(agent[:4]) != "\x7fELF" {
		return fmt.Errorf("initramfs: the agent is not an ELF binary")
	}
	return Write(w, Guest(agent))
}
