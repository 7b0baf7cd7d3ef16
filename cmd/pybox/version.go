package main

import (
	"fmt"
	"runtime"

	"pybox/host/version"
)

func init() {
	register(&command{name: "version", summary: "print the version of pybox", run: versionMain})
}

func versionMain(args []string) int {
	fs := flags("version", "", "Print pybox's version and commit, the Go version it was built with, and the system it runs on.")
	if pos, code, err := parse(fs, args); err != nil {
		return code
	} else if len(pos) > 0 {
		return usageError(fs, "version takes no arguments")
	}
	fmt.Printf("pybox %s (commit %s) %s %s/%s\n", version.Version, version.Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}
