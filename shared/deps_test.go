// Package shared_test pins the rule that shared/ is the contract between
// host/ and guest/ and imports only the standard library.
package shared_test

import (
	"os/exec"
	"strings"
	"testing"
)

func TestSharedImportsOnlyStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "pybox/shared/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "pybox/shared" && !strings.HasPrefix(p, "pybox/shared/") {
			t.Errorf("shared/ depends on %s; it may import only the standard library", p)
		}
	}
}
