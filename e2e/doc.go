// Package e2e is PyBox's end-to-end suite and its benchmarks: they drive
// the real pybox binary (built from cmd/pybox) against a real VM (the
// kernel, initramfs and images that `make` builds) and real MCP clients
// and agent CLIs. `make test` runs them after the unit tests, one VM at
// a time; `make bench` runs BenchmarkReport. A test that lacks what it
// needs skips, and fails in CI (shared/needs).
package e2e
