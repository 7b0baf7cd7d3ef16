// Command mkmanifest writes manifest.json beside a built kernel and
// initramfs: each file's size and sha256, and the version stamped into
// the guest agent (`make` passes the same values it gives the agent).
//
//	go run ./host/guestfiles/mkmanifest -arch x86_64 -version v1 -commit abc build/x86_64
package main

import (
	"flag"
	"fmt"
	"os"

	"pybox/host/guestfiles"
	"pybox/shared/archs"
)

func main() {
	arch := flag.String("arch", archs.Host(), "the guest architecture: x86_64 or arm64")
	version := flag.String("version", "", "the guest agent's version")
	commit := flag.String("commit", "", "the guest agent's commit")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: mkmanifest -version V -commit C [-arch A] DIR\n\nWrites DIR/%s for DIR's kernel and initramfs.\n", guestfiles.ManifestName)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *version == "" || *commit == "" {
		flag.Usage()
		os.Exit(2)
	}
	if _, err := guestfiles.MakeManifest(flag.Arg(0), *arch, *version, *commit); err != nil {
		fmt.Fprintln(os.Stderr, "mkmanifest:", err)
		os.Exit(1)
	}
}
