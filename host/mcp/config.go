package mcp

import (
	"encoding/json"
	"fmt"
	"strings"

	"pybox/host/paths"
)

// launch is how a client starts `pybox mcp`. Clients start servers with
// a reduced environment (the SDKs' stdio transports pass a short list of
// safe variables), so everything pybox needs from its environment is in
// env: a PYBOX_HOME set in the user's shell never reaches the server
// otherwise, and the server would look for the VM in the wrong place.
type launch struct {
	command string
	args    []string
	env     [][2]string // name, value, in order
}

// Clients that `pybox mcp config` knows: how each one's configuration is
// written, and the note on where it goes.
var clients = []struct {
	name, hint string
	render     func(l launch) string
}{
	{"generic", "Most MCP clients accept this shape.", mcpServersJSON},
	{"claude-code", "Run this in a shell: it adds pybox to Claude Code. " +
		"For `claude -p`, allow the tool with --allowedTools mcp__pybox__run_python.", claudeMCPAdd},
	{"claude-desktop", "Add this to claude_desktop_config.json (Settings → Developer → Edit Config), then restart Claude Desktop.", mcpServersJSON},
	{"cursor", "Add this to .cursor/mcp.json in a project (or ~/.cursor/mcp.json for all projects). " +
		`For Cursor's command-line agent, allow just this tool in .cursor/cli.json: {"permissions": {"allow": ["Mcp(pybox:run_python)"]}}`, mcpServersJSON},
	{"codex", "Add this to ~/.codex/config.toml (or .codex/config.toml in a trusted project).", codexTOML},
	{"gemini", "Add the mcpServers entry to ~/.gemini/settings.json (or .gemini/settings.json in a project). " +
		"For `gemini -p`, allow the tool with --allowed-mcp-server-names pybox.", mcpServersJSON},
}

// ClientNames lists the clients Config knows.
func ClientNames() []string {
	var names []string
	for _, c := range clients {
		names = append(names, c.name)
	}
	return names
}

// Config renders a ready-to-paste configuration for client that starts
// exe (an absolute path: desktop apps do not see the shell's PATH) as
// `mcp` with the options given, and with PYBOX_HOME set to home (the VM's
// home, absolute). It returns the snippet and a note on where it goes.
func Config(client, exe, home string, o Options) (snippet, hint string, err error) {
	if err := o.Check(); err != nil {
		return "", "", err
	}
	l := launch{command: exe, args: append([]string{"mcp"}, o.Args()...), env: [][2]string{{paths.EnvHome, home}}}
	for _, c := range clients {
		if c.name == client {
			return c.render(l), c.hint, nil
		}
	}
	return "", "", fmt.Errorf("unknown client %q: use one of %s", client, strings.Join(ClientNames(), ", "))
}

// claudeMCPAdd is a `claude mcp add` line: -e for each variable, then the
// command after --.
func claudeMCPAdd(l launch) string {
	words := []string{"claude", "mcp", "add", "pybox"}
	for _, kv := range l.env {
		words = append(words, "-e", shellQuote(kv[0]+"="+kv[1]))
	}
	words = append(words, "--", shellQuote(l.command))
	for _, a := range l.args {
		words = append(words, shellQuote(a))
	}
	return strings.Join(words, " ") + "\n"
}

// mcpServersJSON is the {"mcpServers": {...}} shape most clients read,
// laid out like the examples people paste from, each list on one line.
func mcpServersJSON(l launch) string {
	var env []string
	for _, kv := range l.env {
		env = append(env, jsonString(kv[0])+": "+jsonString(kv[1]))
	}
	return fmt.Sprintf("{\n  \"mcpServers\": {\n    \"pybox\": {\n      \"command\": %s,\n      \"args\": %s,\n      \"env\": {%s}\n    }\n  }\n}\n",
		jsonString(l.command), jsonList(l.args), strings.Join(env, ", "))
}

// codexTOML is Codex's [mcp_servers.pybox] table.
func codexTOML(l launch) string {
	var env []string
	for _, kv := range l.env {
		env = append(env, kv[0]+" = "+tomlString(kv[1]))
	}
	var args []string
	for _, a := range l.args {
		args = append(args, tomlString(a))
	}
	return fmt.Sprintf("[mcp_servers.pybox]\ncommand = %s\nargs = [%s]\nenv = { %s }\n",
		tomlString(l.command), strings.Join(args, ", "), strings.Join(env, ", "))
}

// tomlString quotes s as a TOML basic string: JSON's escapes are TOML's,
// except that TOML wants DEL escaped too.
func tomlString(s string) string {
	return strings.ReplaceAll(jsonString(s), "\x7f", `\u007f`)
}

func jsonList(ss []string) string {
	var q []string
	for _, s := range ss {
		q = append(q, jsonString(s))
	}
	return "[" + strings.Join(q, ", ") + "]"
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
