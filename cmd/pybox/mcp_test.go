package main

import (
	"strings"
	"testing"
)

func TestMCPCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"config", "--help"}, exitOK, "usage: pybox mcp config"},
		{[]string{"--help"}, exitOK, "pybox mcp config"},
		{[]string{"--max-timeout", "31"}, exitUsage, "at most 30 seconds"},
		{[]string{"--max-timeout", "0"}, exitUsage, "more than 0"},
		{[]string{"--max-timeout", "two"}, exitUsage, "not a number"},
		{[]string{"--images", ""}, exitUsage, "--images is empty"},
		{[]string{"--images", "Data"}, exitUsage, "lower-case"},
		{[]string{"extra"}, exitUsage, "unexpected argument"},
		{[]string{"config", "--client", "vim"}, exitUsage, `unknown client "vim"`},
		{[]string{"config", "--max-timeout", "60"}, exitUsage, "at most 30 seconds"},
	} {
		out, code := capture(t, func() int { return mcpMain(tc.args) })
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("pybox mcp %v: exit %d, output %q", tc.args, code, out)
		}
	}
}
