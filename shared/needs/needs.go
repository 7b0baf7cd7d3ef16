// Package needs is how a test says it lacks something it needs (root, a
// tool, a built guest): one rule for every package's tests.
package needs

import (
	"os"
	"testing"
)

// Unavailable stops a test that lacks what it needs, with why and the
// fix: a skip on a developer's machine, a failure in CI (CI=true), where a
// skipped test would hide that nothing was tested.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// Root stops a test that needs root, saying what for, unless it runs as
// root.
func Root(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, what+" needs root (try: sudo go test)")
	}
}
