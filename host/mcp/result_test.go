package mcp

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/client"
	"pybox/shared/wire"
)

// receipt is a plausible receipt from the guest.
func receipt(runID, status, cleanup string) wire.Receipt {
	code := 0
	if status != wire.StatusOK {
		code = 1
	}
	return wire.Receipt{
		SchemaVersion: wire.ReceiptSchemaVersion, RunID: runID, Status: status, Reason: "the program exited " + status,
		ExitCode: &code, Image: wire.ImageInfo{Name: "stdlib", Digest: strings.Repeat("ab", 32)},
		Agent:   wire.AgentInfo{Version: "test", Commit: "0123456789ab", Kernel: "6.1.0"},
		Limits:  wire.AppliedLimit{TimeoutSeconds: 2, MaxOutputBytes: 4096, MemoryBytes: 512 << 20, PidsMax: 128},
		Memory:  wire.Memory{PeakBytes: 10 << 20, Reading: "final", LimitBytes: 512 << 20},
		Capture: wire.Capture{Stdout: "hello\n", StdoutInfo: wire.Stream{Bytes: 6, KeptBytes: 6}},
		Cleanup: wire.Cleanup{Status: cleanup},
	}
}

// taken is the guest's answer as host/client hands it on: bounded (see
// client.NewResult).
func taken(res *wire.Result) *client.Result { return client.NewResult(res, nil) }

// decoded is a tool result as a client reads it.
type decoded struct {
	doc struct {
		SchemaVersion int             `json:"schema_version"`
		Error         *callError      `json:"error"`
		Execution     json.RawMessage `json:"execution"`
		Delivery      delivery        `json:"delivery"`
		Files         *[]fileOut      `json:"files"`
	}
	exec struct {
		RunID   string       `json:"run_id"`
		Status  string       `json:"status"`
		Cleanup wire.Cleanup `json:"cleanup"`
		Capture wire.Capture `json:"capture"`
	}
	isError bool
	line    int // the whole JSON-RPC response line, with the longest id allowed
	images  []imageBlock
}

// imageBlock is an image block as a client reads it.
type imageBlock struct {
	Type     string `json:"type"`
	Data     []byte `json:"data"` // encoding/json decodes base64
	MIMEType string `json:"mimeType"`
}

// checkResult checks what every result must keep to, and decodes it.
func checkResult(t testing.TB, res *sdk.CallToolResult) *decoded {
	t.Helper()
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := jsonrpc.MakeID(strings.Repeat("i", maxIDBytes-2))
	line, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Result: raw})
	if err != nil {
		t.Fatal(err)
	}
	return checkEncoded(t, raw, len(line)+1)
}

// checkEncoded checks a tool result as encoded on the wire: result is the
// JSON-RPC result member, line the size of the whole response line.
func checkEncoded(t testing.TB, result []byte, line int) *decoded {
	t.Helper()
	var res struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
		IsError           bool              `json:"isError"`
	}
	if err := json.Unmarshal(result, &res); err != nil {
		t.Fatal(err)
	}
	d := &decoded{isError: res.IsError, line: line}
	if d.line > MaxResponseBytes {
		t.Fatalf("response of %d bytes: over %d", d.line, MaxResponseBytes)
	}
	var text struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if len(res.Content) == 0 || json.Unmarshal(res.Content[0], &text) != nil || text.Type != "text" {
		t.Fatalf("content: %s", result)
	}
	// Only images follow the text.
	for _, c := range res.Content[1:] {
		var p imageBlock
		if err := json.Unmarshal(c, &p); err != nil || p.Type != "image" || len(p.Data) == 0 || !strings.HasPrefix(p.MIMEType, "image/") {
			t.Fatalf("content after the text: %v %.200s", err, c)
		}
		d.images = append(d.images, p)
	}
	if text.Text != string(res.StructuredContent) {
		t.Fatal("the text content is not the structured JSON")
	}
	if err := json.Unmarshal(res.StructuredContent, &d.doc); err != nil {
		t.Fatal(err)
	}
	if d.doc.SchemaVersion != ResultSchemaVersion {
		t.Fatalf("schema_version %d", d.doc.SchemaVersion)
	}
	if n := len(d.doc.Execution); n > MaxReceiptBytes {
		t.Fatalf("execution of %d bytes: over %d", n, MaxReceiptBytes)
	}
	if d.doc.Delivery.ReceiptBytes != len(d.doc.Execution) {
		t.Fatalf("delivery.receipt_bytes %d, execution is %d bytes", d.doc.Delivery.ReceiptBytes, len(d.doc.Execution))
	}
	if line > 0 && d.doc.Delivery.ResponseBytes != len(result) {
		t.Fatalf("delivery.response_bytes %d, the result is %d bytes", d.doc.Delivery.ResponseBytes, len(result))
	}
	if err := json.Unmarshal(d.doc.Execution, &d.exec); err != nil {
		t.Fatal(err)
	}
	if d.exec.Cleanup.Status == "" {
		t.Fatal("no cleanup status")
	}
	if d.doc.Delivery.Trimmed != (len(d.doc.Delivery.What) > 0) {
		t.Fatalf("trimmed %v with %q", d.doc.Delivery.Trimmed, d.doc.Delivery.What)
	}
	return d
}

func TestShapeOK(t *testing.T) {
	rec := receipt("r1", wire.StatusOK, wire.CleanupRemoved)
	d := checkResult(t, shape(outcome{RunID: "r1", Result: taken(&wire.Result{Receipt: rec})}))
	if d.isError || d.doc.Error != nil || d.doc.Delivery.Trimmed || d.doc.Files != nil {
		t.Fatalf("isError %v, error %v, delivery %+v, files %v", d.isError, d.doc.Error, d.doc.Delivery, d.doc.Files)
	}
	if d.exec.RunID != "r1" || d.exec.Status != wire.StatusOK || d.exec.Capture.Stdout != "hello\n" {
		t.Fatalf("execution %s", d.doc.Execution)
	}
	var back wire.Receipt
	if err := json.Unmarshal(d.doc.Execution, &back); err != nil || back.Memory.Reading != "final" || back.Image.Digest != rec.Image.Digest {
		t.Fatalf("execution is not the receipt: %v %s", err, d.doc.Execution)
	}
}

func TestShapeIsError(t *testing.T) {
	for _, tc := range []struct {
		status, cleanup string
		want            bool
	}{
		{wire.StatusOK, wire.CleanupRemoved, false},
		{wire.StatusError, wire.CleanupRemoved, true},
		{wire.StatusTimeout, wire.CleanupRemoved, true},
		{wire.StatusOOM, wire.CleanupRemoved, true},
		{wire.StatusCancelled, wire.CleanupRemoved, true},
		{wire.StatusRefused, wire.CleanupRemoved, true},
		{wire.StatusOK, wire.CleanupFailed, true},
		{wire.StatusOK, wire.CleanupUnknown, true},
		{wire.StatusOK, "removed", true},
		{"OK", wire.CleanupRemoved, true},
	} {
		rec := receipt("r", tc.status, tc.cleanup)
		d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec})}))
		if d.isError != tc.want {
			t.Errorf("status %s, cleanup %s: isError %v", tc.status, tc.cleanup, d.isError)
		}
	}
}

// isError keeps the product's rule when the receipt is cut down to its
// essentials to fit, or to the last resort that carries only the run's
// status and cleanup: status and cleanup decide, as for a whole receipt.
func TestIsErrorOfEssentials(t *testing.T) {
	for _, tc := range []struct {
		status, cleanup string
		want            bool
	}{
		{wire.StatusOK, wire.CleanupRemoved, false},
		{wire.StatusError, wire.CleanupRemoved, true},
		{wire.StatusTimeout, wire.CleanupRemoved, true},
		{wire.StatusOOM, wire.CleanupRemoved, true},
		{wire.StatusCancelled, wire.CleanupRemoved, true},
		{wire.StatusRefused, wire.CleanupRemoved, true},
		{wire.StatusOK, wire.CleanupFailed, true},
		{wire.StatusOK, wire.CleanupUnknown, true},
		{"", wire.CleanupNotAttempted, true}, // refused before it ran
		{"", wire.CleanupUnknown, true},      // no receipt came back
	} {
		essential := &document{Execution: &essentials{RunID: "r", Status: tc.status, Cleanup: wire.Cleanup{Status: tc.cleanup}}}
		if got := essential.isError(); got != tc.want {
			t.Errorf("essentials, status %q, cleanup %s: isError %v", tc.status, tc.cleanup, got)
		}
		tr := &trimmer{doc: document{Execution: &essentials{RunID: "r", Status: tc.status, Cleanup: wire.Cleanup{Status: tc.cleanup}}}, runID: "r"}
		tr.undeliverable()
		if got := tr.doc.isError(); got != tc.want {
			t.Errorf("undeliverable, status %q, cleanup %s: isError %v", tc.status, tc.cleanup, got)
		}
	}
}

// outputFolderReceipt is the receipt of a run that left files (more
// than wire.MaxDeliveredFiles) in /tmp/output for an output folder: the
// first 1024 delivered, 16 of the rest listed with the reason, the
// others counted.
func outputFolderReceipt(files int) wire.Receipt {
	rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
	for i := range wire.MaxDeliveredFiles {
		rec.Output.Delivered = append(rec.Output.Delivered, wire.FileDigest{Name: fmt.Sprintf("part-%05d.csv", i), Bytes: int64(i), SHA256: sum([]byte{byte(i)})})
	}
	for i := range wire.MaxListedNotReturned {
		rec.Output.NotDelivered = append(rec.Output.NotDelivered,
			wire.NotReturned{Name: fmt.Sprintf("part-%05d.csv", wire.MaxDeliveredFiles+i), Reason: wire.NotDeliveredOverCount})
	}
	rec.Output.NotDeliveredUnlisted = files - wire.MaxDeliveredFiles - wire.MaxListedNotReturned
	all := wire.SumFiles(rec.Output.Delivered)
	rec.Output.DeliveredAll = &all
	return rec
}

// shapeReceipt shapes the result of a run with receipt rec, and reads
// back the receipt it carries.
func shapeReceipt(t *testing.T, rec wire.Receipt) (*decoded, wire.Receipt) {
	t.Helper()
	d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec})}))
	var back wire.Receipt
	if err := json.Unmarshal(d.doc.Execution, &back); err != nil {
		t.Fatalf("execution is not a receipt (cut to its essentials?): %v %.300s", err, d.doc.Execution)
	}
	return d, back
}

// A run that delivered thousands of files to the output folder: the
// receipt lists as many as fit, says how many there were, their bytes
// and the digest of the whole list, keeps the program's output whole,
// and the call is no error.
func TestShapeThousandsOfDeliveredFiles(t *testing.T) {
	rec := outputFolderReceipt(2000)
	rec.Capture.Stdout = strings.Repeat("the program's own output\n", 150)
	rec.Capture.StdoutInfo = wire.Stream{Bytes: int64(len(rec.Capture.Stdout)), KeptBytes: len(rec.Capture.Stdout)}
	all := *rec.Output.DeliveredAll
	d, back := shapeReceipt(t, rec)
	if d.isError || back.Capture.Stdout != rec.Capture.Stdout {
		t.Errorf("isError %v, stdout kept %d of %d bytes", d.isError, len(back.Capture.Stdout), len(rec.Capture.Stdout))
	}
	o := back.Output
	if o.DeliveredAll == nil || *o.DeliveredAll != all || len(o.Delivered) == 0 || len(o.Delivered) >= 1024 {
		t.Errorf("delivered: %d listed, all %+v (want %+v)", len(o.Delivered), o.DeliveredAll, all)
	}
	if len(o.NotDelivered)+o.NotDeliveredUnlisted != 2000-1024 {
		t.Errorf("not delivered: %d listed and %d counted, want %d in all", len(o.NotDelivered), o.NotDeliveredUnlisted, 2000-1024)
	}
	if what := strings.Join(d.doc.Delivery.What, "; "); !strings.Contains(what, "output_files.delivered cut from 1024 to") || !strings.Contains(what, "delivered_all") {
		t.Errorf("delivery says %q", what)
	}
}

func TestShapeRefused(t *testing.T) {
	d := checkResult(t, shape(refused(codeInvalidArguments, "arguments refused: timeout_s is 0")))
	if !d.isError || d.doc.Error == nil || d.doc.Error.Code != codeInvalidArguments || d.exec.Cleanup.Status != wire.CleanupNotAttempted {
		t.Fatalf("%+v %s", d.doc.Error, d.doc.Execution)
	}
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestShapeFiles(t *testing.T) {
	rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00")
	big := bytes.Repeat([]byte("y"), 40<<10)
	rec.Output.NotReturned = []wire.NotReturned{
		{Name: "huge.bin", Reason: wire.NotReturnedOverCap, Bytes: 100 << 20, SHA256: strings.Repeat("c", 64)},
		{Name: "link", Reason: wire.NotReturnedSymlink},
	}
	files := []wire.OutputFile{
		{Name: "out.csv", Content: []byte("a,b\n1,2\n")},
		{Name: "chart.png", Content: png},
		{Name: "empty", Content: nil},
		{Name: "big.txt", Content: big},
		{Name: "more.txt", Content: bytes.Repeat([]byte("z"), 9<<10)}, // past 48 KiB with big.txt
		{Name: "bad\nname", Content: []byte("x")},
	}
	d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec, Files: files}), ReturnFiles: true}))
	got := *d.doc.Files
	if len(got) != 7 {
		t.Fatalf("%d files listed", len(got))
	}
	text := func(i int, enc, content string) {
		t.Helper()
		if got[i].Encoding != enc || got[i].Content == nil || *got[i].Content != content || got[i].Omitted {
			t.Fatalf("file %d: %+v", i, got[i])
		}
	}
	text(0, encodingUTF8, "a,b\n1,2\n")
	text(1, encodingBase64, base64.StdEncoding.EncodeToString(png))
	text(2, encodingUTF8, "")
	text(3, encodingUTF8, string(big))
	if got[1].SHA256 != sum(png) || got[1].Bytes != int64(len(png)) {
		t.Fatalf("chart.png: %+v", got[1])
	}
	if f := got[4]; !f.Omitted || f.Content != nil || f.SHA256 != sum(files[4].Content) || f.Bytes != 9<<10 {
		t.Fatalf("a file past the 48 KiB cap: %+v", f)
	}
	if f := got[5]; f.Name != `bad\u{a}name` {
		t.Fatalf("a name with a newline is shown as %q", f.Name)
	}
	if f := got[6]; f.Name != "huge.bin" || !f.Omitted || f.Bytes != 100<<20 {
		t.Fatalf("the guest's over-cap file: %+v", f)
	}
	// Asked for no files: none, even if the guest sent some.
	d = checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec, Files: files})}))
	if d.doc.Files != nil {
		t.Fatal("files listed though return_files was false")
	}
}

// The worst output there is: every stream and file full of a byte that
// JSON escapes to six (and the text content escapes again).
func TestShapeTrimsEscapingBlowup(t *testing.T) {
	ctl := strings.Repeat("\x01", wire.MaxOutputBytes)
	rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
	rec.Capture.Stdout, rec.Capture.Stderr = ctl, strings.Repeat("<", wire.MaxOutputBytes)
	var files []wire.OutputFile
	for i := range 6 {
		files = append(files, wire.OutputFile{Name: "f" + string(rune('0'+i)), Content: []byte(ctl)})
	}
	d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec, Files: files}), ReturnFiles: true}))
	if !d.doc.Delivery.Trimmed || d.exec.Cleanup.Status != wire.CleanupRemoved || d.exec.Status != wire.StatusOK || d.exec.RunID != "r" {
		t.Fatalf("delivery %+v, execution %.200s", d.doc.Delivery, d.doc.Execution)
	}
	if d.doc.Files == nil || len(*d.doc.Files) != 6 {
		t.Fatal("the files are no longer listed")
	}
	omitted := 0
	for _, f := range *d.doc.Files {
		if f.Omitted {
			omitted++
			if f.SHA256 != sum([]byte(ctl)) {
				t.Fatal("an omitted file lost its sha256")
			}
		}
	}
	if omitted == 0 || omitted == 6 {
		t.Fatalf("%d of 6 contents dropped: want as few as fit", omitted)
	}
	t.Logf("response %d bytes (limit %d), receipt %d bytes, %d file contents dropped; %q",
		d.line, MaxResponseBytes, d.doc.Delivery.ReceiptBytes, omitted, d.doc.Delivery.What)
}

// The receipt alone over 64 KiB: both streams at the maximum, escaped.
func TestShapeTrimsReceipt(t *testing.T) {
	rec := receipt("r", wire.StatusError, wire.CleanupRemoved)
	rec.Capture.Stdout = strings.Repeat("\x02", 6000) + "Ω" + strings.Repeat("\x02", 6000)
	rec.Capture.Stderr = strings.Repeat("\x03", 12000)
	d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec})}))
	if !d.doc.Delivery.Trimmed || len(d.exec.Capture.Stdout) == 0 || len(d.exec.Capture.Stdout) >= 12002 {
		t.Fatalf("stdout kept %d bytes; delivery %+v", len(d.exec.Capture.Stdout), d.doc.Delivery)
	}
	if !strings.Contains(strings.Join(d.doc.Delivery.What, ";"), "64 KiB receipt") {
		t.Fatalf("delivery does not say why: %q", d.doc.Delivery.What)
	}
	t.Logf("receipt %d bytes; %q", d.doc.Delivery.ReceiptBytes, d.doc.Delivery.What)
}

// A guest that fills every field it controls: the host still delivers the
// run's status and cleanup.
func TestShapeHostileGuest(t *testing.T) {
	huge := strings.Repeat("\x01\"\\<", 64<<10)
	rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
	rec.Reason, rec.Signal, rec.Cleanup.Detail, rec.Image.Name, rec.Agent.Kernel = huge, huge, huge, huge, huge
	rec.Image.Python, rec.Image.Suite = huge, huge
	rec.Capture.Stdout, rec.Capture.Stderr = huge, huge
	for i := range 5000 {
		rec.InputFiles = append(rec.InputFiles, wire.FileDigest{Name: huge[:300], SHA256: strings.Repeat("a", 64), Bytes: int64(i)})
		rec.Output.Returned = append(rec.Output.Returned, wire.FileDigest{Name: "f", SHA256: huge[:100]})
		rec.Output.NotReturned = append(rec.Output.NotReturned, wire.NotReturned{Name: huge[:1000], Reason: huge[:1000]})
	}
	rec.Posture = &wire.Posture{CapEff: huge, Problems: []string{huge, huge}, Namespaces: make([]string, 10000), OpenFDs: make([]int, 100000)}
	var files []wire.OutputFile
	for i := range 3000 {
		files = append(files, wire.OutputFile{Name: huge[:250] + string(rune('a'+i%26)), Content: []byte(huge[:16])})
	}
	d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec, Files: files}), ReturnFiles: true}))
	if d.exec.Cleanup.Status != wire.CleanupRemoved || d.exec.Status != wire.StatusOK || d.exec.RunID != "r" || !d.doc.Delivery.Trimmed {
		t.Fatalf("execution %.300s; delivery %+v", d.doc.Execution, d.doc.Delivery)
	}
	// host/client cut the receipt; the result says so.
	if !strings.Contains(strings.Join(d.doc.Delivery.What, "; "), "fields of the guest's receipt over their bounds were cut") {
		t.Errorf("delivery does not say the guest's receipt was cut: %q", d.doc.Delivery.What)
	}
	t.Logf("response %d bytes, receipt %d bytes; %q", d.line, d.doc.Delivery.ReceiptBytes, d.doc.Delivery.What)
}

// FuzzShape: whatever the guest sends, the result fits both limits and
// carries the cleanup status.
func FuzzShape(f *testing.F) {
	f.Add("hello\n", "", "ok", "REMOVED", "out.csv", 1, 10, byte('a'), true)
	f.Add(strings.Repeat("\x01", 8192), strings.Repeat("\"", 8192), "error", "FAILED", "x", 16, 4096, byte(1), true)
	f.Add("", "", "", "", "", 0, 0, byte(0), false)
	f.Add(strings.Repeat("é", 3000), "\xff\xfe", "timeout", "REMOVED", "a\nb", 200, 300, byte(0xff), true)
	f.Add(strings.Repeat("\x01", 8192), strings.Repeat("<", 8192), "ok", "REMOVED", strings.Repeat("<", 200), 40, 4000, byte(0x89), true)
	f.Add("", "", "ok", "REMOVED", "chart.png", 3, 100000, byte(0x89), true)
	// With fill 0x89 (a PNG's first byte), the files are a picture, cut to
	// size when that is shorter.
	chart := chartPNG(f, 40, 30, true)
	f.Fuzz(func(t *testing.T, stdout, stderr, status, cleanup, name string, nfiles, size int, fill byte, returnFiles bool) {
		// What fits a 1 MiB frame from the guest.
		nfiles = min(max(nfiles, 0), 2000)
		size = min(max(size, 0), (1<<20)/max(nfiles, 1))
		rec := receipt("fuzz", status, cleanup)
		rec.Capture.Stdout, rec.Capture.Stderr = stdout, stderr
		rec.Cleanup.Detail = stderr
		var files []wire.OutputFile
		for i := range nfiles {
			content := bytes.Repeat([]byte{fill + byte(i)}, size)
			if fill == 0x89 {
				content = chart[:min(size, len(chart))]
			}
			files = append(files, wire.OutputFile{Name: name, Content: content})
			rec.Output.NotReturned = append(rec.Output.NotReturned, wire.NotReturned{Name: name, Reason: stdout})
		}
		d := checkResult(t, shape(outcome{RunID: "fuzz", Result: taken(&wire.Result{Receipt: rec, Files: files}), ReturnFiles: returnFiles}))
		want := client.Cut(cleanup, maxShortString)
		if want == "" {
			want = wire.CleanupUnknown // an empty status is no status: the undeliverable path says UNKNOWN
		}
		var asSent string // what a client reads back: JSON makes invalid UTF-8 into U+FFFD
		b, _ := json.Marshal(want)
		json.Unmarshal(b, &asSent)
		if d.exec.Cleanup.Status != asSent {
			t.Fatalf("cleanup %q came out as %q", cleanup, d.exec.Cleanup.Status)
		}
		if d.exec.RunID != "fuzz" {
			t.Fatalf("run id %q", d.exec.RunID)
		}
		if d.isError != (status != wire.StatusOK || cleanup != wire.CleanupRemoved || d.doc.Error != nil) {
			t.Fatalf("isError %v for status %q cleanup %q", d.isError, status, cleanup)
		}
	})
}

// C1 controls and bidi formatting characters in what a program printed
// never appear raw in a result: the JSON escapes them (the decoded text is
// the program's, unchanged), and each stream counts its controls.
func TestShapeEscapesControls(t *testing.T) {
	rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
	out := "total: 42\u009b2J \u202eevil\u202c and \x1b]52;c;Zm9v\x07 and \u2066x\u2069\n"
	rec.Capture.Stdout, rec.Capture.Stderr = out, "plain\n"
	rec.Capture.StdoutInfo.Controls = 0 // the guest's word does not count
	res := shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec})})
	raw, _ := json.Marshal(res)
	for _, c := range []string{"\u009b", "\u202e", "\u202c", "\u2066", "\u2069", "\x1b", "\x07"} {
		if bytes.Contains(raw, []byte(c)) {
			t.Errorf("%q is raw in the result", c)
		}
	}
	d := checkResult(t, res)
	if d.exec.Capture.Stdout != out {
		t.Errorf("stdout decodes to %q, want the program's %q", d.exec.Capture.Stdout, out)
	}
	if got := d.exec.Capture.StdoutInfo.Controls; got != 7 {
		t.Errorf("stdout controls %d, want 7", got)
	}
	if got := d.exec.Capture.StderrInfo.Controls; got != 0 {
		t.Errorf("stderr controls %d, want 0", got)
	}
}

// A run that left 1,100 files for an output folder: the guest delivered
// its first 1024, lists 16 of the other 76 with the reason and counts the
// rest, and says why none came back in the result. Cut to fit 64 KiB,
// the receipt keeps every entry of what was not delivered and why (the
// part the host cannot learn otherwise) and cuts the list of delivered
// files instead (delivered_all still accounts for all of them); no note
// gives a negative count.
func TestShapeKeepsWhatWasNotDelivered(t *testing.T) {
	const files, delivered = 1100, wire.MaxDeliveredFiles
	rec := outputFolderReceipt(files)
	rec.Output.NotReturned = []wire.NotReturned{}
	for i := range wire.MaxListedNotReturned {
		rec.Output.NotReturned = append(rec.Output.NotReturned, wire.NotReturned{Name: fmt.Sprintf("part-%05d.csv", i), Reason: wire.NotReturnedNotAsked})
	}
	rec.Output.NotListed = files - wire.MaxListedNotReturned
	all := *rec.Output.DeliveredAll
	d, back := shapeReceipt(t, rec)
	o := back.Output
	if len(o.NotDelivered) != wire.MaxListedNotReturned || o.NotDeliveredUnlisted != rec.Output.NotDeliveredUnlisted {
		t.Errorf("not delivered: %d listed and %d counted; want all %d listed, %d counted", len(o.NotDelivered), o.NotDeliveredUnlisted,
			wire.MaxListedNotReturned, rec.Output.NotDeliveredUnlisted)
	}
	for i, n := range o.NotDelivered {
		if n != rec.Output.NotDelivered[i] {
			t.Errorf("not_delivered[%d] = %+v, want %+v", i, n, rec.Output.NotDelivered[i])
		}
	}
	if len(o.NotReturned) != wire.MaxListedNotReturned || o.NotListed != rec.Output.NotListed {
		t.Errorf("not returned: %d listed and %d counted; want all %d listed, %d counted", len(o.NotReturned), o.NotListed,
			wire.MaxListedNotReturned, rec.Output.NotListed)
	}
	if len(o.Delivered) >= delivered || o.DeliveredAll == nil || *o.DeliveredAll != all {
		t.Errorf("delivered: %d of %d listed, all %+v (want %+v)", len(o.Delivered), delivered, o.DeliveredAll, all)
	}
	what := strings.Join(d.doc.Delivery.What, "; ")
	if strings.Contains(what, " -") || !strings.Contains(what, fmt.Sprintf("output_files.delivered cut from %d to %d entries", delivered, len(o.Delivered))) {
		t.Errorf("delivery says %q", what)
	}
}
