package e2e

// The scripted model speaking Anthropic's Messages API (POST
// /v1/messages, streamed as server-sent events when asked), for Claude
// Code.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

type anthropicRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	Tools  []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"` // a string, or blocks
	} `json:"messages"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`   // tool_use
	Name      string          `json:"name"` // tool_use
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: a string, or blocks
	IsError   bool            `json:"is_error"`
	Source    *struct {
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source"` // image
}

// anthropicToolSearch is Claude Code's tool that loads a deferred tool
// (its MCP tools start deferred) into the next requests.
const anthropicToolSearch = "ToolSearch"

// anthropicModel serves m as Anthropic's Messages API.
func anthropicModel(m *scriptedModel) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req anthropicRequest
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/messages" || json.Unmarshal(body, &req) != nil {
			m.logRequest("%s %s: not served", r.Method, r.URL.Path)
			http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not served"}}`, http.StatusNotFound)
			return
		}
		made, replies := anthropicHistory(&req)
		tool, search := "", false
		for _, t := range req.Tools {
			tool = pick(tool, t.Name)
			search = search || t.Name == anthropicToolSearch
		}
		var next turn
		if tool == "" && search && !anthropicSearched(&req) {
			// Ask for the tool to be loaded, as a model would.
			next = turn{Tool: anthropicToolSearch, Args: map[string]any{"query": "select:mcp__pybox__run_python"}}
		} else {
			next = m.next(made, replies, tool)
		}
		m.logRequest("anthropic %s: %d messages, %d tools, %d calls made -> %s", req.Model, len(req.Messages), len(req.Tools), made, describe(next))
		anthropicReply(w, &req, next)
	})
}

// pick keeps the first name that is run_python's.
func pick(found, name string) string {
	if found == "" && isRunPython(name) {
		return name
	}
	return found
}

// anthropicHistory counts the calls of run_python in the conversation
// and collects their results.
func anthropicHistory(req *anthropicRequest) (int, []toolReply) {
	ours := map[string]bool{}
	var replies []toolReply
	for _, msg := range req.Messages {
		var blocks []json.RawMessage
		if json.Unmarshal(msg.Content, &blocks) != nil {
			continue // plain text
		}
		for _, raw := range blocks {
			var b anthropicBlock
			json.Unmarshal(raw, &b)
			switch {
			case b.Type == "tool_use" && isRunPython(b.Name):
				ours[b.ID] = true
			case b.Type == "tool_result" && ours[b.ToolUseID]:
				replies = append(replies, anthropicResult(raw, &b))
			}
		}
	}
	return len(ours), replies
}

// anthropicSearched tells whether the model has already asked for
// ToolSearch (so that a second ask cannot loop).
func anthropicSearched(req *anthropicRequest) bool {
	for _, msg := range req.Messages {
		if msg.Role == "assistant" && strings.Contains(string(msg.Content), `"name":"`+anthropicToolSearch+`"`) {
			return true
		}
	}
	return false
}

func anthropicResult(raw json.RawMessage, b *anthropicBlock) toolReply {
	rep := toolReply{IsError: b.IsError, Raw: string(raw)}
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		rep.Texts = []string{s}
		return rep
	}
	var parts []anthropicBlock
	json.Unmarshal(b.Content, &parts)
	for _, p := range parts {
		switch {
		case p.Type == "text":
			rep.Texts = append(rep.Texts, p.Text)
		case p.Type == "image" && p.Source != nil:
			rep.Images = append(rep.Images, sentImage{p.Source.MediaType, p.Source.Data})
		}
	}
	return rep
}

// anthropicReply sends next as one assistant message, streamed when the
// request asked for it.
func anthropicReply(w http.ResponseWriter, req *anthropicRequest, next turn) {
	id := fmt.Sprintf("msg_%d", len(req.Messages))
	block, stop := map[string]any{"type": "text", "text": next.Text}, "end_turn"
	if next.Tool != "" {
		block, stop = map[string]any{"type": "tool_use", "id": "toolu_" + id, "name": next.Tool, "input": next.Args}, "tool_use"
	}
	usage := map[string]any{"input_tokens": 1, "output_tokens": 1}
	msg := map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage}
	if !req.Stream {
		writeJSON(w, msg)
		return
	}
	startSSE(w)
	msg["content"], msg["stop_reason"] = []any{}, nil
	sse(w, "message_start", map[string]any{"type": "message_start", "message": msg})
	// The block starts empty and its content comes as a delta, as the API
	// streams it.
	start, delta := map[string]any{"type": "text", "text": ""}, map[string]any{"type": "text_delta", "text": next.Text}
	if next.Tool != "" {
		args, _ := json.Marshal(next.Args)
		start = map[string]any{"type": "tool_use", "id": block["id"], "name": next.Tool, "input": map[string]any{}}
		delta = map[string]any{"type": "input_json_delta", "partial_json": string(args)}
	}
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": start})
	sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": delta})
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 1}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}
