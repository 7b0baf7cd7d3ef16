//go:build linux && !pyboxbench

package box

import (
	"strings"
	"testing"
)

func goodConfig() childConfig {
	return childConfig{Root: "/images/stdlib", Staging: "/run/staging/r1/tmp", Argv: []string{"python3"}, UID: programID, GID: programID, FileSizeMax: tmpBytes}
}

// Every build but the benchmark one seals every box: a configuration
// that asks box-init to leave out the posture check or the seccomp
// filter is refused before any step runs, and the Runner never asks.
func TestEveryBoxIsSealed(t *testing.T) {
	if err := goodConfig().check(); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
	for name, set := range map[string]func(*childConfig){
		"skip posture": func(c *childConfig) { c.SkipPosture = true },
		"skip seccomp": func(c *childConfig) { c.SkipSeccomp = true },
		"skip both":    func(c *childConfig) { c.SkipPosture, c.SkipSeccomp = true, true },
	} {
		c := goodConfig()
		set(&c)
		if err := c.check(); err == nil || !strings.Contains(err.Error(), "only in the benchmark build") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if posture, seccomp := (&Runner{}).skips(); posture || seccomp {
		t.Errorf("the box skips posture %v, seccomp %v", posture, seccomp)
	}
	if incomplete := (childConfig{Argv: []string{"python3"}}); incomplete.check() == nil {
		t.Error("an incomplete configuration passed")
	}
}
