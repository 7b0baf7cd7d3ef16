package mcptest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"pybox/shared/wire"
)

// The documented limits on a result (docs/limits.md).
const (
	maxReceiptBytes  = 64 << 10
	maxResponseBytes = 256 << 10
)

// runArgs are the arguments of a run: the program, and the longest
// timeout the server allows, for the most room on a slow host.
func (r *runner) runArgs(code string) map[string]any {
	return map[string]any{"code": code, "timeout_s": r.o.MaxTimeout}
}

// run makes a call on the shared session. With no result to judge, it
// says why as a failing verdict.
func (r *runner) run(ctx context.Context, want string, args map[string]any) (*toolResult, *verdict) {
	s, err := r.session(ctx)
	if err != nil {
		v := fail(want, "no session: "+err.Error(), hintStart)
		return nil, &v
	}
	o := r.call(ctx, s, args)
	if o.err != nil {
		hint := "see the server's stderr (-v shows it)"
		if errors.Is(o.err, context.DeadlineExceeded) && ctx.Err() == nil {
			// A server that never answers a call stays busy with it: the
			// checks after this one get a fresh server.
			s.close()
			hint = "the server never answered: a run must end at its timeout; `pybox vm status` and `pybox vm logs` say whether the VM is stuck"
		}
		v := fail(want, o.failure(), hint)
		return nil, &v
	}
	return o.res, nil
}

// runOK is run for a check that needs the program to have ended ok: a
// call that did not is the check's failure, with what to do about it.
func (r *runner) runOK(ctx context.Context, want string, args map[string]any) (*toolResult, *verdict) {
	res, v := r.run(ctx, want, args)
	if v == nil && !res.ok() {
		f := fail(want, res.summary(), hintFor(res, r.o))
		v = &f
	}
	return res, v
}

// defaultImage is the image a call that names none gets, as the server
// picks it: stdlib when allowed, else the first.
func (r *runner) defaultImage() string {
	for _, im := range r.o.Images {
		if im == "stdlib" {
			return im
		}
	}
	return r.o.Images[0]
}

func (r *runner) checkStdlibRun(ctx context.Context) verdict {
	want := fmt.Sprintf("a run in the default image (%s): status ok, cleanup REMOVED, what it printed as execution.capture.stdout, and the text content the same JSON as structuredContent", r.defaultImage())
	args := r.runArgs(helloProgram)
	res, v := r.run(ctx, want, args)
	if v != nil {
		return *v
	}
	r.hello = res
	switch {
	case !res.ok():
		return fail(want, res.summary(), hintFor(res, r.o))
	case res.Exec.Capture.Stdout != helloStdout():
		return fail(want, fmt.Sprintf("capture.stdout %q", cut(res.Exec.Capture.Stdout, 200)),
			"the output did not come back as data, whole: the server or the guest agent is out of step with this pybox; rebuild (`make`) and restart the VM")
	case !res.TextSame:
		return fail(want, "the text content is not the structuredContent JSON",
			"clients that read only the text would see another result: a bug in the server")
	}
	return pass("printed %d bytes, returned as capture.stdout; wall %d ms, image %s, agent %s",
		len(res.Exec.Capture.Stdout), res.Exec.WallMS, res.Exec.Image.Name, res.Exec.Agent.Version)
}

func (r *runner) checkMemoryFinal(context.Context) verdict {
	const want = `the stdlib run's execution.memory.reading "final" (memory.peak read after every process in the box was gone), with a peak above 0`
	res := r.hello
	switch {
	case res == nil || res.Exec.Status == "":
		return fail(want, "the stdlib run brought no receipt", "see stdlib-run")
	case res.Exec.Memory.Reading != "final":
		return fail(want, fmt.Sprintf("reading %q, peak %d bytes", res.Exec.Memory.Reading, res.Exec.Memory.PeakBytes),
			"the guest agent predates final readings, so the peak may be low: rebuild the initramfs (`make guest`) and restart the VM")
	case res.Exec.Memory.PeakBytes <= 0:
		return fail(want, fmt.Sprintf("peak %d bytes", res.Exec.Memory.PeakBytes), "the guest could not read memory.peak: `pybox vm logs` may say why")
	}
	return pass("peak %.1f MiB of %d MiB, final", float64(res.Exec.Memory.PeakBytes)/(1<<20), res.Exec.Memory.LimitBytes>>20)
}

var digestRE = regexp.MustCompile(`^(sha256:)?[0-9a-f]{64}$`)

// checkImage runs a program in one image. The default image's check uses
// the stdlib run when it worked.
func (r *runner) checkImage(name string) func(context.Context) verdict {
	return func(ctx context.Context) verdict {
		want := fmt.Sprintf("a run in image %s reports image %s with its sha256 digest (64 hex digits)", name, name)
		res, what := r.hello, "the stdlib run"
		if name != r.defaultImage() || res == nil || !res.ok() {
			args := r.runArgs(imageProgram)
			args["image"] = name
			var v *verdict
			if res, v = r.run(ctx, want, args); v != nil {
				return *v
			}
			what = "Python " + strings.TrimSpace(res.Exec.Capture.Stdout)
		}
		im := res.Exec.Image
		switch {
		case !res.ok():
			return fail(want, res.summary(), hintFor(res, r.o))
		case im.Name != name:
			return fail(want, fmt.Sprintf("image %q", im.Name), "the server ran the program in another image than asked: a bug in the server")
		case !digestRE.MatchString(im.Digest):
			return fail(want, fmt.Sprintf("digest %q", im.Digest),
				"the guest did not report the digest it verified: the guest agent is out of step with this pybox; rebuild (`make`) and restart the VM")
		}
		return pass("%s %s (%s)", name, shortDigest(im.Digest), what)
	}
}

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	return "sha256:" + d[:min(12, len(d))]
}

func (r *runner) checkFiles(ctx context.Context) verdict {
	const want = "two input files (text, and binary as base64) reach /tmp/input intact, and the two files the program writes come back with sizes and sha256 that match their content"
	in := newInputFiles()
	args := r.runArgs(filesProgram)
	args["files"], args["return_files"] = in.args(), true
	res, v := r.runOK(ctx, want, args)
	if v != nil {
		return *v
	}
	const corrupt = "files were changed on the way: the server or the guest agent is out of step with this pybox; rebuild (`make`) and restart the VM"
	if got := res.Exec.Capture.Stdout; got != in.stdout() {
		return fail(want, fmt.Sprintf("the box saw %q, not %q", cut(got, 200), in.stdout()), corrupt)
	}
	if p := inputDigestProblems(res.Exec.InputFiles, in.byName()); p != "" {
		return fail(want, p, corrupt)
	}
	if p := outputProblems(res, in.outputs()); p != "" {
		return fail(want, p, corrupt)
	}
	total := 0
	for _, b := range in.byName() {
		total += len(b)
	}
	return pass("2 files in (%d bytes), 2 back (text as utf-8, binary as base64); sizes and sha256 match", total)
}

// checkChart makes a PNG in the data image (or, where data is not
// allowed, the default image) and expects it back twice: as a file whose
// sha256 is what the program printed, and as an image block of the same
// bytes.
func (r *runner) checkChart(ctx context.Context) verdict {
	args, made := r.runArgs(chartProgramStdlib), "with Python's zlib in "+r.defaultImage()
	if slices.Contains(r.o.Images, "data") {
		args, made = r.runArgs(chartProgramData), "with Pillow in data"
		args["image"] = "data"
	}
	want := "a PNG made " + made + " comes back as the file chart.png, with the sha256 the program printed, and as an image block (image/png) with the same bytes"
	args["return_files"] = true
	res, v := r.runOK(ctx, want, args)
	if v != nil {
		return *v
	}
	printed := strings.TrimSpace(res.Exec.Capture.Stdout)
	png, problem := chartFile(res, printed)
	if problem != "" {
		return fail(want, problem, "files were changed on the way: the server or the guest agent is out of step with this pybox; rebuild (`make`) and restart the VM")
	}
	const noImage = "the agent would not see the chart: a pybox older than image content, or a bug; rebuild (`make`)"
	switch {
	case len(res.Images) != 1 || res.Others != 0:
		return fail(want, fmt.Sprintf("%d image blocks and %d other blocks after the text; delivery %q", len(res.Images), res.Others, res.Doc.Delivery.What), noImage)
	case res.Images[0].MIMEType != "image/png" || !bytes.Equal(res.Images[0].Data, png):
		return fail(want, fmt.Sprintf("an image block of %d bytes, %s, sha256 %s", len(res.Images[0].Data), res.Images[0].MIMEType, sha256Hex(res.Images[0].Data)),
			"the image is not the file: a bug in the server")
	}
	return pass("chart.png (%d bytes, made %s) came back as a file and as an image/png block, sha256 %s", len(png), made, printed[:12])
}

// chartFile finds chart.png among a result's files and checks it against
// the sha256 the program printed.
func chartFile(res *toolResult, printed string) ([]byte, string) {
	if res.Doc.Files == nil || len(*res.Doc.Files) != 1 || (*res.Doc.Files)[0].Name != "chart.png" {
		return nil, fmt.Sprintf("files %v, not chart.png alone", res.Doc.Files)
	}
	f := (*res.Doc.Files)[0]
	if f.Omitted || f.Content == nil || f.Encoding != "base64" {
		return nil, fmt.Sprintf("chart.png came as %q, omitted %v", f.Encoding, f.Omitted)
	}
	png, err := base64.StdEncoding.Strict().DecodeString(*f.Content)
	switch {
	case err != nil:
		return nil, "chart.png's base64 does not decode: " + err.Error()
	case sha256Hex(png) != printed || f.SHA256 != printed:
		return nil, fmt.Sprintf("the program printed sha256 %q; chart.png says %s and its content's is %s", cut(printed, 64), cut(f.SHA256, 64), sha256Hex(png))
	}
	return png, ""
}

// inputDigestProblems compares the receipt's input_files with what was sent.
func inputDigestProblems(listed []wire.FileDigest, sent map[string][]byte) string {
	if len(listed) != len(sent) {
		return fmt.Sprintf("the receipt lists %d input files, not %d", len(listed), len(sent))
	}
	for _, f := range listed {
		b, ok := sent[f.Name]
		if !ok || f.Bytes != int64(len(b)) || f.SHA256 != sha256Hex(b) {
			return fmt.Sprintf("the receipt lists input %q as %d bytes sha256 %s", f.Name, f.Bytes, cut(f.SHA256, 64))
		}
	}
	return ""
}

// outputProblems checks each returned file against its content and
// against what the program must have written.
func outputProblems(res *toolResult, want map[string][]byte) string {
	if res.Doc.Files == nil {
		return "no files in the result"
	}
	got := map[string]bool{}
	for _, f := range *res.Doc.Files {
		exp, ok := want[f.Name]
		if !ok {
			return fmt.Sprintf("an unexpected file %q came back", f.Name)
		}
		got[f.Name] = true
		if f.Omitted || f.Content == nil {
			return fmt.Sprintf("%s was omitted", f.Name)
		}
		var content []byte
		switch f.Encoding {
		case "utf-8":
			content = []byte(*f.Content)
		case "base64":
			var err error
			if content, err = base64.StdEncoding.Strict().DecodeString(*f.Content); err != nil {
				return fmt.Sprintf("%s: its base64 does not decode: %v", f.Name, err)
			}
		default:
			return fmt.Sprintf("%s came with encoding %q", f.Name, f.Encoding)
		}
		switch {
		case f.Bytes != int64(len(content)):
			return fmt.Sprintf("%s says %d bytes; its content has %d", f.Name, f.Bytes, len(content))
		case f.SHA256 != sha256Hex(content):
			return fmt.Sprintf("%s says sha256 %s; its content's is %s", f.Name, cut(f.SHA256, 64), sha256Hex(content))
		case !bytes.Equal(content, exp):
			return fmt.Sprintf("%s holds %d bytes that are not what the program wrote", f.Name, len(content))
		}
	}
	for n := range want {
		if !got[n] {
			return fmt.Sprintf("%s did not come back", n)
		}
	}
	return ""
}

func (r *runner) checkOutputIsData(ctx context.Context) verdict {
	const want = "a program that prints a JSON-RPC response with id 999 and a notification: both only inside execution.capture.stdout, and no message with id 999 on the wire"
	const hint = "the program's output reached the protocol stream: do not connect this server to an agent; this is a serious bug, report it"
	res, v := r.run(ctx, want, r.runArgs(forgeProgram))
	if v != nil {
		return *v
	}
	s := r.main
	// A ping and its answer: anything the run wrote is on the wire by then.
	pctx, cancel := context.WithTimeout(ctx, r.o.Patience)
	s.cs.Ping(pctx, nil)
	cancel()
	for _, m := range s.tap.snapshot().got {
		switch line := string(m.Line); {
		case m.ID == "999":
			return fail(want, "a message with id 999 reached the client: "+cut(line, 160), hint)
		case line == forgedResponse || line == forgedNotification:
			return fail(want, "the forged line reached the wire: "+cut(line, 160), hint)
		}
	}
	switch {
	case !res.ok():
		return fail(want, res.summary(), hintFor(res, r.o))
	case res.Exec.Capture.Stdout != forgedOutput:
		return fail(want, fmt.Sprintf("capture.stdout %q", cut(res.Exec.Capture.Stdout, 200)),
			"the output did not come back whole, as data: a bug in the server or the guest agent")
	}
	return pass("the forged response and notification came back only as capture.stdout (%d bytes); no id 999 on the wire",
		len(res.Exec.Capture.Stdout))
}

func (r *runner) checkTimeout(ctx context.Context) verdict {
	t := min(1, r.o.MaxTimeout)
	want := fmt.Sprintf("a program that sleeps past timeout_s %v ends with status timeout and cleanup REMOVED (isError true)", t)
	args := map[string]any{"code": sleepProgram("timeout"), "timeout_s": t}
	res, v := r.run(ctx, want, args)
	if v != nil {
		return *v
	}
	switch {
	case res.Exec.Status != wire.StatusTimeout:
		return fail(want, res.summary(), hintFor(res, r.o))
	case res.Exec.Cleanup.Status != wire.CleanupRemoved:
		return fail(want, res.summary(),
			"the box outlived its program: the guest could not remove it; `pybox vm logs` says why; restart the VM (`pybox vm stop`, `pybox vm start`)")
	case !res.IsError:
		return fail(want, "status timeout but isError false", "an agent would take the run for a success: a bug in the server")
	}
	return pass("killed at %v s (wall %d ms), cleanup REMOVED", t, res.Exec.WallMS)
}

func (r *runner) checkTrimmed(ctx context.Context) verdict {
	want := fmt.Sprintf("a result over the limits (8 KiB of \\x01 on each stream, 48 KiB of files) is trimmed to fit (execution ≤ %d KiB, response ≤ %d KiB) and delivery says trimmed, and what", maxReceiptBytes>>10, maxResponseBytes>>10)
	args := r.runArgs(trimProgram)
	args["max_output_bytes"], args["return_files"] = maxOutputBytes, true
	res, v := r.run(ctx, want, args)
	if v != nil {
		return *v
	}
	snap := r.main.tap.snapshot()
	line, _ := snap.response(snap.requestID(marker + "trim"))
	const hint = "the server does not say when it cut the result: an agent cannot tell a short output from a trimmed one; a bug in the server"
	switch {
	case res.Exec.Cleanup.Status == "":
		return fail(want, "no cleanup status in the trimmed result", "trimming must never drop the cleanup status: a bug in the server")
	case !res.ok():
		return fail(want, res.summary(), hintFor(res, r.o))
	case line.Bytes > maxResponseBytes:
		return fail(want, fmt.Sprintf("a response of %d bytes", line.Bytes), "the server sent more than a client may accept: a bug in the server")
	case len(res.Doc.Execution) > maxReceiptBytes:
		return fail(want, fmt.Sprintf("an execution of %d bytes", len(res.Doc.Execution)), "the server sent more receipt than the documented 64 KiB: a bug in the server")
	case res.Doc.Delivery == nil:
		return fail(want, "no delivery in the result: "+trimEvidence(res), hint)
	case !res.Doc.Delivery.Trimmed || len(res.Doc.Delivery.What) == 0:
		return fail(want, fmt.Sprintf("delivery.trimmed %v, what %q: %s", res.Doc.Delivery.Trimmed, res.Doc.Delivery.What, trimEvidence(res)), hint)
	}
	return pass("response %d bytes; delivery: %s", line.Bytes, cut(strings.Join(res.Doc.Delivery.What, "; "), 300))
}

// trimEvidence says what in a result shows it was cut.
func trimEvidence(res *toolResult) string {
	c := res.Exec.Capture
	omitted := 0
	if res.Doc.Files != nil {
		for _, f := range *res.Doc.Files {
			if f.Omitted {
				omitted++
			}
		}
	}
	return fmt.Sprintf("yet capture.stdout holds %d of the %d bytes kept, and %d files came without content", len(c.Stdout), c.StdoutInfo.KeptBytes, omitted)
}

// hintFor says what to do about a run that did not work, from what the
// result says.
func hintFor(res *toolResult, o Options) string {
	images := strings.Join(o.Images, ",")
	if res.Doc.Error != nil {
		switch res.Doc.Error.Code {
		case wire.ErrNoVM:
			return "start the VM: `pybox vm start --images " + images + "` (the server never starts it)"
		case wire.ErrNoImage:
			return "the VM lacks an image the server allows: `pybox vm stop`, then `pybox vm start --images " + images + "` (`pybox image list` shows what is built; `pybox image build NAME` builds one)"
		case wire.ErrUnhealthy:
			return "the guest could not clean up a box and refuses runs: `pybox vm logs` says why; restart the VM (`pybox vm stop`, `pybox vm start`)"
		case wire.ErrBusy:
			return "the server is running another of its calls (one at a time per server): let it finish, and check again"
		case wire.ErrNoMemory:
			return "the VM's memory is held by other agents' runs: let them finish, or restart the VM sized for more (`pybox vm start --runs N`)"
		case "invalid_arguments":
			return "the server refused a call that keeps to the ceilings this check was given, so its options differ: give `pybox check` the same --images and --max-timeout as the server"
		case "vm_lost":
			return "contact with the VM was lost mid-run: `pybox vm status` and `pybox vm logs` say more"
		}
	}
	switch {
	case res.Exec.Cleanup.Status == wire.CleanupFailed || res.Exec.Cleanup.Status == wire.CleanupUnknown:
		return "the box was not confirmed removed: `pybox vm logs` says why; restart the VM (`pybox vm stop`, `pybox vm start`)"
	case res.Exec.Status == wire.StatusTimeout:
		return "the program did not finish in time: under TCG the first run in an image is slow; check again, or with a larger --max-timeout (for the server too)"
	case res.Exec.Status == wire.StatusRefused:
		return "the box was not fit to run (its reason says why): the guest agent and kernel are out of step with this pybox; rebuild (`make`) and restart the VM"
	case res.Exec.Status == wire.StatusError || res.Exec.Status == wire.StatusOOM:
		return "the program failed in the image: the image may be damaged or incomplete; rebuild it (`pybox image build NAME`) and restart the VM"
	}
	return "see the server's stderr (-v shows it)"
}
