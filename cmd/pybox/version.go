package main

import (
	"fmt"
	"os"
	"runtime"

	"pybox/host/guestfiles"
	"pybox/host/version"
)

func init() {
	register(&command{name: "version", summary: "print the version of pybox and the guest files it boots", run: versionMain})
}

func versionMain(args []string) int {
	fs := flags("version", "[--json]", `
Print pybox's version and commit, the Go version it was built with and the
system it runs on; then the guest kernel and initramfs that `+"`pybox vm start`"+`
would boot without flags, each with where it was found, its sha256 and
whether it matches the manifest beside it, and the guest agent's version
that manifest records. Exit status 1 when a guest file is missing (the
error says where it looked and what fixes it).`)
	asJSON := fs.Bool("json", false, "print all of it as JSON")
	if pos, code, err := parse(fs, args); err != nil {
		return code
	} else if len(pos) > 0 {
		return usageError(fs, "version takes no arguments")
	}
	report, gerr := guestReport()
	if *asJSON {
		out := struct {
			Version    string             `json:"version"`
			Commit     string             `json:"commit"`
			Go         string             `json:"go"`
			Platform   string             `json:"platform"`
			GuestFiles *guestfiles.Report `json:"guest_files,omitempty"`
			Problem    string             `json:"guest_files_problem,omitempty"`
		}{Version: version.Version, Commit: version.Commit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, GuestFiles: report}
		if gerr != nil {
			out.Problem = gerr.Error()
		}
		printJSON(out)
	} else {
		fmt.Printf("pybox %s (commit %s) %s %s/%s\n", version.Version, version.Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		if report != nil {
			printGuestFiles(report)
		}
	}
	if gerr != nil {
		fmt.Fprintf(os.Stderr, "pybox: %v\n", gerr)
		return exitFailure
	}
	return exitOK
}

// guestReport finds the guest files as `pybox vm start` would with no
// flags, and checks them against their manifest.
func guestReport() (*guestfiles.Report, error) {
	f, err := guestfiles.Find("", "")
	if err != nil {
		return nil, err
	}
	return f.Check()
}

func printGuestFiles(r *guestfiles.Report) {
	fmt.Printf("guest files (%s):\n", r.Arch)
	for _, c := range []struct {
		role string
		f    guestfiles.Checked
	}{{"kernel", r.Kernel}, {"initramfs", r.Initramfs}} {
		fmt.Printf("  %-10s %s (%s)\n", c.role, c.f.Path, c.f.From)
		fmt.Printf("  %-10s sha256 %s, %d bytes, %s\n", "", c.f.SHA256, c.f.Bytes, c.f.Manifest)
	}
	if r.AgentVersion != "" {
		fmt.Printf("  %-10s %s (commit %s), as %s says\n", "agent", r.AgentVersion, r.AgentCommit, r.ManifestPath)
	} else {
		fmt.Printf("  %-10s unknown until the VM boots (no manifest that matches the initramfs)\n", "agent")
	}
}
