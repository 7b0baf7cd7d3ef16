package needs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// In CI a missing need fails the test; elsewhere it skips it.
func TestUnavailable(t *testing.T) {
	if os.Getenv("NEEDS_CHILD") == "1" {
		Unavailable(t, "the frobnicator is not installed (try: make deps)")
		return
	}
	for _, c := range []struct {
		ci   string
		want string
	}{{"true", "--- FAIL"}, {"", "--- SKIP"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailable$", "-test.v")
		cmd.Env = append(os.Environ(), "NEEDS_CHILD=1", "CI="+c.ci)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "frobnicator is not installed") {
			t.Errorf("CI=%q: want %s with the reason:\n%s", c.ci, c.want, out)
		}
	}
}
