package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"pybox/host/client"
	"pybox/host/egress"
	"pybox/host/escape"
	"pybox/host/mcp"
	"pybox/host/outdir"
	"pybox/shared/wire"
)

func init() {
	register(&command{name: "run", summary: "run one Python program in a fresh sealed box", run: runMain})
}

// inputFiles collects --file flags.
type inputFiles []string

func (f *inputFiles) String() string     { return "" }
func (f *inputFiles) Set(v string) error { *f = append(*f, v); return nil }

// runArgs is a parsed `pybox run` command line.
type runArgs struct {
	run      wire.Run
	checked  *client.Checked // run, checked: what is sent
	out      string
	dotfiles bool // --out-dotfiles: write returned names that start with a dot
	asJSON   bool
	raw      bool // --raw: the program's output as it is, even on a terminal
	// gate serves the run's connections with --allow-net; nil without:
	// the box then has no network at all.
	gate *egress.Gate
}

func runMain(args []string) int {
	ra, code, ok := parseRun(args)
	if !ok {
		return code
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	c, err := client.Dial(h)
	if err != nil {
		we := &wire.Error{Code: wire.ErrNoVM, Message: err.Error(), Cleanup: wire.NothingRan()}
		errors.As(err, &we) // the VM is not running, or it speaks another protocol
		return runFailed(ra, we)
	}
	defer c.Close()
	var unsealable *wire.Error
	if errors.As(c.Sealed(), &unsealable) {
		return runFailed(ra, unsealable)
	}
	// Ctrl-C cancels the run in the guest; the receipt still comes back.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var out *outdir.Dir
	var take func(*wire.OutputChunk)
	if ra.out != "" {
		// No bound of its own; in a folder a pybox mcp keeps a ledger for,
		// the run is recorded there, so that the servers' total stays right.
		if out, err = (outdir.Folder{Path: ra.out}).Admit(ra.run.RunID, outdir.Options{Dotfiles: ra.dotfiles}); err != nil {
			return runFailed(ra, &wire.Error{Code: wire.ErrBadRequest, Message: fmt.Sprintf("--out %s: %v: check the folder, or choose another", ra.out, err),
				Cleanup: wire.NothingRan()})
		}
		take = out.Chunk
	}
	res, err := c.RunWith(ctx, ra.checked, client.RunOptions{Output: take, Net: ra.gate})
	if err != nil && out != nil {
		out.Abort()
	}
	var we *wire.Error
	if errors.As(err, &we) {
		return runFailed(ra, we)
	} else if err != nil {
		return runFailed(ra, &wire.Error{Code: wire.ErrInternal, Message: err.Error(), Cleanup: wire.Unknown("the connection to the VM failed mid-run")})
	}
	return runDone(ra, res, out)
}

// parseRun turns the command line into a checked run request.
func parseRun(args []string) (*runArgs, int, bool) {
	fs := flags("run", "[flags] SCRIPT.py|-", `
Run one Python program (a file, or - for stdin) in a fresh sealed box in
the VM, print its stdout and stderr, and a short summary of the receipt on
stderr. Files given with --file appear in /tmp/input/, and data folders
named with --data at /data/NAME (read-only, up to 64 GiB together); with
--out, what the program writes to /tmp/output/ is written into a new
directory DIR/RUN_ID/ (plain names only, never outside it, nothing
overwritten; names starting with a dot only with --out-dotfiles). On a terminal, control characters in
the program's output (escape sequences that could act on the terminal) are
shown escaped, as \x1b or \u{202e}; --raw passes them through. Exit status
0 only when the program succeeded and its box was removed (cleanup
REMOVED). The VM must be running (pybox vm start); code never runs outside
it.

A box has no network unless you open it, for this run, with --allow-net:
its program can then reach only the hosts and ports you list, through a
proxy in its box (HTTP_PROXY and HTTPS_PROXY point at it) that pybox on
this machine serves: it checks each connection against the list, refuses
local and private addresses unless you named the address itself, and
dials. HTTPS stays end to end between the program and the server (the
proxy passes the encrypted bytes on; it checks the server name the
program sends). Clients that ignore HTTP(S)_PROXY reach the same hosts
by name: the box's resolver gives a listed name an address in the box,
whose connections go the same way; raw sockets, UDP and what is not on
the list get no network. The summary and --json's receipt list the connections,
served and refused. Only you open the network, with this flag: nothing
the program does can reach a host that is not on your list.`)
	ra := &runArgs{}
	image := fs.String("image", "stdlib", "the image to run in")
	timeout := fs.Float64("timeout", wire.DefaultTimeoutSeconds, "wall timeout in seconds (at most 30)")
	maxOut := fs.Int("max-output-bytes", wire.DefaultOutputBytes, "bytes kept of each of stdout and stderr (1–8192)")
	var files, data inputFiles
	fs.Var(&files, "file", "put this file in /tmp/input/ (repeatable)")
	fs.Var(&data, "data", "let the box see the VM's data folder `NAME` read-only at /data/NAME (repeatable; pybox vm start --data NAME=DIR shares it)")
	fs.StringVar(&ra.out, "out", "", "write returned files from /tmp/output/ into a new directory DIR/RUN_ID/")
	fs.BoolVar(&ra.dotfiles, "out-dotfiles", false, "with --out, also write returned files whose names start with a dot")
	fs.BoolVar(&ra.asJSON, "json", false, "print the whole result (receipt and files) as JSON")
	fs.BoolVar(&ra.raw, "raw", false, "print the program's output as it is, control characters included, even on a terminal")
	allowNet := fs.String("allow-net", "", "let the program reach the hosts in `LIST`, through a proxy in its box: HOST or HOST:PORT, comma-separated; HOST a name (api.example.com), *.DOMAIN (its subdomains), an IPv4 address or [an IPv6 one]; a HOST alone means ports 443 and 80")
	pos, code, err := parse(fs, args)
	if err != nil {
		return nil, code, false
	}
	if len(pos) != 1 {
		return nil, usageError(fs, "give one script (a file, or - for stdin)"), false
	}
	code2, err := readScript(pos[0])
	if err != nil {
		return nil, fail("%v", err), false
	}
	ra.run = wire.Run{RunID: wire.NewRunID(""), Code: code2, Image: *image, TimeoutSeconds: *timeout,
		MaxOutputBytes: *maxOut, ReturnFiles: ra.out != "", Client: fmt.Sprintf("pybox run (pid %d)", os.Getpid())}
	if ra.out != "" {
		// --out gets every file whole, not only what fits in a result.
		ra.run.Deliver = &wire.Deliver{MaxBytes: wire.DefaultTmpBytes}
	}
	netSet := false
	fs.Visit(func(f *flag.Flag) { netSet = netSet || f.Name == "allow-net" })
	if netSet {
		a, err := egress.ParseAllow(*allowNet)
		if err != nil {
			return nil, usageError(fs, "--allow-net %s: %v", *allowNet, err), false
		}
		ra.run.Net, ra.run.NetPorts = true, a.Ports()
		ra.gate = &egress.Gate{Allow: a}
	}
	for _, n := range data {
		ra.run.Data = append(ra.run.Data, wire.DataFolder{Name: n})
	}
	if len(data) > 0 {
		ra.run.MaxDataBytes = mcp.DefaultMaxDataBytes
	}
	for _, p := range files {
		b, err := readLimited(p, wire.MaxInputBytes)
		if err != nil {
			return nil, fail("--file %s: %v", p, err), false
		}
		ra.run.Files = append(ra.run.Files, wire.InputFile{Name: filepath.Base(p), Content: b})
	}
	checked, err := client.CheckRun(&ra.run)
	if err != nil {
		return nil, usageError(fs, "%v", err), false
	}
	ra.checked = checked
	return ra, exitOK, true
}

func readScript(arg string) (string, error) {
	var b []byte
	var err error
	if arg == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, wire.MaxCodeBytes+1))
	} else {
		b, err = readLimited(arg, wire.MaxCodeBytes)
	}
	if err != nil {
		return "", err
	}
	if len(b) > wire.MaxCodeBytes {
		return "", fmt.Errorf("the script is over %d bytes, the limit", wire.MaxCodeBytes)
	}
	return string(b), nil
}

// readLimited reads a file, refusing one larger than limit without
// reading it all.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("over %d bytes, the limit", limit)
	}
	return b, err
}

// runFailed reports a run that got no receipt.
func runFailed(ra *runArgs, e *wire.Error) int {
	cleanup := e.Cleanup
	if cleanup == nil {
		cleanup = wire.Unknown("the error said nothing of the box")
	}
	if ra.asJSON {
		printJSON(map[string]any{"run_id": ra.run.RunID, "error": e})
	}
	fmt.Fprintf(os.Stderr, "pybox: run %s failed: %s (cleanup %s)\n", ra.run.RunID, escape.Line(e.Message), escape.Line(cleanup.Status))
	return exitFailure
}

// runDone prints a result (host/client bounded it, as for pybox mcp),
// writes its files, and says whether it counts as a success.
func runDone(ra *runArgs, res *client.Result, out *outdir.Dir) int {
	rc := &res.Receipt
	if ra.asJSON {
		printJSON(&res.Result)
	} else {
		writeProgramOutput(os.Stdout, rc.Capture.Stdout, ra.raw)
		writeProgramOutput(os.Stderr, rc.Capture.Stderr, ra.raw)
		if rc.Capture.Stderr != "" && !strings.HasSuffix(rc.Capture.Stderr, "\n") {
			os.Stderr.WriteString("\n")
		}
	}
	var notes []string
	if res.Cut() {
		notes = append(notes, "fields of the guest's receipt over their bounds were cut")
	}
	if out != nil {
		saved, not := out.Finish(res.Receipt.Output.Delivered)
		for _, f := range saved {
			notes = append(notes, fmt.Sprintf("wrote %s (%s)", f.Path, size(f.Bytes)))
		}
		notes = append(notes, not...)
	}
	// Every line of the summary is escaped, whatever --raw says: its
	// strings come from the guest, and a fake summary line printed by
	// the program must not be mistaken for this one.
	for _, l := range append(summary(rc), notes...) {
		fmt.Fprintln(os.Stderr, "pybox: "+escape.Line(l))
	}
	if rc.Status == wire.StatusOK && rc.Cleanup.Status == wire.CleanupRemoved {
		return exitOK
	}
	return exitFailure
}

// writeProgramOutput writes what the program printed to f: as it is
// with --raw or when f is not a terminal (a file or a pipe gets the
// bytes), else with its controls escaped so that none acts on the
// terminal.
func writeProgramOutput(f *os.File, text string, raw bool) {
	if !raw && isTerminal(f) {
		text = escape.Terminal(text)
	}
	f.WriteString(text)
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}

// printJSON prints v as indented JSON with no C1 control or bidirectional
// formatting character left raw (escape.JSON; Go escapes C0 itself).
func printJSON(v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fail("%v", err)
		return
	}
	os.Stdout.Write(append(escape.JSON(b), '\n'))
}

// summary is the receipt in a few lines for people.
func summary(rc *wire.Receipt) []string {
	head := fmt.Sprintf("run %s: %s", rc.RunID, rc.Status)
	if rc.Reason != "" {
		head += " (" + rc.Reason + ")"
	}
	if rc.ExitCode != nil {
		head += fmt.Sprintf(", exit %d", *rc.ExitCode)
	}
	if rc.Signal != "" {
		head += ", signal " + rc.Signal
	}
	head += fmt.Sprintf(", wall %.2f s, cpu %.2f s", float64(rc.WallMS)/1000, float64(rc.CPU.UserMS+rc.CPU.SystemMS)/1000)
	mem := fmt.Sprintf("memory peak %s (%s reading) of %s", size(rc.Memory.PeakBytes), rc.Memory.Reading, size(rc.Memory.LimitBytes))
	if rc.Memory.OOMKilled {
		mem += ", OOM killed"
	}
	if rc.Box != nil && rc.Box.Warm {
		mem += fmt.Sprintf(", warm box (preload %s)", size(rc.Memory.PreloadBytes))
	}
	img := rc.Image.Name
	if rc.Image.Python != "" {
		img += fmt.Sprintf(" (Python %s, %s)", rc.Image.Python, rc.Image.Suite)
	}
	lines := []string{head, mem + fmt.Sprintf(", image %s, cleanup %s", img, rc.Cleanup.Status)}
	if rc.Cleanup.Detail != "" {
		lines = append(lines, "cleanup: "+rc.Cleanup.Detail)
	}
	for _, s := range []struct {
		name string
		st   wire.Stream
	}{{"stdout", rc.Capture.StdoutInfo}, {"stderr", rc.Capture.StderrInfo}} {
		if s.st.Truncated {
			lines = append(lines, fmt.Sprintf("%s truncated: kept %d of %d bytes", s.name, s.st.KeptBytes, s.st.Bytes))
		}
	}
	for _, o := range rc.Overruns {
		lines = append(lines, "overran: "+o)
	}
	if rc.Pids.LimitHit > 0 {
		lines = append(lines, fmt.Sprintf("process limit %d reached: %d forks refused", rc.Pids.Max, rc.Pids.LimitHit))
	}
	for _, n := range rc.Output.NotReturned {
		lines = append(lines, fmt.Sprintf("not returned: %s (%s)", n.Name, n.Reason))
	}
	if rc.Output.NotListed > 0 {
		lines = append(lines, fmt.Sprintf("not returned: %d more files not listed", rc.Output.NotListed))
	}
	return append(lines, networkSummary(rc.Network)...)
}

// maxRefusedLines is how many refused connections the summary names.
const maxRefusedLines = 8

// networkSummary is a run's connections in a few lines: none for a run
// that could not reach the network.
func networkSummary(nw *wire.Network) []string {
	if nw == nil {
		return nil
	}
	what := "connections"
	for _, c := range nw.Connections {
		if c.Kind == "dns" {
			what = "connections and lookups" // the box's resolver asked the host
			break
		}
	}
	lines := []string{fmt.Sprintf("network: %d %s (%d refused), %s sent, %s received",
		len(nw.Connections)+nw.NotListed, what, nw.Refused, size(nw.SentBytes), size(nw.ReceivedBytes))}
	shown := 0
	for _, c := range nw.Connections {
		if c.Allowed {
			continue
		}
		if shown == maxRefusedLines {
			break
		}
		shown++
		to := "an unread request"
		switch {
		case c.Kind == "dns":
			to = "the lookup of " + c.Host
		case c.Host != "":
			to = net.JoinHostPort(c.Host, fmt.Sprint(c.Port))
		}
		// Some of the gate's reasons say "refused" themselves.
		lines = append(lines, fmt.Sprintf("refused: %s: %s", to, strings.TrimPrefix(c.Why, "refused: ")))
	}
	if more := nw.Refused - shown; more > 0 && shown > 0 {
		lines = append(lines, fmt.Sprintf("refused: %d more (--json lists the first %d connections)", more, wire.MaxNetListed))
	}
	return lines
}

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
