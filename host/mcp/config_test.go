package mcp

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func TestConfig(t *testing.T) {
	o := Options{Images: []string{"stdlib", "data"}, MaxTimeout: 30}
	out, hint, err := Config("claude-code", "/opt/my tools/pybox", "/home/me/pybox home", o)
	if err != nil || out != "claude mcp add pybox -e 'PYBOX_HOME=/home/me/pybox home' -- '/opt/my tools/pybox' mcp --images stdlib,data --max-timeout 30\n" ||
		!strings.Contains(hint, "--allowedTools mcp__pybox__run_python") {
		t.Errorf("claude-code: %q %q %v", out, hint, err)
	}
	for _, client := range []string{"generic", "claude-desktop", "cursor", "gemini"} {
		out, hint, err := Config(client, "/usr/local/bin/pybox&co", `/home/me/"pybox"`, o)
		var cfg struct {
			MCPServers map[string]struct {
				Command string            `json:"command"`
				Args    []string          `json:"args"`
				Env     map[string]string `json:"env"`
			} `json:"mcpServers"`
		}
		if err != nil || json.Unmarshal([]byte(out), &cfg) != nil || hint == "" {
			t.Fatalf("%s: %q %v", client, out, err)
		}
		s := cfg.MCPServers["pybox"]
		if s.Command != "/usr/local/bin/pybox&co" || strings.Join(s.Args, " ") != "mcp --images stdlib,data --max-timeout 30" ||
			len(s.Env) != 1 || s.Env["PYBOX_HOME"] != `/home/me/"pybox"` {
			t.Errorf("%s: %+v", client, s)
		}
	}
	if out, _, _ := Config("generic", "/p", "/h", DefaultOptions()); !strings.Contains(out, `"args": ["mcp"]`) {
		t.Errorf("defaults are left out: %s", out)
	}
	if _, _, err := Config("vim", "/p", "/h", o); err == nil {
		t.Error("an unknown client accepted")
	}
	if _, _, err := Config("generic", "/p", "/h", Options{Images: []string{"stdlib"}, MaxTimeout: 45}); err == nil {
		t.Error("--max-timeout 45 accepted")
	}
}

// Codex reads TOML. Its strings here are basic strings, whose escapes
// JSON shares (and DEL, which TOML wants escaped): each value is read
// back as JSON. Codex itself reads the real thing in the end-to-end test.
func TestConfigCodex(t *testing.T) {
	o := Options{Images: []string{"stdlib", "data"}, MaxTimeout: 30}
	out, hint, err := Config("codex", "/opt/py\"box\\x\x7f", "/home/me/\tpybox", o)
	if err != nil || !strings.Contains(hint, "config.toml") {
		t.Fatalf("%q %v", out, err)
	}
	if strings.ContainsAny(out, "\x7f\t") {
		t.Errorf("a control character is left raw in %q", out)
	}
	m := regexp.MustCompile(`^\[mcp_servers\.pybox\]\ncommand = (".*")\nargs = (\[.*\])\nenv = \{ PYBOX_HOME = (".*") \}\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("not the table expected:\n%s", out)
	}
	var command, home string
	var args []string
	if json.Unmarshal([]byte(m[1]), &command) != nil || json.Unmarshal([]byte(m[2]), &args) != nil || json.Unmarshal([]byte(m[3]), &home) != nil {
		t.Fatalf("values that do not read back:\n%s", out)
	}
	if command != "/opt/py\"box\\x\x7f" || strings.Join(args, " ") != "mcp --images stdlib,data --max-timeout 30" || home != "/home/me/\tpybox" {
		t.Errorf("read back %q %q %q", command, args, home)
	}
}
