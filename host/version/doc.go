// Package version holds the host binary's version and commit, stamped at
// build time:
//
//	go build -ldflags "-X pybox/host/version.Version=v0.1.0 -X pybox/host/version.Commit=abc1234" ./cmd/pybox
package version
