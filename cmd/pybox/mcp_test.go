package main

import (
	"strings"
	"testing"

	"pybox/host/egress"
	"pybox/host/mcp"
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
		{[]string{"--allow-net", "api.example.com,http://evil.org"}, exitUsage, `--allow-net: entry "http://evil.org"`},
		{[]string{"--allow-net", "*.com"}, exitUsage, `--allow-net: entry "*.com"`},
		{[]string{"config", "--allow-net", "a.example.com,,b.example.com"}, exitUsage, "--allow-net: entry 2 is empty"},
		{[]string{"--help"}, exitOK, "--allow-net"},
	} {
		out, code := capture(t, func() int { return mcpMain(tc.args) })
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("pybox mcp %v: exit %d, output %q", tc.args, code, out)
		}
	}
}

// `pybox mcp config --allow-net` renders the list, canonical, in the
// command the client starts.
func TestMCPConfigAllowNet(t *testing.T) {
	t.Setenv("PYBOX_HOME", t.TempDir())
	out, code := capture(t, func() int {
		return mcpMain([]string{"config", "--allow-net", "API.example.com:443,*.pythonhosted.org,api.example.com:80"})
	})
	if code != exitOK || !strings.Contains(out, `"--allow-net", "api.example.com,*.pythonhosted.org"`) {
		t.Errorf("exit %d, output %q", code, out)
	}
}

func TestMCPStartUpNote(t *testing.T) {
	o := mcp.DefaultOptions()
	if n := folderNote(o); strings.Contains(n, "network") {
		t.Errorf("no list: %q", n)
	}
	var err error
	if o.Net, err = egress.ParseAllow("api.example.com:443"); err != nil {
		t.Fatal(err)
	}
	if n := folderNote(o); !strings.Contains(n, "network open to api.example.com:443") {
		t.Errorf("with a list: %q", n)
	}
}
