package mcptest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"pybox/shared/wire"
)

const hintNoChecks = "the server ran a call it should have refused: it does not check calls in code; do not connect it to an agent until this is fixed"

// refusal judges a call that must be refused before anything runs, with
// a message that names what was wrong (so that the agent can fix it).
func (r *runner) refusal(ctx context.Context, want, names string, args map[string]any) verdict {
	res, v := r.run(ctx, want, args)
	if v != nil {
		return *v
	}
	switch {
	case res.ran():
		return fail(want, "it ran: "+res.summary(), hintNoChecks)
	case !res.refusedUnrun():
		return fail(want, res.summary(), "a refusal is a tool result with isError, an error and cleanup NOT_ATTEMPTED: a bug in the server")
	case !strings.Contains(res.Doc.Error.Message, names):
		return fail(want, res.summary(), hintFor(res, r.o))
	}
	return pass("refused (%s): %s", res.Doc.Error.Code, cut(res.Doc.Error.Message, 160))
}

func (r *runner) checkUnknownArgument(ctx context.Context) verdict {
	const want = `a call with an unknown argument ("shell": true) is refused, naming it, and nothing runs (cleanup NOT_ATTEMPTED)`
	return r.refusal(ctx, want, "shell", map[string]any{"code": notRunProgram("unknown-argument"), "shell": true})
}

func (r *runner) checkTimeoutCeiling(ctx context.Context) verdict {
	over := r.o.MaxTimeout + 1
	want := fmt.Sprintf("a call with timeout_s %v, above the ceiling %v, is refused, naming timeout_s, and nothing runs (cleanup NOT_ATTEMPTED)", over, r.o.MaxTimeout)
	return r.refusal(ctx, want, "timeout_s", map[string]any{"code": notRunProgram("timeout-ceiling"), "timeout_s": over})
}

// longCall starts a program that runs until its timeout (the longest
// allowed) or until it is cancelled.
func (r *runner) longCall(ctx context.Context, s *server, name string) *pendingCall {
	args := map[string]any{"code": sleepProgram(name), "timeout_s": r.o.MaxTimeout}
	return r.callAsync(ctx, s, name, args)
}

// awaitSent waits until the tap has seen the call's request go out, and
// returns its id.
func (r *runner) awaitSent(s *server, p *pendingCall) string {
	snap, _ := s.tap.waitFor(r.o.Patience, func(sn snapshot) bool { return sn.requestID(marker+p.name) != "" })
	return snap.requestID(marker + p.name)
}

func (r *runner) checkBusy(ctx context.Context) verdict {
	const want = `while a call runs, a second call is refused at once as busy, and nothing runs or waits (cleanup NOT_ATTEMPTED)`
	s, err := r.session(ctx)
	if err != nil {
		return fail(want, "no session: "+err.Error(), hintStart)
	}
	first := r.longCall(ctx, s, "busy-first")
	r.long = first // the cancel check cancels it
	if r.awaitSent(s, first) == "" {
		return fail(want, "the first call was never sent", "see the server's stderr (-v shows it)")
	}
	// The server takes the call as it reads it; give it a moment to.
	time.Sleep(min(300*time.Millisecond, seconds(r.o.MaxTimeout)/4))
	sctx, cancel := context.WithTimeout(ctx, r.o.Patience)
	defer cancel()
	second := r.callCtx(sctx, s, map[string]any{"code": notRunProgram("busy-second"), "timeout_s": r.o.MaxTimeout})
	if o, done := first.finished(); done {
		return endedEarly(want, "the first call", "before the second was answered", o, r.o)
	}
	switch res := second.res; {
	case second.err != nil:
		return fail(want, second.failure(), "a server that makes a second call wait instead of refusing it queues calls: a bug in the server")
	case res.ran():
		return fail(want, fmt.Sprintf("the second call ran too (%s) after %.1f s", res.summary(), second.took.Seconds()),
			"the server runs calls at once or queues them: one VM runs one program at a time; a bug in the server")
	case !res.refusedUnrun() || (res.Doc.Error.Code != wire.ErrBusy && !strings.Contains(res.Doc.Error.Message, "busy")):
		return fail(want, res.summary(), hintFor(res, r.o))
	}
	return pass("the second call was refused as busy after %d ms", second.took.Milliseconds())
}

// cleanupReport is the server's stderr line on a cancelled run's cleanup.
var cleanupReport = regexp.MustCompile(`(?i)cancel.*cleanup ([A-Z_]+)`)

func (r *runner) checkCancel(ctx context.Context) verdict {
	const want = "a cancelled call gets no response; the server reports on stderr that its box was REMOVED, and the next call runs"
	s, err := r.session(ctx)
	if err != nil {
		return fail(want, "no session: "+err.Error(), hintStart)
	}
	long := r.long
	if long == nil || long.server != s {
		long = r.longCall(ctx, s, "cancel")
		r.long = long
	}
	id := r.awaitSent(s, long)
	// Cancel once the program has had time to start, well before its timeout.
	time.Sleep(time.Until(long.sentAt.Add(min(time.Second, seconds(r.o.MaxTimeout)/2))))
	if o, done := long.finished(); done {
		return endedEarly(want, "the call", "before it could be cancelled", o, r.o)
	}
	cancelledAt := time.Now()
	long.cancel()
	r.long = nil
	report, reported := s.stderr.waitLine(cancelledAt, cleanupReport, r.o.Patience+seconds(r.o.MaxTimeout))
	next, v := r.nextRun(ctx, want)
	if m, answered := s.tap.snapshot().response(id); answered {
		return fail(want, fmt.Sprintf("a response to the cancelled call %s came %.1f s after the cancellation", id, m.At.Sub(cancelledAt).Seconds()),
			"the protocol says a cancelled request gets no response: a bug in the server")
	}
	if !reported {
		return fail(want, "nothing on the server's stderr about the cancelled run's cleanup",
			"the server must report a cancelled run's cleanup on stderr, since the call gets no response: a bug in the server (or --server names one that does not)")
	}
	if st := cleanupReport.FindStringSubmatch(report)[1]; st != wire.CleanupRemoved {
		return fail(want, "the server reported: "+cut(report, 200),
			"the cancelled program's box was left behind: `pybox vm logs` says why; restart the VM (`pybox vm stop`, `pybox vm start`)")
	}
	switch {
	case v != nil:
		return *v
	case !next.ok():
		return fail(want, "the next call: "+next.summary(), hintFor(next, r.o))
	}
	return pass("no response; the server said %q; the next call ran", cut(strings.TrimSpace(report), 160))
}

// endedEarly judges a long call that ended before the check was done
// with it: a run that timed out was too short; anything else says why.
func endedEarly(want, what, when string, o callOutcome, opts Options) verdict {
	got := fmt.Sprintf("%s ended after %.1f s, %s", what, o.took.Seconds(), when)
	switch {
	case o.err != nil:
		return fail(want, got+": "+o.err.Error(), "see the server's stderr (-v shows it)")
	case o.res.Exec.Status == wire.StatusTimeout:
		return fail(want, got+": it timed out", "the call must outlast the check: give a --max-timeout of at least 2 s (for the server too)")
	}
	return fail(want, got+": "+o.res.summary(), hintFor(o.res, opts))
}

// nextRun is the run after a cancelled one. The server may still be
// finishing the cancelled call (its cleanup reported, its slot not yet
// free) for a moment: a busy answer is tried again within patience.
func (r *runner) nextRun(ctx context.Context, want string) (*toolResult, *verdict) {
	deadline := time.Now().Add(r.o.Patience)
	for {
		res, v := r.run(ctx, want, r.runArgs(program("after-cancel", "print('after cancel')\n")))
		if v != nil || res.Doc.Error == nil || res.Doc.Error.Code != wire.ErrBusy || time.Now().After(deadline) {
			return res, v
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// oversizeLine is a tools/call of 600 KiB, over the 512 KiB a message may be.
func oversizeLine() []byte {
	code := marker + "oversize\n#" + strings.Repeat("x", 600<<10) + "\n"
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":"pybox-check-oversize","method":"tools/call","params":{"name":%q,"arguments":{"code":%s}}}`,
		toolName, pyString(code))
}

func (r *runner) checkOversize(ctx context.Context) verdict {
	const want = "a 600 KiB message to a fresh server is refused with a JSON-RPC error, before it is decoded, and the session ends cleanly (stdout closed, the server exits)"
	s, err := r.start(ctx, r.o.Env, newestProtocol)
	if err != nil {
		return fail(want, "no session: "+err.Error(), hintStart)
	}
	defer s.close()
	sentAt := time.Now()
	// The server may stop reading mid-line: the write then fails or
	// blocks until it exits, so it is not waited for.
	go s.in.raw(oversizeLine())
	refused := func(m seen) bool {
		return m.Response && !m.At.Before(sentAt) && (m.IsError || m.ID == `"pybox-check-oversize"`)
	}
	// The session must end; until it does (or patience runs out), wait.
	snap, _ := s.tap.waitFor(r.o.Patience, func(sn snapshot) bool { return sn.eof })
	var answer *seen
	for _, m := range snap.got {
		if refused(m) {
			answer = &m
			break
		}
	}
	const hint = "the server reads messages of any size: a client (or anything on its stdin) can make it hold them in memory; a bug in the server"
	switch {
	case answer == nil && !snap.eof:
		return fail(want, fmt.Sprintf("no answer in %v, and the session went on", r.o.Patience), hint)
	case answer == nil:
		return fail(want, "the server closed stdout without an error response", "the client cannot tell why the session ended: a bug in the server")
	case !answer.IsError:
		return fail(want, "the server decoded and answered it as a call: "+cut(string(answer.Line), 160), hint)
	case !snap.eof:
		return fail(want, fmt.Sprintf("refused (%q), but the session went on", cut(answer.ErrorMsg, 120)), hint)
	}
	st, exited := s.waitExit(r.o.Patience)
	if !exited {
		return fail(want, fmt.Sprintf("refused and stdout closed, but the server had not exited after %v", r.o.Patience),
			"the server hangs on a session's end: a bug in the server")
	}
	if !st.Exited() {
		return fail(want, "the server ended by "+st.String(), "the server crashed on a large message: a bug in the server")
	}
	return pass("refused with %q; stdout closed; the server exited with status %d", cut(answer.ErrorMsg, 120), st.ExitCode())
}

func (r *runner) checkVMDown(ctx context.Context) verdict {
	const want = "with no VM (an empty PYBOX_HOME), tools/list still works and a call returns isError with cleanup NOT_ATTEMPTED and the command that starts the VM"
	home, err := os.MkdirTemp("", "pybox-check-novm")
	if err != nil {
		return fail(want, err.Error(), "the temporary directory is not writable: set TMPDIR")
	}
	defer os.RemoveAll(home)
	s, err := r.start(ctx, withEnv(r.o.Env, "PYBOX_HOME", home), newestProtocol)
	if err != nil {
		return fail(want, "no session: "+err.Error(), hintStart)
	}
	defer s.close()
	lctx, cancel := context.WithTimeout(ctx, r.o.Patience)
	defer cancel()
	if list, err := s.cs.ListTools(lctx, nil); err != nil || len(list.Tools) != 1 {
		return fail(want, fmt.Sprintf("tools/list: %v", err), "the server must list its tool without a VM: a bug in the server")
	}
	o := r.call(ctx, s, map[string]any{"code": notRunProgram("vm-down"), "timeout_s": r.o.MaxTimeout})
	switch res := o.res; {
	case o.err != nil:
		return fail(want, o.failure(), "see the server's stderr (-v shows it)")
	case res.ran():
		return fail(want, "it ran: "+res.summary(),
			"with no VM the server must refuse, never run code elsewhere: do not use this server; a serious bug")
	case !res.refusedUnrun() || !strings.Contains(res.Doc.Error.Message, "pybox vm start"):
		return fail(want, res.summary(), "the error must tell the agent how to start the VM: a bug in the server")
	}
	return pass("refused (%s): %s", o.res.Doc.Error.Code, cut(o.res.Doc.Error.Message, 160))
}

// withEnv returns env with key set to value.
func withEnv(env []string, key, value string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
