package e2e

// The scripted model speaking the Gemini API (POST
// /v1beta/models/MODEL:generateContent, and :streamGenerateContent with
// alt=sse), for Gemini CLI.

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

type geminiRequest struct {
	Contents []struct {
		Role  string            `json:"role"`
		Parts []json.RawMessage `json:"parts"`
	} `json:"contents"`
	Tools []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	GenerationConfig struct {
		ResponseMIMEType   string         `json:"responseMimeType"`
		ResponseJSONSchema map[string]any `json:"responseJsonSchema"`
	} `json:"generationConfig"`
}

type geminiPart struct {
	FunctionCall *struct {
		Name string `json:"name"`
	} `json:"functionCall"`
	FunctionResponse *struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
		Parts    []struct {
			InlineData *geminiBlob `json:"inlineData"`
		} `json:"parts"`
	} `json:"functionResponse"`
	InlineData *geminiBlob `json:"inlineData"`
}

type geminiBlob struct {
	MIMEType string `json:"mimeType"`
	Data     string `json:"data"`
}

// geminiModel serves m as the Gemini API.
func geminiModel(m *scriptedModel) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		model, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1beta/models/"), ":")
		var req geminiRequest
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &req) != nil || (method != "generateContent" && method != "streamGenerateContent") {
			m.logRequest("%s %s: not served", r.Method, r.URL.Path)
			http.Error(w, `{"error":{"code":404,"message":"not served","status":"NOT_FOUND"}}`, http.StatusNotFound)
			return
		}
		made, replies := geminiHistory(&req)
		tool := ""
		for _, t := range req.Tools {
			for _, f := range t.FunctionDeclarations {
				tool = pick(tool, f.Name)
			}
		}
		if schema := req.GenerationConfig.ResponseJSONSchema; schema != nil {
			// Gemini CLI's own questions on the side (which model to route
			// to, who speaks next) want JSON in a schema: the plainest
			// answer that fits it.
			b, _ := json.Marshal(schemaValue(schema))
			m.logRequest("gemini %s %s: a JSON answer -> %s", model, method, b)
			geminiReply(w, method == "streamGenerateContent", turn{Text: string(b)})
			return
		}
		next := m.next(made, replies, tool)
		m.logRequest("gemini %s %s: %d contents, tool %q, %d calls made -> %s", model, method, len(req.Contents), tool, made, describe(next))
		geminiReply(w, method == "streamGenerateContent", next)
	})
}

// geminiHistory counts the calls of run_python and collects their
// results. Gemini pairs a response with its call by name and order.
func geminiHistory(req *geminiRequest) (int, []toolReply) {
	made := 0
	var replies []toolReply
	for _, c := range req.Contents {
		for _, raw := range c.Parts {
			var p geminiPart
			json.Unmarshal(raw, &p)
			switch {
			case p.FunctionCall != nil && isRunPython(p.FunctionCall.Name):
				made++
			case p.FunctionResponse != nil && isRunPython(p.FunctionResponse.Name):
				replies = append(replies, geminiResult(raw, &p))
			case p.InlineData != nil && len(replies) > 0:
				// An image that follows a function response, as its part.
				replies[len(replies)-1].Images = append(replies[len(replies)-1].Images, sentImage{p.InlineData.MIMEType, p.InlineData.Data})
			}
		}
	}
	return made, replies
}

// geminiResult reads a functionResponse: its response is an object, with
// no error flag of its own (by convention an "error" key says so).
func geminiResult(raw json.RawMessage, p *geminiPart) toolReply {
	rep := toolReply{Raw: string(raw)}
	var resp map[string]json.RawMessage
	json.Unmarshal(p.FunctionResponse.Response, &resp)
	_, rep.IsError = resp["error"]
	rep.Texts = []string{string(p.FunctionResponse.Response)}
	for _, part := range p.FunctionResponse.Parts {
		if part.InlineData != nil {
			rep.Images = append(rep.Images, sentImage{part.InlineData.MIMEType, part.InlineData.Data})
		}
	}
	return rep
}

// geminiReply sends next as one candidate: whole, or as one event of a
// stream.
func geminiReply(w http.ResponseWriter, stream bool, next turn) {
	part := map[string]any{"text": next.Text}
	if next.Tool != "" {
		part = map[string]any{"functionCall": map[string]any{"name": next.Tool, "args": next.Args}}
	}
	resp := map[string]any{
		"candidates": []any{map[string]any{"index": 0, "finishReason": "STOP",
			"content": map[string]any{"role": "model", "parts": []any{part}}}},
		"usageMetadata": map[string]any{"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
		"modelVersion":  "scripted",
	}
	if !stream {
		writeJSON(w, resp)
		return
	}
	startSSE(w)
	sse(w, "", resp)
}

// schemaValue returns the plainest value that fits a JSON schema (as
// Gemini writes them: types in capitals): an object with every property,
// the first of an enum, the least number allowed.
func schemaValue(schema map[string]any) any {
	if enum, ok := schema["enum"].([]any); ok && len(enum) > 0 {
		return enum[0]
	}
	switch t, _ := schema["type"].(string); strings.ToLower(t) {
	case "object":
		props, _ := schema["properties"].(map[string]any)
		obj := map[string]any{}
		for name, p := range props {
			if p, ok := p.(map[string]any); ok {
				obj[name] = schemaValue(p)
			}
		}
		return obj
	case "array":
		return []any{}
	case "integer", "number":
		if min, ok := schema["minimum"].(float64); ok {
			return min
		}
		return 1
	case "boolean":
		return false
	default:
		return "scripted"
	}
}
