package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The scripted model's three servers, without an agent: given a
// conversation that holds the first call and its result, each records
// the result and asks for the second call, in its vendor's format.
func TestScriptedModels(t *testing.T) {
	const result = "the result"
	for _, c := range []struct {
		name, path, body string
		serve            func(*scriptedModel) http.Handler
		isError          bool
		// args digs the next call's arguments out of the response body.
		args func(body string) string
	}{
		{"anthropic", "/v1/messages", `{"model":"m","tools":[{"name":"mcp__pybox__run_python"}],"messages":[` +
			`{"role":"user","content":"go"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"mcp__pybox__run_python","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":` + pyString(result) + `,"is_error":true}]}]}`,
			anthropicModel, true, func(body string) string {
				var msg struct {
					Content []struct{ Input json.RawMessage } `json:"content"`
				}
				json.Unmarshal([]byte(body), &msg)
				return string(msg.Content[0].Input)
			}},
		{"openai", "/v1/responses", `{"model":"m","tools":[{"type":"namespace","name":"mcp__pybox","tools":[{"type":"function","name":"run_python"}]}],"input":[` +
			`{"type":"function_call","name":"run_python","namespace":"mcp__pybox","call_id":"c1","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"c1","output":` + pyString(result) + `}]}`,
			openAIModel, false, func(body string) string {
				for _, data := range sseData(body) {
					var ev struct {
						Type string
						Item struct{ Arguments, Namespace string }
					}
					json.Unmarshal([]byte(data), &ev)
					if ev.Type == "response.output_item.done" && ev.Item.Namespace == "mcp__pybox" {
						return ev.Item.Arguments
					}
				}
				return ""
			}},
		{"gemini", "/v1beta/models/m:streamGenerateContent", `{"tools":[{"functionDeclarations":[{"name":"mcp_pybox_run_python"}]}],"contents":[` +
			`{"role":"user","parts":[{"text":"go"}]},` +
			`{"role":"model","parts":[{"functionCall":{"name":"mcp_pybox_run_python","args":{}}}]},` +
			`{"role":"user","parts":[{"functionResponse":{"name":"mcp_pybox_run_python","response":{"error":` + pyString(result) + `}}}]}]}`,
			geminiModel, true, func(body string) string {
				var resp struct {
					Candidates []struct {
						Content struct {
							Parts []struct {
								FunctionCall struct{ Args json.RawMessage } `json:"functionCall"`
							}
						}
					}
				}
				json.Unmarshal([]byte(sseData(body)[0]), &resp)
				return string(resp.Candidates[0].Content.Parts[0].FunctionCall.Args)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newScriptedModel(map[string]any{"code": "1"}, map[string]any{"code": "2"})
			url := serveModel(t, c.serve(m))
			resp, err := http.Post(url+c.path, "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			bufio.NewReader(resp.Body).WriteTo(&b)
			if got := c.args(b.String()); got != `{"code":"2"}` {
				t.Errorf("the next call's arguments: %q; response:\n%s", got, b.String())
			}
			r := m.results()
			if len(r) != 1 || !strings.Contains(strings.Join(r[0].Texts, ""), result) || r[0].IsError != c.isError {
				t.Errorf("recorded %+v", r)
			}
		})
	}
}

// sseData returns the data of each server-sent event in body.
func sseData(body string) []string {
	var data []string
	for _, line := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
	return data
}
