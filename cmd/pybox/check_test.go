package main

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckCommandLine(t *testing.T) {
	for _, args := range [][]string{
		{"--max-timeout", "31"},
		{"--images", ""},
		{"--server"},
		{"extra"},
	} {
		out, code := capture(t, func() int { return checkMain(args) })
		if code != exitUsage || !strings.Contains(out, "usage: pybox check") {
			t.Errorf("pybox check %q: exit %d, output %q", args, code, out)
		}
	}
	server, rest, ok := cutServer([]string{"-v", "--server", "x", "--json"})
	if !ok || !slices.Equal(server, []string{"x", "--json"}) || !slices.Equal(rest, []string{"-v"}) {
		t.Errorf("cutServer: %q %q %v", server, rest, ok)
	}
}
