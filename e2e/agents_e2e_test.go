package e2e

// End-to-end tests with the agent CLIs people use: Claude Code, Codex
// CLI and Gemini CLI, and the MCP Inspector's CLI mode. They come from
// npm, pinned in testdata/agents (with the Node.js they run on), and
// `make deps` installs them. Each agent is configured the way the README
// tells a user (`pybox mcp config --client ...`), started with the
// environment of a shell that has no PYBOX_HOME (the configuration must
// carry it), and pointed at a scripted model on 127.0.0.1 speaking its
// vendor's API (model_test.go). The model calls run_python; the test
// checks what the agent handed back to the model. All share one VM.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pybox/shared/needs"
)

// agentTimeout bounds one CLI session: a few calls of run_python, one of
// them in the data image (pandas' import takes seconds under TCG).
const agentTimeout = 6 * time.Minute

// agentOptions are the server options every agent is configured with.
var agentOptions = []string{"--images", "stdlib,data", "--max-timeout", "30"}

// agentCall is one call of run_python the scripted model makes, and what
// the model must have read back.
type agentCall struct {
	name  string
	args  map[string]any
	check func(t *testing.T, s *seenResult)
}

// run_python's documented example (pandas summing a CSV) runs in the data
// image: one call there per agent, since each pays pandas' import.
const (
	agentSalesCSV    = "region,sales\nnorth,120\n"
	agentPandasCode  = "import pandas as pd\nprint(pd.read_csv('/tmp/input/sales.csv').sum())"
	agentPandasPrint = "region    north\nsales       120\ndtype: object\n"
	agentWrittenCSV  = "region,sales\nnorth,120\nsouth,80\n"
)

// agentChartCode draws a small bar chart with Pillow (what matplotlib
// writes its PNGs with, and far quicker to import under TCG).
const agentChartCode = `from PIL import Image, ImageDraw
im = Image.new("RGB", (200, 120), "white")
d = ImageDraw.Draw(im)
for i, v in enumerate([120, 80]):
    d.rectangle([20 + 80 * i, 110 - v * 0.8, 80 + 80 * i, 110], fill="steelblue")
im.save("/tmp/output/chart.png")
print("chart.png")`

// agentCalls are the calls every agent's model makes, in order. A check
// of another kind of result is one more entry.
var agentCalls = []agentCall{
	{"a receipt and a CSV back", map[string]any{
		"code":         "open('/tmp/output/sales.csv', 'w').write(" + pyString(agentWrittenCSV) + ")\nprint('wrote sales.csv')",
		"return_files": true, "timeout_s": 10,
	}, func(t *testing.T, s *seenResult) {
		s.ran(t, "wrote sales.csv\n")
		if f := s.file("sales.csv"); f == nil || f.Encoding != "utf-8" || f.Content == nil || *f.Content != agentWrittenCSV {
			t.Errorf("the CSV did not come back whole: %+v", s.doc.Files)
		}
	}},
	{"the pandas example in data", map[string]any{
		"code": agentPandasCode, "image": "data", "timeout_s": 30, "return_files": true,
		"files": []any{map[string]any{"name": "sales.csv", "content": agentSalesCSV}},
	}, func(t *testing.T, s *seenResult) {
		s.ran(t, agentPandasPrint)
		if s.exec.Image.Name != "data" {
			t.Errorf("ran in %q", s.exec.Image.Name)
		}
	}},
	{"a chart as an image", map[string]any{
		"code": agentChartCode, "image": "data", "timeout_s": 30, "return_files": true,
	}, func(t *testing.T, s *seenResult) {
		s.ran(t, "chart.png\n")
		f := s.file("chart.png")
		if f == nil || f.Encoding != "base64" || f.Content == nil {
			t.Fatalf("chart.png did not come back as a file: %+v", s.doc.Files)
		}
		var shown []string
		found := false
		for _, im := range s.images {
			shown = append(shown, im.MediaType)
			found = found || im.MediaType == "image/png" && im.Data == *f.Content
		}
		if found != s.cli.showsImages {
			t.Errorf("the chart reached the model as an image: %v, want %v (images: %q)", found, s.cli.showsImages, shown)
		}
	}},
	{"a refused argument", map[string]any{
		"code":  "print(1)",
		"files": []any{map[string]any{"name": "sales.csv", "content": ""}, map[string]any{"name": "SALES.csv", "content": ""}},
	}, func(t *testing.T, s *seenResult) {
		if s.doc.Error == nil || s.doc.Error.Code != "invalid_arguments" || !strings.Contains(s.doc.Error.Message, "differ only in case") ||
			s.exec.Cleanup.Status != "NOT_ATTEMPTED" {
			t.Errorf("not the refusal: %.500s", s.text)
		}
		s.flaggedAsError(t, true)
	}},
}

func pyString(s string) string { b, _ := json.Marshal(s); return string(b) }

// seenResult is one tool result as the model read it, decoded.
type seenResult struct {
	cli     *agentCLI
	text    string // the result document's JSON, as the model read it
	doc     mcpDoc
	exec    mcpExecution
	flagged bool // the agent marked the result as an error for the model
	images  []sentImage
}

func (s *seenResult) ran(t *testing.T, stdout string) {
	t.Helper()
	if s.doc.Error != nil || s.exec.Status != "ok" || s.exec.Cleanup.Status != "REMOVED" || s.exec.Capture.Stdout != stdout {
		t.Errorf("want status ok, cleanup REMOVED and stdout %q; the model read: %.1500s", stdout, s.text)
	}
	s.flaggedAsError(t, false)
}

// flaggedAsError checks the agent's error mark, where its API has one.
func (s *seenResult) flaggedAsError(t *testing.T, isError bool) {
	t.Helper()
	if want := isError && s.cli.flagsErrors; s.flagged != want {
		t.Errorf("the result reached the model marked as an error: %v, want %v", s.flagged, want)
	}
}

func (s *seenResult) file(name string) *mcpFile {
	if s.doc.Files == nil {
		return nil
	}
	for i, f := range *s.doc.Files {
		if f.Name == name {
			return &(*s.doc.Files)[i]
		}
	}
	return nil
}

// agentCLI is one agent CLI under test.
type agentCLI struct {
	name        string // as in the README's table
	bin         string // under testdata/agents/node_modules/.bin
	flagsErrors bool   // whether its model API can mark a tool result as an error
	showsImages bool   // whether it hands the model a result's image blocks
	// model serves the scripted model in the vendor's API.
	model func(*scriptedModel) http.Handler
	// setUp configures pybox (from `pybox mcp config`) and the model's
	// address, the way a user would; it returns the command line that
	// runs one non-interactive session, and its extra environment.
	setUp func(a *agentSession, modelURL string) (args, env []string)
	// read finds the result document in what the agent sent the model.
	read func(t *testing.T, r toolReply) (doc string, flagged bool)
}

// agentPrompt is the user's turn; the scripted model does not read it.
const agentPrompt = "Use run_python."

var agentCLIs = []*agentCLI{
	{
		name: "Claude Code", bin: "claude", flagsErrors: true, showsImages: true, model: anthropicModel,
		setUp: func(a *agentSession, url string) ([]string, []string) {
			// Without CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC even `claude
			// mcp add` looks up api.anthropic.com.
			env := []string{"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=scripted", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
			// The line `pybox mcp config` prints, run in a shell.
			a.run(env, "sh", "-c", a.config("claude-code"))
			return []string{"-p", agentPrompt, "--allowedTools", "mcp__pybox__run_python"}, env
		},
		read: func(t *testing.T, r toolReply) (string, bool) {
			// With an image, Claude Code adds a text of its own that says
			// where it saved a copy: "[Image: source: PATH]".
			var doc []string
			for _, text := range r.Texts {
				if !strings.HasPrefix(text, "[Image: source: ") {
					doc = append(doc, text)
				}
			}
			if len(doc) != 1 {
				t.Fatalf("want one text besides Claude Code's own, got %d: %.500s", len(doc), r.Raw)
			}
			return doc[0], r.IsError
		},
	},
	{
		// With a model it has no metadata for, as here, Codex takes it for
		// text only and hands it no image.
		name: "Codex CLI", bin: "codex", model: openAIModel,
		setUp: func(a *agentSession, url string) ([]string, []string) {
			// The model provider, then the table `pybox mcp config` prints.
			// The rest keeps Codex's own traffic (update check, analytics,
			// plugin and app catalogues) from leaving the machine.
			a.write(".codex/config.toml", `model = "scripted"
model_provider = "scripted"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
apps = false
plugins = false
remote_plugin = false

[model_providers.scripted]
name = "scripted"
base_url = "`+url+`/v1"
wire_api = "responses"

`+a.config("codex"))
			return []string{"exec", "--skip-git-repo-check", agentPrompt}, nil
		},
		read: func(t *testing.T, r toolReply) (string, bool) {
			// Codex puts a line of its own before the text content.
			text := strings.Join(r.Texts, "\n")
			_, doc, ok := strings.Cut(text, "\nOutput:\n")
			if len(r.Texts) != 1 || !ok || !strings.HasPrefix(text, "Wall time: ") {
				t.Fatalf("not Codex's shape: %.500s", r.Raw)
			}
			return doc, false
		},
	},
	{
		name: "Gemini CLI", bin: "gemini", flagsErrors: true, showsImages: true, model: geminiModel,
		setUp: func(a *agentSession, url string) ([]string, []string) {
			// The mcpServers entry `pybox mcp config` prints, in settings
			// that pick the API-key login (its base URL comes from the
			// environment) and turn usage statistics off.
			var settings map[string]any
			if err := json.Unmarshal([]byte(a.config("gemini")), &settings); err != nil {
				a.t.Fatal(err)
			}
			settings["security"] = map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}}
			settings["privacy"] = map[string]any{"usageStatisticsEnabled": false}
			b, _ := json.MarshalIndent(settings, "", "  ")
			a.write(".gemini/settings.json", string(b))
			return []string{"--skip-trust", "--allowed-mcp-server-names", "pybox", "-p", agentPrompt},
				[]string{"GOOGLE_GEMINI_BASE_URL=" + url, "GEMINI_API_KEY=scripted"}
		},
		read: func(t *testing.T, r toolReply) (string, bool) {
			return geminiDocument(t, r)
		},
	},
}

// TestAgentCLIs runs each agent against one VM.
func TestAgentCLIs(t *testing.T) {
	e := startMCPVM(t)
	needImage(t, e, "data")
	warmData(t, e)
	for _, cli := range agentCLIs {
		t.Run(cli.name, func(t *testing.T) { runAgent(t, e, cli) })
	}
	t.Run("MCP Inspector", func(t *testing.T) { runInspector(t, e) })
}

// warmData imports pandas once in the data image: the first import after
// the VM boots reads the image cold and, under TCG, can take most of the
// 30 s ceiling. Its result does not matter; its cleanup does.
func warmData(t *testing.T, e *vmEnv) {
	script := filepath.Join(t.TempDir(), "warm.py")
	os.WriteFile(script, []byte("import pandas\n"), 0o600)
	t0 := time.Now()
	out, errOut, _ := e.pybox("run", "--json", "--image", "data", "--timeout", "30", script)
	var r struct {
		Receipt struct {
			Status  string `json:"status"`
			WallMS  int64  `json:"wall_ms"`
			Cleanup struct {
				Status string `json:"status"`
			} `json:"cleanup"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Receipt.Cleanup.Status != "REMOVED" {
		t.Fatalf("warming the data image: %v\n%s\n%s", err, out, errOut)
	}
	t.Logf("warmed the data image in %v (import pandas: %s, %d ms)", time.Since(t0).Round(time.Millisecond), r.Receipt.Status, r.Receipt.WallMS)
}

func runAgent(t *testing.T, e *vmEnv, cli *agentCLI) {
	bin := agentBin(t, cli.bin)
	a := newAgentSession(t, e)
	var calls []map[string]any
	for _, c := range agentCalls {
		calls = append(calls, c.args)
	}
	m := newScriptedModel(calls...)
	url := serveModel(t, cli.model(m))
	args, env := cli.setUp(a, url)
	a.run(env, bin, args...)
	t.Logf("requests to the scripted model:\n%s", m.log())
	got := m.results()
	if len(got) != len(agentCalls) {
		t.Fatalf("%d results reached the model, want %d", len(got), len(agentCalls))
	}
	for i, c := range agentCalls {
		t.Run(c.name, func(t *testing.T) {
			doc, flagged := cli.read(t, got[i])
			s := &seenResult{cli: cli, text: doc, flagged: flagged, images: got[i].Images}
			if err := json.Unmarshal([]byte(doc), &s.doc); err != nil {
				t.Fatalf("the result document does not decode (%v): %.500s", err, doc)
			}
			if err := json.Unmarshal(s.doc.Execution, &s.exec); err != nil {
				t.Fatalf("no execution in %.500s", doc)
			}
			t.Logf("the model read (status %q, cleanup %s, wall %d ms, marked as an error %v): %.400s",
				s.exec.Status, s.exec.Cleanup.Status, s.exec.WallMS, flagged, got[i].Raw)
			c.check(t, s)
		})
	}
}

// agentBin returns the path of an agent CLI installed by `make deps` (npm
// ci in testdata/agents), or stops the test.
func agentBin(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(agentBinDir(), name)
	if _, err := os.Stat(p); err != nil {
		needs.Unavailable(t, "no "+p+": run `make deps` (it runs npm ci in e2e/testdata/agents)")
	}
	return p
}

func agentBinDir() string {
	dir, _ := filepath.Abs(filepath.Join("testdata", "agents", "node_modules", ".bin"))
	return dir
}

// agentSession is one CLI's own world: a HOME (where it keeps its
// configuration), a working directory, and the environment it starts
// with.
type agentSession struct {
	t    *testing.T
	e    *vmEnv
	home string
	work string
	env  []string
}

func newAgentSession(t *testing.T, e *vmEnv) *agentSession {
	a := &agentSession{t: t, e: e, home: t.TempDir(), work: t.TempDir()}
	// A shell's environment, less PYBOX_HOME. The Node.js the CLIs run on
	// comes first in PATH (testdata/agents pins it).
	a.env = []string{"PATH=" + agentBinDir() + ":" + os.Getenv("PATH"), "HOME=" + a.home, "TERM=dumb", "LANG=C.UTF-8", "NO_COLOR=1"}
	return a
}

// config prints `pybox mcp config --client NAME` with agentOptions, run
// as the user would: in a shell where PYBOX_HOME is the VM's.
func (a *agentSession) config(client string) string {
	a.t.Helper()
	out, errOut, code := a.e.pybox(append([]string{"mcp", "config", "--client", client}, agentOptions...)...)
	if code != 0 {
		a.t.Fatalf("pybox mcp config --client %s: exit %d: %s", client, code, errOut)
	}
	return out
}

// write puts a file in the session's HOME.
func (a *agentSession) write(rel, content string) {
	a.t.Helper()
	p := filepath.Join(a.home, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		a.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		a.t.Fatal(err)
	}
}

// run runs a command in the session and returns its output; the test
// fails when the command does.
func (a *agentSession) run(extraEnv []string, name string, args ...string) string {
	a.t.Helper()
	out, err := a.try(extraEnv, name, args...)
	if err != nil {
		a.t.Fatalf("%s failed: %v", filepath.Base(name), err)
	}
	return out
}

func (a *agentSession) try(extraEnv []string, name string, args ...string) (string, error) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = a.work, append(append([]string(nil), a.env...), extraEnv...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	t0 := time.Now()
	err := cmd.Run()
	a.t.Logf("%s %s: %v in %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), err,
		time.Since(t0).Round(time.Millisecond), out.String(), errOut.String())
	return out.String(), err
}

// geminiDocument finds the result document in Gemini CLI's
// functionResponse: a result's text content as "output", inside
// <untrusted_context> tags, followed by a line per image ("[Tool
// 'run_python' provided the following image data with mime-type:
// image/png]"; the image itself is the next part); an error result as
// "error", a sentence that ends with the whole MCP result as JSON.
func geminiDocument(t *testing.T, r toolReply) (string, bool) {
	t.Helper()
	var resp struct {
		Output *string `json:"output"`
		Error  *string `json:"error"`
	}
	if len(r.Texts) != 1 || json.Unmarshal([]byte(r.Texts[0]), &resp) != nil {
		t.Fatalf("not Gemini CLI's shape: %.500s", r.Raw)
	}
	if resp.Output != nil {
		doc, ok := strings.CutPrefix(*resp.Output, "<untrusted_context>\n")
		doc, notes, ok2 := strings.Cut(doc, "\n</untrusted_context>")
		for _, note := range strings.Split(notes, "\n")[1:] {
			ok2 = ok2 && strings.HasPrefix(note, "[Tool 'run_python' provided the following image data with mime-type: ")
		}
		if !ok || !ok2 {
			t.Fatalf("not Gemini CLI's shape: %.500s", r.Raw)
		}
		return doc, false
	}
	var sent []struct {
		FunctionResponse struct {
			Response struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"response"`
		} `json:"functionResponse"`
	}
	if resp.Error != nil {
		_, result, _ := strings.Cut(*resp.Error, " with response: ")
		json.Unmarshal([]byte(result), &sent)
	}
	if len(sent) != 1 || len(sent[0].FunctionResponse.Response.Content) != 1 {
		t.Fatalf("not Gemini CLI's shape: %.500s", r.Raw)
	}
	return sent[0].FunctionResponse.Response.Content[0].Text, true
}

// The MCP Inspector's CLI mode, with the generic configuration: it lists
// the tool, calls it, and has a call refused.
func runInspector(t *testing.T, e *vmEnv) {
	bin := agentBin(t, "mcp-inspector")
	a := newAgentSession(t, e)
	a.write("mcp.json", a.config("generic"))
	cli := []string{"--cli", "--config", filepath.Join(a.home, "mcp.json"), "--server", "pybox", "--format", "json"}

	var list struct {
		Result struct {
			Tools []struct {
				Name        string `json:"name"`
				InputSchema struct {
					Properties struct {
						Image   struct{ Enum []string }   `json:"image"`
						Timeout struct{ Maximum float64 } `json:"timeout_s"`
					} `json:"properties"`
				} `json:"inputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	out := a.run(nil, bin, append(cli, "--method", "tools/list")...)
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Result.Tools) != 1 || list.Result.Tools[0].Name != "run_python" {
		t.Fatalf("tools/list: %v: %.500s", err, out)
	}
	if p := list.Result.Tools[0].InputSchema.Properties; strings.Join(p.Image.Enum, ",") != "stdlib,data" || p.Timeout.Maximum != 30 {
		t.Errorf("the schema does not show the configured ceilings: %+v", p)
	}

	call := func(args string) (*mcpResult, error) {
		out, err := a.try(nil, bin, append(cli, "--method", "tools/call", "--tool-name", "run_python", "--tool-args-json", args)...)
		var res struct {
			Result struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
				StructuredContent any  `json:"structuredContent"`
				IsError           bool `json:"isError"`
			} `json:"result"`
		}
		if json.Unmarshal([]byte(out), &res) != nil || len(res.Result.Content) != 1 {
			t.Fatalf("tools/call %s: %v: %.500s", args, err, out)
		}
		return decodeResult(t, res.Result.Content[0].Text, res.Result.StructuredContent, res.Result.IsError), err
	}
	r, err := call(`{"code":"print(6*7)"}`)
	if err != nil || r.IsError || r.Execution.Status != "ok" || r.Execution.Cleanup.Status != "REMOVED" || r.Execution.Capture.Stdout != "42\n" {
		t.Errorf("a run: %v: %.1000s", err, r.Text)
	}
	// An error result is printed whole, and the Inspector exits 5.
	r, err = call(`{"code":"print(6*7)","shell":true}`)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 || !r.IsError || r.Doc.Error == nil || r.Doc.Error.Code != "invalid_arguments" ||
		r.Execution.Cleanup.Status != "NOT_ATTEMPTED" {
		t.Errorf("a refused call: %v: %.1000s", err, r.Text)
	}
}
