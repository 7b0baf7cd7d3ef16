package mcptest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options say which server to check and what it should show.
type Options struct {
	// Server is the command that serves MCP on stdin and stdout.
	Server []string
	// Env is its environment; nil means this process's.
	Env []string
	// Images and MaxTimeout are the ceilings the server was given: the
	// checks expect its schema to show exactly these, and run one
	// program in each image.
	Images     []string
	MaxTimeout float64
	// Data and OutputDir are the server's --data and --output-dir: the
	// checks expect the schema to offer exactly these data folders, each
	// visible read-only, and a file the program writes to land in the
	// output folder.
	Data      []string
	OutputDir string
	// VMDown adds the check of a server with no VM: the same command
	// with PYBOX_HOME set to an empty directory.
	VMDown bool
	// Patience bounds the wait for what should happen at once: a busy
	// refusal, the end of a session, a server starting. Default 10 s.
	Patience time.Duration
	// RunSlack is added to a run's timeout to bound one call. Default 60 s
	// (a cold image under TCG is slow).
	RunSlack time.Duration
	// Logf, when set, gets the server's stderr and what each check does.
	Logf func(format string, args ...any)
}

// Result is one check's verdict.
type Result struct {
	Name     string `json:"name"`
	Pass     bool   `json:"pass"`
	Detail   string `json:"detail,omitempty"` // what was seen, when it passed
	Expected string `json:"expected,omitempty"`
	Got      string `json:"got,omitempty"`
	Hint     string `json:"hint,omitempty"`
	MS       int64  `json:"ms"`
}

// verdict is what a check function returns; Run adds the name and time.
type verdict struct {
	pass                        bool
	detail, expected, got, hint string
}

func pass(format string, a ...any) verdict {
	return verdict{pass: true, detail: fmt.Sprintf(format, a...)}
}

func fail(expected, got, hint string) verdict {
	return verdict{expected: expected, got: got, hint: hint}
}

// step is one named check.
type step struct {
	name string
	run  func(context.Context) verdict
}

// Run runs every check in order, handing each result to report as it
// comes, and returns how many passed and failed.
func Run(ctx context.Context, o Options, report func(Result)) (passed, failed int) {
	r := newRunner(o)
	defer r.closeAll()
	for _, s := range r.plan() {
		t0 := time.Now()
		r.logf("check %s", s.name)
		v := s.run(ctx)
		res := Result{Name: s.name, Pass: v.pass, Detail: v.detail, Expected: v.expected, Got: v.got, Hint: v.hint,
			MS: time.Since(t0).Milliseconds()}
		if v.pass {
			passed++
		} else {
			failed++
		}
		report(res)
	}
	return passed, failed
}

// plan lists the checks in the order they run. They share the session
// at the newest revision (and the stdlib run) where they can; the order
// keeps the busy and cancel checks together, since they share one long
// run.
func (r *runner) plan() []step {
	steps := []step{
		{"discover", r.checkDiscover},
		{"initialize", r.checkInitialize},
		{"tools-list", r.checkToolsList},
		{"stdlib-run", r.checkStdlibRun},
		{"memory-final", r.checkMemoryFinal},
	}
	for _, im := range r.o.Images {
		steps = append(steps, step{"image:" + im, r.checkImage(im)})
	}
	for _, d := range r.o.Data {
		steps = append(steps, step{"data:" + d, r.checkData(d)})
	}
	if r.o.OutputDir != "" {
		steps = append(steps, step{"output-dir", r.checkOutputDir})
	}
	steps = append(steps,
		step{"fresh", r.checkFresh},
		step{"files", r.checkFiles},
		step{"chart", r.checkChart},
		step{"unknown-argument", r.checkUnknownArgument},
		step{"timeout-ceiling", r.checkTimeoutCeiling},
		step{"output-is-data", r.checkOutputIsData},
		step{"busy", r.checkBusy},
		step{"cancel", r.checkCancel},
		step{"timeout", r.checkTimeout},
		step{"trimmed", r.checkTrimmed},
		step{"oversize-message", r.checkOversize},
	)
	if r.o.VMDown {
		steps = append(steps, step{"vm-down", r.checkVMDown})
	}
	// Last: it judges every line every server wrote.
	return append(steps, step{"stdout-protocol-only", r.checkStdoutProtocolOnly})
}

// runner holds what the checks share.
type runner struct {
	o        Options
	main     *server              // the shared session, at newestProtocol
	startErr error                // why the shared session could not start
	restarts int                  // sessions started after the first died
	servers  []*server            // every server started, for the stdout check
	tools    *mcp.ListToolsResult // the shared session's tool list, once read
	hello    *toolResult          // the stdlib run, which memory-final and an image check read too
	long     *pendingCall         // the long run busy starts and cancel cancels
}

func newRunner(o Options) *runner {
	if o.Patience == 0 {
		o.Patience = 10 * time.Second
	}
	if o.RunSlack == 0 {
		o.RunSlack = 60 * time.Second
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	return &runner{o: o}
}

func (r *runner) logf(format string, a ...any) {
	if r.o.Logf != nil {
		r.o.Logf(format, a...)
	}
}

// maxRestarts bounds how often a server that keeps dying is restarted.
const maxRestarts = 3

// session returns the shared session, starting a server when there is
// none or the last one died (so that one crash fails one check).
func (r *runner) session(ctx context.Context) (*server, error) {
	if r.main != nil && r.main.alive() {
		return r.main, nil
	}
	if r.startErr != nil {
		return nil, errNotStarted
	}
	if r.main != nil {
		if r.restarts == maxRestarts {
			r.startErr = fmt.Errorf("the server died %d times; no more restarts", maxRestarts+1)
			return nil, r.startErr
		}
		r.restarts++
		r.logf("the server's session ended (%s); starting another", r.main.lastWords())
	}
	s, err := r.start(ctx, r.o.Env, newestProtocol)
	r.main = s
	if err != nil {
		r.startErr = err
		return nil, err
	}
	return s, nil
}

var errNotStarted = errors.New("the server did not start (see discover)")

// start starts one server process and its session at MCP revision
// protocol. Once the shared session could not start, no other server is
// tried.
func (r *runner) start(ctx context.Context, env []string, protocol string) (*server, error) {
	if r.startErr != nil {
		return nil, errNotStarted
	}
	r.logf("starting %s (MCP %s)", strings.Join(r.o.Server, " "), protocol)
	s, err := startServer(ctx, r.o.Server, env, protocol, r.o.Patience, r.o.Logf)
	r.servers = append(r.servers, s)
	if err != nil {
		return s, fmt.Errorf("%v; its stderr: %s", err, s.lastWords())
	}
	return s, nil
}

func (r *runner) closeAll() {
	if r.long != nil {
		r.long.cancel()
	}
	for _, s := range r.servers {
		s.close()
	}
}

// callOutcome is what one tools/call came to.
type callOutcome struct {
	res  *toolResult
	err  error // a JSON-RPC error, a transport error, or an unreadable result
	took time.Duration
}

// call makes one tools/call, bounded by the run's timeout plus RunSlack.
func (r *runner) call(ctx context.Context, s *server, args map[string]any) callOutcome {
	timeout := r.o.MaxTimeout
	if t, ok := args["timeout_s"].(float64); ok {
		timeout = t
	}
	ctx, cancel := context.WithTimeout(ctx, seconds(timeout)+r.o.RunSlack)
	defer cancel()
	return r.callCtx(ctx, s, args)
}

func (r *runner) callCtx(ctx context.Context, s *server, args map[string]any) callOutcome {
	t0 := time.Now()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: toolName, Arguments: args})
	o := callOutcome{took: time.Since(t0), err: err}
	if err == nil {
		o.res, o.err = decodeResult(res)
	}
	return o
}

// failure describes a call that brought no readable result.
func (o callOutcome) failure() string {
	if errors.Is(o.err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer after %.1f s", o.took.Seconds())
	}
	if o.err != nil {
		return fmt.Sprintf("the call failed after %.1f s: %v", o.took.Seconds(), o.err)
	}
	return ""
}

// pendingCall is a call running in the background.
type pendingCall struct {
	name   string // the program's name, after the marker
	server *server
	cancel context.CancelFunc
	done   chan callOutcome
	sentAt time.Time
}

func (r *runner) callAsync(ctx context.Context, s *server, name string, args map[string]any) *pendingCall {
	ctx, cancel := context.WithCancel(ctx)
	p := &pendingCall{name: name, server: s, cancel: cancel, done: make(chan callOutcome, 1), sentAt: time.Now()}
	go func() { p.done <- r.call(ctx, s, args) }()
	return p
}

// finished returns the call's outcome if it has come.
func (p *pendingCall) finished() (callOutcome, bool) {
	select {
	case o := <-p.done:
		p.done <- o
		return o, true
	default:
		return callOutcome{}, false
	}
}
