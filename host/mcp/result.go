package mcp

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/client"
	"pybox/host/escape"
	"pybox/host/outdir"
	"pybox/host/version"
	"pybox/shared/wire"
)

// ResultSchemaVersion versions the document in a tool result's
// structuredContent (and text). The receipt inside has its own version.
const ResultSchemaVersion = 1

// The documented limits on what goes out (docs/limits.md), on the encoded bytes.
const (
	MaxReceiptBytes  = 64 << 10  // execution, JSON-encoded
	MaxResponseBytes = 256 << 10 // one JSON-RPC response line
	// maxIDBytes bounds a request id as encoded; the transport refuses
	// longer ones so that the envelope around a result stays small.
	maxIDBytes = 200
	// envelopeBytes is room for {"jsonrpc":"2.0","id":ID,"result":...}
	// and the newline around a result.
	envelopeBytes = 64 + maxIDBytes
	// maxResultBytes is what the result member itself may take.
	maxResultBytes = MaxResponseBytes - envelopeBytes
)

// Error codes of a call that did not produce a receipt (besides the
// wire's: busy, no_vm, no_image, unhealthy, ...).
const (
	codeInvalidArguments = "invalid_arguments"
	codeSessionLimit     = "session_limit"
	codeCancelled        = "cancelled"
	codeVMLost           = "vm_lost"
	codeUndeliverable    = "undeliverable"
	codeOutputFull       = "output_dir_full"
)

// document is a tool result's structuredContent, and its text.
type document struct {
	SchemaVersion int `json:"schema_version"`
	// Error says why a call has no receipt, or why it could not be
	// delivered whole. Execution then still carries the cleanup status.
	Error     *callError `json:"error,omitempty"`
	Execution any        `json:"execution"` // *wire.Receipt, or *essentials
	Delivery  delivery   `json:"delivery"`
	Files     *[]fileOut `json:"files,omitempty"`
	// OutputDir says what the run wrote in the server's output folder.
	OutputDir *savedOut `json:"output_dir,omitempty"`
	// images follow the text in the result's content: returned files
	// that are pictures (see showPictures). They are not part of the JSON.
	images []*sdk.ImageContent
	// wire is what the protocol of the call adds to the result.
	wire wireExtras
}

// wireExtras are what MCP 2026-07-28 adds to a result as it goes out:
// the server's identity in its _meta (set here, so that it is measured
// with the rest; the SDK adds it where it is missing) and
// "resultType":"complete" (which only the SDK can set: counted here).
// The result is otherwise the same under every version.
type wireExtras struct {
	serverInfo *sdk.Implementation
	resultType bool
}

// resultTypeBytes is the size of the resultType member the SDK adds.
const resultTypeBytes = len(`,"resultType":"complete"`)

// serverInfo is the server's identity, in the initialize result and
// server/discover, and in every result of 2026-07-28.
var serverInfo = &sdk.Implementation{Name: "pybox", Title: "PyBox", Version: version.Version}

type callError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// essentials is what a result always says about a run, even when the
// receipt is missing or could not be delivered: its id and status when
// known, and above all its cleanup status.
type essentials struct {
	RunID    string       `json:"run_id,omitempty"`
	Status   string       `json:"status,omitempty"`
	Reason   string       `json:"reason,omitempty"`
	ExitCode *int         `json:"exit_code,omitempty"`
	Cleanup  wire.Cleanup `json:"cleanup"`
}

// delivery says whether the host trimmed anything to fit the limits.
type delivery struct {
	Trimmed bool     `json:"trimmed"`
	What    []string `json:"what"`
	// ReceiptBytes is the size of execution, JSON-encoded.
	ReceiptBytes int `json:"receipt_bytes"`
	// ResponseBytes is the size of the encoded tool result (the JSON-RPC
	// result member); the envelope around it adds the request id and
	// about 40 bytes.
	ResponseBytes int `json:"response_bytes"`
}

// savedOut is what a run wrote in the server's output folder (--output-dir):
// the run's directory there, and each file with its path, size and
// sha256 (the first maxSavedListed; More counts the rest).
type savedOut struct {
	Dir        string         `json:"dir,omitempty"`
	Files      []outdir.Saved `json:"files"`
	More       int            `json:"more_files,omitempty"`
	NotWritten []string       `json:"not_written,omitempty"`
}

// maxSavedListed bounds the saved files a result lists.
const maxSavedListed = 64

// fileOut is a returned file: content as text when it is valid UTF-8,
// base64 otherwise, or omitted with the reason.
type fileOut struct {
	Name     string  `json:"name"`
	Bytes    int64   `json:"bytes"`
	SHA256   string  `json:"sha256"`
	Encoding string  `json:"encoding,omitempty"`
	Content  *string `json:"content,omitempty"`
	Omitted  bool    `json:"omitted,omitempty"`
	Reason   string  `json:"reason,omitempty"`
}

// outcome is what a call came to, before it is shaped into a result.
// Exactly one of Result and Err is set.
type outcome struct {
	RunID       string         // the host's id for the run, "" when none was made
	Result      *client.Result // the guest's answer, as host/client bounded it
	ReturnFiles bool
	Err         *callError
	Cleanup     wire.Cleanup // when Err is set: what is known of the box
	Saved       *savedOut    // what went to the output folder, if the server has one
}

// refused is the outcome of a call that never reached the VM.
func refused(code, msg string) outcome {
	return outcome{
		Err:     &callError{Code: code, Message: msg},
		Cleanup: *wire.NothingRan(),
	}
}

// isError is true when the program failed, timed out, was cancelled, or
// cleanup was not confirmed, and when the call never ran (no status):
// whatever was cut to make the result fit, the status and the cleanup
// are always there to decide it.
func (d *document) isError() bool {
	switch e := d.Execution.(type) {
	case *wire.Receipt:
		return e.Status != wire.StatusOK || e.Cleanup.Status != wire.CleanupRemoved
	case *essentials:
		// No status: the call was refused, or no receipt came back.
		return e.Status != wire.StatusOK || e.Cleanup.Status != wire.CleanupRemoved
	}
	return true
}

// encode renders the document as a tool result: structuredContent, the
// same JSON as text, and the images after it. It returns the encoded sizes
// of the execution and of the whole result, measured the way the SDK will
// encode them (json.Marshal escapes <, > and & as \u003c..., so the raw
// length would be wrong; the SDK sends an image's data as base64).
func (d *document) encode() (res *sdk.CallToolResult, receiptBytes, resultBytes int) {
	exec := encodeJSON(d.Execution)
	doc := encodeJSON(d)
	content := []sdk.Content{&sdk.TextContent{Text: string(doc)}}
	for _, im := range d.images {
		content = append(content, im)
	}
	res = &sdk.CallToolResult{
		Content:           content,
		StructuredContent: json.RawMessage(doc),
		IsError:           d.isError(),
	}
	if d.wire.serverInfo != nil {
		res.Meta = sdk.Meta{sdk.MetaKeyServerInfo: d.wire.serverInfo}
	}
	all, err := json.Marshal(res)
	if err != nil {
		panic("mcp: a result that cannot be encoded: " + err.Error())
	}
	resultBytes = len(all)
	if d.wire.resultType {
		resultBytes += resultTypeBytes
	}
	return res, len(exec), resultBytes
}

// encodeJSON encodes v as a result carries it: with no C1 control or
// bidi formatting character raw in what a client may draw (the text
// shows \uXXXX; the structured content decodes to the same strings).
func encodeJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("mcp: a result that cannot be encoded: " + err.Error()) // only strings, numbers and bools
	}
	return escape.JSON(b)
}

// filesOut lists the returned files (host/client bounded their number
// and escaped their names), content and all, with the result's cap on
// content (the guest applies it too, but is not trusted), then the files
// the guest left out for being over the cap.
func filesOut(r *wire.Result) []fileOut {
	out := []fileOut{}
	total := 0
	for _, f := range r.Files {
		sum := sha256.Sum256(f.Content)
		fo := fileOut{Name: f.Name, Bytes: int64(len(f.Content)), SHA256: hex.EncodeToString(sum[:])}
		if total+len(f.Content) > wire.MaxReturnedFileBytes {
			fo.Omitted, fo.Reason = true, wire.NotReturnedOverCap
		} else {
			total += len(f.Content)
			fo.Encoding, fo.Content = contentOf(f.Content)
		}
		out = append(out, fo)
	}
	for _, n := range r.Receipt.Output.NotReturned {
		if n.Reason == wire.NotReturnedOverCap {
			out = append(out, fileOut{Name: n.Name, Bytes: n.Bytes, SHA256: n.SHA256, Omitted: true, Reason: n.Reason})
		}
	}
	return out
}

func contentOf(b []byte) (encoding string, content *string) {
	s := string(b)
	if utf8.Valid(b) {
		return encodingUTF8, &s
	}
	s = base64.StdEncoding.EncodeToString(b)
	return encodingBase64, &s
}
