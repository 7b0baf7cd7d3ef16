package mcp

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestConfig(t *testing.T) {
	o := Options{Images: []string{"stdlib", "data"}, MaxTimeout: 30}
	out, hint, err := Config("claude-code", "/opt/my tools/pybox", o)
	if err != nil || out != "claude mcp add pybox -- '/opt/my tools/pybox' mcp --images stdlib,data --max-timeout 30\n" || hint == "" {
		t.Errorf("claude-code: %q %q %v", out, hint, err)
	}
	for _, client := range []string{"generic", "claude-desktop", "cursor"} {
		out, hint, err := Config(client, "/usr/local/bin/pybox&co", o)
		var cfg struct {
			MCPServers map[string]struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"mcpServers"`
		}
		if err != nil || json.Unmarshal([]byte(out), &cfg) != nil || hint == "" {
			t.Fatalf("%s: %q %v", client, out, err)
		}
		s := cfg.MCPServers["pybox"]
		if s.Command != "/usr/local/bin/pybox&co" || strings.Join(s.Args, " ") != "mcp --images stdlib,data --max-timeout 30" {
			t.Errorf("%s: %+v", client, s)
		}
	}
	if out, _, _ := Config("generic", "/p", DefaultOptions()); !strings.Contains(out, `"args": ["mcp"]`) {
		t.Errorf("defaults are left out: %s", out)
	}
	if _, _, err := Config("vim", "/p", o); err == nil {
		t.Error("an unknown client accepted")
	}
	if _, _, err := Config("generic", "/p", Options{Images: []string{"stdlib"}, MaxTimeout: 45}); err == nil {
		t.Error("--max-timeout 45 accepted")
	}
}
