package mcp

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/client"
	"pybox/shared/wire"
)

// Sizes the result gives what it carries besides the receipt, which
// host/client has bounded already: an error's code and message, and the
// cleanup of a call without a receipt.
const (
	maxShortString = 128  // an error's code, a cleanup status
	maxTextString  = 2048 // an error's message, a cleanup detail
	// noteRoom is kept free while trimming for delivery's notes, which
	// appear twice (structured and text).
	noteRoom = 4 << 10
)

// shape turns an outcome into the tool result, trimmed to fit 64 KiB of
// receipt and 256 KiB of response. It is a pure function. Whatever it gets,
// the result fits and still carries the cleanup status: when nothing else
// fits, an error result with the run's essentials.
func shape(o outcome) *sdk.CallToolResult { return shapeFor(o, wireExtras{}) }

// shapeFor is shape for a call whose protocol adds w to the result: it
// counts in response_bytes and in the limit.
func shapeFor(o outcome, w wireExtras) *sdk.CallToolResult {
	t := newTrimmer(o)
	t.doc.wire = w
	t.trim()
	t.showPictures()
	return t.finish()
}

// trimmer holds a result while it is being cut down. Each step sets its
// part from the untouched original (orig), so a binary search can try
// any amount of cutting in any order.
type trimmer struct {
	doc   document
	rec   *wire.Receipt // nil when the document carries essentials
	orig  wire.Receipt  // rec before any step
	files []fileOut
	ofile []fileOut
	// raw holds the content of files[i] as the guest sent it, for the
	// files that came with content.
	raw   [][]byte
	runID string
	// Sizes at the last measure.
	receiptBytes, resultBytes int
}

func newTrimmer(o outcome) *trimmer {
	t := &trimmer{runID: o.RunID}
	t.doc = document{SchemaVersion: ResultSchemaVersion, Delivery: delivery{What: []string{}}}
	if o.Result == nil {
		t.doc.Error = cutError(o.Err)
		t.doc.Execution = &essentials{RunID: o.RunID, Cleanup: cutCleanup(o.Cleanup)}
		return t
	}
	// The receipt is host/client's, bounded; the trimming works on a copy
	// (of the network section too, which it holds by pointer).
	rec := o.Result.Receipt
	if rec.Network != nil {
		n := *rec.Network
		rec.Network = &n
	}
	t.rec, t.orig, t.doc.Execution = &rec, rec, &rec
	t.doc.OutputDir = o.Saved
	if o.Result.Cut() {
		t.note("fields of the guest's receipt over their bounds were cut")
	}
	if o.Err != nil {
		t.doc.Error = cutError(o.Err)
	}
	if o.ReturnFiles {
		t.files = filesOut(&o.Result.Result)
		for _, f := range o.Result.Files {
			t.raw = append(t.raw, f.Content)
		}
		t.ofile = slices.Clone(t.files)
		t.doc.Files = &t.files
	}
	return t
}

func (t *trimmer) note(format string, args ...any) {
	t.doc.Delivery.Trimmed = true
	t.doc.Delivery.What = append(t.doc.Delivery.What, fmt.Sprintf(format, args...))
}

// measure encodes the document with the delivery numbers at their
// widest, so that the final numbers can only make it smaller.
func (t *trimmer) measure() {
	t.doc.Delivery.ReceiptBytes, t.doc.Delivery.ResponseBytes = 999999, 999999
	_, t.receiptBytes, t.resultBytes = t.doc.encode()
}

// receiptFits measures only the receipt: the receipt's steps need no more.
func (t *trimmer) receiptFits() bool {
	t.receiptBytes = len(encodeJSON(t.doc.Execution))
	return t.receiptBytes <= MaxReceiptBytes
}

// resultFits leaves room for the notes that steps add after they measured.
func (t *trimmer) resultFits() bool {
	t.measure()
	return t.resultBytes <= maxResultBytes-noteRoom
}

// fits is the final word, on the real limits.
func (t *trimmer) fits() bool {
	t.measure()
	return t.resultBytes <= maxResultBytes && t.receiptFits()
}

// trim applies the steps in order until the result fits: first the
// receipt to its 64 KiB (lists of files, whose counts, bytes and digests
// stay, then captured text: the program's output is never the price of a
// long file list), then the response to its 256 KiB (file contents first:
// they are bulk, the receipt is what the agent must see; then the
// receipt's parts again, then the file list). Cleanup status, status and
// run id are never cut.
func (t *trimmer) trim() {
	if t.rec != nil && !t.receiptFits() {
		t.cutLists(t.receiptFits, "the 64 KiB receipt limit")
		t.cutCapture(t.receiptFits, "the 64 KiB receipt limit")
		if !t.receiptFits() {
			t.toEssentials("the 64 KiB receipt limit")
		}
	}
	if !t.resultFits() {
		t.dropContents()
	}
	if t.rec != nil && !t.resultFits() {
		t.cutLists(t.resultFits, "the 256 KiB response limit")
		t.cutCapture(t.resultFits, "the 256 KiB response limit")
	}
	if !t.resultFits() {
		t.dropFileEntries()
	}
	if t.rec != nil && !t.resultFits() {
		t.toEssentials("the 256 KiB response limit")
	}
	if !t.fits() {
		t.undeliverable()
	}
}

// largest finds the largest k in [0, n] for which set(k) makes ok true,
// assuming that fewer kept makes it only more true, and leaves set(k)
// applied. It returns -1 (with set(0) applied) when even 0 does not do.
func largest(n int, set func(k int), ok func() bool) int {
	cut := sort.Search(n+1, func(c int) bool { set(n - c); return ok() })
	if cut > n {
		set(0)
		return -1
	}
	set(n - cut)
	return n - cut
}

// dropContents drops the content of the largest returned files until the
// response fits; they stay listed with size and sha256.
func (t *trimmer) dropContents() {
	var order []int // files with content, largest first
	for i, f := range t.ofile {
		if f.Content != nil {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(t.ofile[b].Bytes, t.ofile[a].Bytes) })
	set := func(kept int) {
		copy(t.files, t.ofile)
		for _, i := range order[:len(order)-kept] {
			t.files[i].Content, t.files[i].Encoding = nil, ""
			t.files[i].Omitted, t.files[i].Reason = true, "dropped to fit the 256 KiB response limit"
		}
	}
	kept := max(largest(len(order), set, t.resultFits), 0)
	t.note("content of %d returned files omitted to fit the 256 KiB response limit", len(order)-kept)
	t.ofile = slices.Clone(t.files)
}

// cutCapture cuts stdout and stderr to the same number of bytes, the
// most that fits.
func (t *trimmer) cutCapture(ok func() bool, limit string) {
	out, errs := t.orig.Capture.Stdout, t.orig.Capture.Stderr
	longest := max(len(out), len(errs))
	if longest == 0 {
		return
	}
	set := func(k int) {
		t.rec.Capture.Stdout, t.rec.Capture.Stderr = client.CutUTF8(out, k), client.CutUTF8(errs, k)
	}
	if largest(longest, set, ok) == longest {
		return
	}
	t.note("capture.stdout cut from %d to %d bytes and capture.stderr from %d to %d to fit %s",
		len(out), len(t.rec.Capture.Stdout), len(errs), len(t.rec.Capture.Stderr), limit)
	t.orig.Capture = t.rec.Capture
}

// cutLists shortens the receipt's lists of files, down to their first
// entries: first those of files that came (delivered, returned) and the
// input files, whose counts, bytes and digests stay (delivered_all sums
// up every delivered file); then the network's connections, counted on
// in its not_listed (its totals and refused count stay); only then those
// of files that did not come, counted on in not_listed and
// not_delivered_unlisted. What was not delivered, and why, is what the
// host learns from the receipt alone: it goes last.
func (t *trimmer) cutLists(ok func() bool, limit string) {
	if ok() {
		return
	}
	for _, l := range []struct {
		name string
		list *[]wire.FileDigest
		orig []wire.FileDigest
	}{
		{"output_files.delivered", &t.rec.Output.Delivered, t.orig.Output.Delivered},
		{"output_files.returned", &t.rec.Output.Returned, t.orig.Output.Returned},
		{"input_files", &t.rec.InputFiles, t.orig.InputFiles},
	} {
		if len(l.orig) == 0 || ok() {
			continue
		}
		largest(len(l.orig), func(k int) { *l.list = l.orig[:k] }, ok)
		all := ""
		if l.name == "output_files.delivered" && t.rec.Output.DeliveredAll != nil {
			all = " (delivered_all counts, sums and digests all of them)"
		}
		t.note("%s cut from %d to %d entries%s to fit %s", l.name, len(l.orig), len(*l.list), all, limit)
	}
	t.cutConnections(ok, limit)
	for _, l := range []struct {
		name, counted string
		list          *[]wire.NotReturned
		count         *int
		orig          []wire.NotReturned
		origCount     int
	}{
		{"output_files.not_returned", "not_listed", &t.rec.Output.NotReturned, &t.rec.Output.NotListed,
			t.orig.Output.NotReturned, t.orig.Output.NotListed},
		{"output_files.not_delivered", "not_delivered_unlisted", &t.rec.Output.NotDelivered, &t.rec.Output.NotDeliveredUnlisted,
			t.orig.Output.NotDelivered, t.orig.Output.NotDeliveredUnlisted},
	} {
		if len(l.orig) == 0 || ok() {
			continue
		}
		set := func(k int) { *l.list, *l.count = l.orig[:k], l.origCount+len(l.orig)-k }
		largest(len(l.orig), set, ok)
		t.note("%s cut from %d to %d entries (counted in %s) to fit %s", l.name, len(l.orig), len(*l.list), l.counted, limit)
	}
	t.orig = *t.rec
}

// cutConnections lists fewer of the network's connections, counting
// the rest in its not_listed.
func (t *trimmer) cutConnections(ok func() bool, limit string) {
	if t.orig.Network == nil || len(t.orig.Network.Connections) == 0 || ok() {
		return
	}
	orig, origCount := t.orig.Network.Connections, t.orig.Network.NotListed
	n := t.rec.Network // t.orig's too: the counts below are taken from orig and origCount
	set := func(k int) { n.Connections, n.NotListed = orig[:k], origCount+len(orig)-k }
	largest(len(orig), set, ok)
	t.note("network.connections cut from %d to %d entries (counted in not_listed) to fit %s", len(orig), len(n.Connections), limit)
}

// dropFileEntries lists fewer returned files.
func (t *trimmer) dropFileEntries() {
	if t.doc.Files == nil || len(t.ofile) == 0 {
		return
	}
	set := func(k int) { t.files = t.ofile[:k]; t.doc.Files = &t.files }
	largest(len(t.ofile), set, t.resultFits)
	t.note("files cut from %d to %d entries to fit the 256 KiB response limit", len(t.ofile), len(t.files))
}

// toEssentials replaces the receipt by what a result must always say.
func (t *trimmer) toEssentials(limit string) {
	t.doc.Execution = essentialsOf(t.rec, t.runID)
	t.rec = nil
	t.note("the receipt did not fit %s: only its run id, status, exit code and cleanup are given", limit)
}

// undeliverable is the last resort: an error that still carries the real
// cleanup status. Everything in it is bounded, so it always fits.
func (t *trimmer) undeliverable() {
	e := &essentials{RunID: client.Cut(t.runID, wire.MaxRunIDBytes), Cleanup: *wire.Unknown("the result held no cleanup status")}
	if prev, ok := t.doc.Execution.(*essentials); ok {
		e.Status, e.ExitCode = client.Cut(prev.Status, maxShortString), prev.ExitCode
		e.Cleanup = wire.Cleanup{Status: client.Cut(prev.Cleanup.Status, maxShortString), Detail: client.Cut(prev.Cleanup.Detail, 512)}
	} else if r, ok := t.doc.Execution.(*wire.Receipt); ok {
		e.Status, e.ExitCode = r.Status, r.ExitCode
		e.Cleanup = wire.Cleanup{Status: r.Cleanup.Status, Detail: client.Cut(r.Cleanup.Detail, 512)}
	}
	t.doc = document{
		SchemaVersion: ResultSchemaVersion,
		Error:         &callError{Code: codeUndeliverable, Message: "the result could not be made to fit the protocol's limits; the run's cleanup status is in execution.cleanup"},
		Execution:     e,
		Delivery:      delivery{Trimmed: true, What: []string{"everything but the run's essentials was dropped"}},
	}
	t.rec, t.files = nil, nil
}

// finish sets the delivery numbers. response_bytes describes the very
// result it is part of, so it is settled by iterating to a fixed point
// (its digits change the size by a byte or two at most).
func (t *trimmer) finish() *sdk.CallToolResult {
	var res *sdk.CallToolResult
	d := &t.doc.Delivery
	d.ResponseBytes = 0
	for range 5 {
		var n int
		res, d.ReceiptBytes, n = t.doc.encode()
		if n == d.ResponseBytes {
			break
		}
		d.ResponseBytes = n
	}
	return res
}

func essentialsOf(r *wire.Receipt, runID string) *essentials {
	if runID == "" {
		runID = r.RunID
	}
	return &essentials{
		RunID:    client.Cut(runID, wire.MaxRunIDBytes),
		Status:   r.Status,
		Reason:   client.Cut(r.Reason, 256),
		ExitCode: r.ExitCode,
		Cleanup:  wire.Cleanup{Status: r.Cleanup.Status, Detail: client.Cut(r.Cleanup.Detail, 512)},
	}
}

func cutError(e *callError) *callError {
	if e == nil {
		return &callError{Code: "internal", Message: "no result and no error: a bug in pybox mcp"}
	}
	return &callError{Code: client.Cut(e.Code, maxShortString), Message: client.Cut(e.Message, maxTextString)}
}

func cutCleanup(c wire.Cleanup) wire.Cleanup {
	if c.Status == "" {
		c = *wire.Unknown(cmp.Or(c.Detail, "the call's outcome gave no cleanup status"))
	}
	return wire.Cleanup{Status: client.Cut(c.Status, maxShortString), Detail: client.Cut(c.Detail, maxTextString)}
}
