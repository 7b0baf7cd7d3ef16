// Command mkinitramfs writes the guest initramfs (a reproducible newc cpio)
// holding the given static guest agent as /init.
//
//	go run ./initramfs/mkinitramfs -o build/x86_64/initramfs.cpio bin/linux_amd64/pybox-guest
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"pybox/initramfs"
)

func main() {
	out := flag.String("o", "", "write the archive to this `file`")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: mkinitramfs -o OUT GUEST-BINARY\n\nWrites a reproducible newc cpio with GUEST-BINARY as /init.\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "mkinitramfs:", err)
		os.Exit(1)
	}
}

func run(out, agentPath string) error {
	agent, err := os.ReadFile(agentPath)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := initramfs.WriteGuest(&buf, agent); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	// Write beside the target and rename, so a failed build never leaves
	// a truncated archive where the VM would boot it.
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
