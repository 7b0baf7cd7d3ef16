package mcp

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Clients that `pybox mcp config` knows, and the note that goes with each
// one's snippet.
var clients = []struct{ name, hint string }{
	{"generic", "Most MCP clients accept this shape."},
	{"claude-code", "Run this in a shell: it adds pybox to Claude Code."},
	{"claude-desktop", "Add this to claude_desktop_config.json (Settings → Developer → Edit Config), then restart Claude Desktop."},
	{"cursor", "Add this to .cursor/mcp.json in a project (or ~/.cursor/mcp.json for all projects). " +
		`For Cursor's command-line agent, allow just this tool in .cursor/cli.json: {"permissions": {"allow": ["Mcp(pybox:run_python)"]}}`},
}

// ClientNames lists the clients Config knows.
func ClientNames() []string {
	var names []string
	for _, c := range clients {
		names = append(names, c.name)
	}
	return names
}

// Config renders a ready-to-paste configuration that starts exe (an
// absolute path: desktop apps do not see the shell's PATH) as `mcp` with
// the options given. It returns the snippet and a note on where it goes.
func Config(client, exe string, o Options) (snippet, hint string, err error) {
	if err := o.Check(); err != nil {
		return "", "", err
	}
	args := append([]string{"mcp"}, o.Args()...)
	for _, c := range clients {
		if c.name != client {
			continue
		}
		if client == "claude-code" {
			words := []string{"claude", "mcp", "add", "pybox", "--", shellQuote(exe)}
			for _, a := range args {
				words = append(words, shellQuote(a))
			}
			return strings.Join(words, " ") + "\n", c.hint, nil
		}
		// Laid out like the README's examples, args on one line.
		var out strings.Builder
		fmt.Fprintf(&out, "{\n  \"mcpServers\": {\n    \"pybox\": {\n      \"command\": %s,\n      \"args\": [", jsonString(exe))
		for i, a := range args {
			if i > 0 {
				out.WriteString(", ")
			}
			out.WriteString(jsonString(a))
		}
		out.WriteString("]\n    }\n  }\n}\n")
		return out.String(), c.hint, nil
	}
	return "", "", fmt.Errorf("unknown client %q: use one of %s", client, strings.Join(ClientNames(), ", "))
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./,:=+@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// jsonString encodes s as a JSON string, leaving <, > and & readable.
func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}
