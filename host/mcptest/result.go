package mcptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/shared/wire"
)

// document is run_python's structuredContent as a client reads it.
type document struct {
	SchemaVersion int             `json:"schema_version"`
	Error         *callError      `json:"error"`
	Execution     json.RawMessage `json:"execution"`
	Delivery      *delivery       `json:"delivery"`
	Files         *[]fileOut      `json:"files"`
	OutputDir     *outputDir      `json:"output_dir"`
}

// outputDir is what a run saved in the server's output folder.
type outputDir struct {
	Dir   string `json:"dir"`
	Files []struct {
		Name   string `json:"name"`
		Path   string `json:"path"`
		Bytes  int64  `json:"bytes"`
		SHA256 string `json:"sha256"`
	} `json:"files"`
	NotWritten []string `json:"not_written"`
}

type callError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type delivery struct {
	Trimmed bool     `json:"trimmed"`
	What    []string `json:"what"`
}

type fileOut struct {
	Name     string  `json:"name"`
	Bytes    int64   `json:"bytes"`
	SHA256   string  `json:"sha256"`
	Encoding string  `json:"encoding"`
	Content  *string `json:"content"`
	Omitted  bool    `json:"omitted"`
}

// toolResult is a decoded tools/call result.
type toolResult struct {
	IsError bool
	Doc     document
	Exec    wire.Receipt // the execution: a whole receipt, or its essentials
	// TextSame says whether the text content is the same JSON as the
	// structured content, as docs/result.md promises.
	TextSame bool
	// Images are the image blocks after the text; Others counts blocks
	// after it of any other kind.
	Images []*mcp.ImageContent
	Others int
}

// decodeResult reads a tool result. It fails only when there is no
// structuredContent to read.
func decodeResult(res *mcp.CallToolResult) (*toolResult, error) {
	if res.StructuredContent == nil {
		return nil, errors.New("no structuredContent in the result")
	}
	structured, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, err
	}
	r := &toolResult{IsError: res.IsError}
	if err := json.Unmarshal(structured, &r.Doc); err != nil {
		return nil, fmt.Errorf("structuredContent is not run_python's result: %v", err)
	}
	if len(r.Doc.Execution) > 0 {
		if err := json.Unmarshal(r.Doc.Execution, &r.Exec); err != nil {
			return nil, fmt.Errorf("execution is not a receipt: %v", err)
		}
	}
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			r.TextSame = sameJSON([]byte(tc.Text), structured)
		}
		for _, c := range res.Content[1:] {
			if im, ok := c.(*mcp.ImageContent); ok {
				r.Images = append(r.Images, im)
			} else {
				r.Others++
			}
		}
	}
	return r, nil
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ea, _ := json.Marshal(va)
	eb, _ := json.Marshal(vb)
	return bytes.Equal(ea, eb)
}

// ran reports whether a run happened, as the result tells it: a status,
// or a cleanup status other than NOT_ATTEMPTED.
func (r *toolResult) ran() bool {
	return r.Exec.Status != "" || r.Exec.Cleanup.Status != wire.CleanupNotAttempted
}

// summary says in a few words what a result is, for a failure's "got".
func (r *toolResult) summary() string {
	if r.Doc.Error != nil {
		return fmt.Sprintf("error %s (%s), cleanup %s", r.Doc.Error.Code, cut(r.Doc.Error.Message, 160), orNone(r.Exec.Cleanup.Status))
	}
	s := fmt.Sprintf("status %s, cleanup %s", orNone(r.Exec.Status), orNone(r.Exec.Cleanup.Status))
	if r.Exec.Status != wire.StatusOK && r.Exec.Reason != "" {
		s += " (" + cut(r.Exec.Reason, 120) + ")"
	}
	if r.Exec.Capture.Stderr != "" && r.Exec.Status != wire.StatusOK {
		s += fmt.Sprintf("; stderr %q", cut(lastLine(r.Exec.Capture.Stderr), 160))
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// lastLine is the last line of s: for stderr, where Python's error is.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// ok is a run that worked: status ok, box removed, not an error.
func (r *toolResult) ok() bool {
	return !r.IsError && r.Doc.Error == nil && r.Exec.Status == wire.StatusOK && r.Exec.Cleanup.Status == wire.CleanupRemoved
}

// refusedUnrun is a call refused before anything ran.
func (r *toolResult) refusedUnrun() bool {
	return r.IsError && r.Doc.Error != nil && r.Exec.Status == "" && r.Exec.Cleanup.Status == wire.CleanupNotAttempted
}
