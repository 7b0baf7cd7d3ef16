package e2e

// The scripted model behind the agent CLIs of agents_e2e_test.go. An
// agent CLI is pointed at a server on 127.0.0.1 that speaks its vendor's
// public API (model_anthropic_test.go, model_openai_test.go,
// model_gemini_test.go); the server plays the model from a script: each
// turn it asks for the next call of run_python, and it records each tool
// result exactly as the agent sent it back. The agent is real; only the
// model is played.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// scriptedModel is the script and what came of it, shared by the vendor
// servers.
type scriptedModel struct {
	calls []map[string]any // run_python's arguments, one call a turn

	mu       sync.Mutex
	replies  []toolReply // the result of each call, as it reached the model
	requests []string    // one line per request, for the log
}

// toolReply is one tool result as the agent handed it to the model, in
// the vendor's terms reduced to what every vendor has.
type toolReply struct {
	Texts   []string    // the text parts, in order
	Images  []sentImage // image parts
	IsError bool        // the API's own error flag (where it has one) was set
	Raw     string      // the whole result as sent, for the log
}

// sentImage is an image part: its media type and base64 data.
type sentImage struct{ MediaType, Data string }

// turn is what the model says next: a call (Tool set) or, at the end, a
// closing text.
type turn struct {
	Tool string         // the tool to call, by the agent's name for it
	Args map[string]any // its arguments
	Text string
}

func newScriptedModel(calls ...map[string]any) *scriptedModel {
	return &scriptedModel{calls: calls}
}

// next decides the model's turn from the conversation so far: made is
// how many calls of run_python it holds, replies their results (to
// record), and tool the agent's name for run_python ("" when the agent
// has not offered it).
func (m *scriptedModel) next(made int, replies []toolReply, tool string) turn {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Every request carries the whole conversation: the longest list of
	// results seen is the record (side requests, such as a title for the
	// session, carry less).
	if len(replies) >= len(m.replies) {
		m.replies = replies
	}
	switch {
	case made >= len(m.calls):
		return turn{Text: fmt.Sprintf("Done: %d calls of run_python.", made)}
	case tool == "":
		return turn{Text: "run_python is not among my tools."}
	default:
		return turn{Tool: tool, Args: m.calls[made]}
	}
}

// logRequest notes one request for the test's log.
func (m *scriptedModel) logRequest(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, fmt.Sprintf(format, args...))
}

// results returns the results recorded so far, one per call.
func (m *scriptedModel) results() []toolReply {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]toolReply(nil), m.replies...)
}

func (m *scriptedModel) log() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.requests, "\n")
}

// serve starts h on 127.0.0.1 and returns its base URL.
func serveModel(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// isRunPython tells the agent's name for run_python (plain, or prefixed
// with the server's name: mcp__pybox__run_python, pybox__run_python).
func isRunPython(name string) bool {
	return name == "run_python" || strings.HasSuffix(name, "__run_python") || strings.HasSuffix(name, "_run_python")
}

// sse writes one server-sent event (event may be empty) and flushes it.
func sse(w http.ResponseWriter, event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// describe says in a few words what a turn is, for the log.
func describe(next turn) string {
	if next.Tool == "" {
		return fmt.Sprintf("text %q", next.Text)
	}
	b, _ := json.Marshal(next.Args)
	return fmt.Sprintf("call %s %.80s", next.Tool, b)
}

// dataURL splits a data: URL (data:image/png;base64,...) into its media
// type and data.
func dataURL(u string) sentImage {
	head, data, _ := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
	return sentImage{MediaType: strings.TrimSuffix(head, ";base64"), Data: data}
}
