package e2e

// The scripted model speaking OpenAI's Responses API (POST /v1/responses,
// streamed as server-sent events), for Codex CLI.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

type responsesRequest struct {
	Model string            `json:"model"`
	Tools []responsesTool   `json:"tools"`
	Input []json.RawMessage `json:"input"`
}

// responsesTool is a function, or a namespace of functions (Codex
// offers each MCP server's tools in a namespace named mcp__SERVER).
type responsesTool struct {
	Type  string          `json:"type"`
	Name  string          `json:"name"`
	Tools []responsesTool `json:"tools"`
}

type responsesItem struct {
	Type      string          `json:"type"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"` // a string, or content items
}

// openAIModel serves m as OpenAI's Responses API.
func openAIModel(m *scriptedModel) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req responsesRequest
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/responses" || json.Unmarshal(body, &req) != nil {
			m.logRequest("%s %s: not served", r.Method, r.URL.Path)
			http.Error(w, `{"error":{"message":"not served","type":"invalid_request_error"}}`, http.StatusNotFound)
			return
		}
		made, replies := responsesHistory(&req)
		ns, name := responsesFind(req.Tools, "")
		next := m.next(made, replies, name)
		m.logRequest("responses %s: %d input items, %d tools, %d calls made -> %s", req.Model, len(req.Input), len(req.Tools), made, describe(next))
		responsesReply(w, &req, next, ns)
	})
}

// responsesFind returns run_python's namespace and name among tools.
func responsesFind(tools []responsesTool, ns string) (string, string) {
	for _, t := range tools {
		if t.Type == "namespace" {
			if ns, name := responsesFind(t.Tools, t.Name); name != "" {
				return ns, name
			}
		} else if isRunPython(t.Name) {
			return ns, t.Name
		}
	}
	return "", ""
}

func responsesHistory(req *responsesRequest) (int, []toolReply) {
	ours := map[string]bool{}
	var replies []toolReply
	for _, raw := range req.Input {
		var it responsesItem
		json.Unmarshal(raw, &it)
		switch {
		case it.Type == "function_call" && isRunPython(it.Name):
			ours[it.CallID] = true
		case it.Type == "function_call_output" && ours[it.CallID]:
			replies = append(replies, responsesResult(raw, it.Output))
		}
	}
	return len(ours), replies
}

// responsesResult reads a function_call_output. The Responses API has no
// error flag for it: an error can only be said in the output itself.
func responsesResult(raw, output json.RawMessage) toolReply {
	rep := toolReply{Raw: string(raw)}
	var s string
	if json.Unmarshal(output, &s) == nil {
		rep.Texts = []string{s}
		return rep
	}
	var items []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL string `json:"image_url"`
	}
	json.Unmarshal(output, &items)
	for _, it := range items {
		switch it.Type {
		case "input_text":
			rep.Texts = append(rep.Texts, it.Text)
		case "input_image":
			rep.Images = append(rep.Images, dataURL(it.ImageURL))
		}
	}
	return rep
}

// responsesReply streams next as one output item and the completed
// response.
func responsesReply(w http.ResponseWriter, req *responsesRequest, next turn, ns string) {
	id := fmt.Sprintf("resp_%d", len(req.Input))
	item := map[string]any{"type": "message", "id": "msg_" + id, "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": next.Text, "annotations": []any{}}}}
	if next.Tool != "" {
		args, _ := json.Marshal(next.Args)
		item = map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": "call_" + id, "name": next.Tool,
			"arguments": string(args), "status": "completed"}
		if ns != "" {
			item["namespace"] = ns
		}
	}
	response := map[string]any{"id": id, "object": "response", "model": req.Model, "status": "in_progress", "output": []any{}}
	startSSE(w)
	sse(w, "response.created", map[string]any{"type": "response.created", "response": response})
	sse(w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	response["status"], response["output"] = "completed", []any{item}
	response["usage"] = map[string]any{"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
		"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	sse(w, "response.completed", map[string]any{"type": "response.completed", "response": response})
}
