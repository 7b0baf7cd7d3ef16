package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"pybox/host/client"
	"pybox/host/egress"
	"pybox/host/mcp"
)

func init() {
	register(&command{name: "mcp", summary: "offer the run_python tool to an AI agent (MCP over stdio)", run: mcpMain})
}

// dialTimeout bounds connecting to the supervisor and its hello.
const dialTimeout = 10 * time.Second

func mcpMain(args []string) int {
	if len(args) > 0 && args[0] == "config" {
		return mcpConfig(args[1:])
	}
	fs := flags("mcp", "[--images LIST] [--max-timeout S] [--data NAMES] [--output-dir DIR] [--allow-net HOSTS]  |  pybox mcp config --help", `
Serve the run_python tool over the Model Context Protocol on stdin and
stdout, for an AI agent's MCP client to start. Every call runs in a fresh
sealed box in the VM, which must be running (pybox vm start): this server
never starts it and never runs code outside it. The options are the
ceilings an agent may ask for; the tool's schema shows them. With --data,
an agent may name those data folders and its box sees them read-only at
/data/NAME; with --output-dir, everything a program writes to /tmp/output
is saved whole in DIR/RUN_ID/, never over an existing file. With
--allow-net, a call may name some of those hosts and its program reaches
them through a proxy in its box (HTTP_PROXY, HTTPS_PROXY), or by name
through the box's own resolver, both served by this server, HTTPS end
to end; without, no box reaches the network.
stdout carries
protocol messages only; the server logs to stderr. It speaks MCP
2026-07-28 (server/discover, no handshake) and, to clients that
initialize, 2025-11-25 and the revisions before it; the limits (32 calls
and 256 messages, one run at a time) are the connection's under all.

`+"`pybox mcp config`"+` prints a ready-to-paste configuration for a client.`)
	opts, code, ok := mcpOptions(fs, args)
	if !ok {
		return code
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	// What is logged can hold the guest's words (a cleanup's detail) and
	// the client's: showf escapes them.
	logf := func(format string, a ...any) { showf(os.Stderr, "pybox mcp: "+format+"\n", a...) }
	srv, err := mcp.NewServer(opts, dialVM(h), logf)
	if err != nil {
		return fail("%v", err)
	}
	// SIGTERM and SIGINT stop the running program and wait for its receipt;
	// a second signal kills at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	in, out := stdio()
	logf("serving run_python (images %s, timeout at most %v s%s, the VM's home %s)", strings.Join(opts.Images, ","), opts.MaxTimeout, folderNote(opts), h)
	if err := srv.Serve(ctx, &mcp.Transport{In: in, Out: out, Log: logf}); err != nil {
		logf("the session ended: %v", err)
		return exitFailure
	}
	return exitOK
}

func folderNote(o mcp.Options) string {
	var s string
	if len(o.Data) > 0 {
		s += ", data folders " + strings.Join(o.Data, ",")
	}
	if o.OutputDir != "" {
		s += ", output saved in " + o.OutputDir
	}
	if hosts := o.Net.String(); hosts != "" {
		s += ", network open to " + hosts
	}
	return s
}

// mcpOptions adds the server options (shared by `mcp` and `mcp config`)
// to fs, parses args and checks them: a server with a bad option never
// starts.
func mcpOptions(fs *flag.FlagSet, args []string) (mcp.Options, int, bool) {
	images := fs.String("images", mcp.DefaultImage, "images an agent may use, comma-separated: stdlib, data, or ones you built")
	maxTimeout := fs.String("max-timeout", "2", "the longest run an agent may ask for, in seconds: more than 0, at most 30")
	data := fs.String("data", "", "data folders an agent may ask for, comma-separated names the VM was started with (pybox vm start --data NAME=DIR)")
	maxData := fs.Int64("max-data-bytes", mcp.DefaultMaxDataBytes, "the most the data folders of one call may hold together, in bytes")
	outDir := fs.String("output-dir", "", "save everything a program writes to /tmp/output/ here, in a new directory per run (DIR/RUN_ID/)")
	outDot := fs.Bool("output-dotfiles", false, "with --output-dir, also save files whose names start with a dot")
	maxOut := fs.Int64("max-output-dir-bytes", mcp.DefaultMaxOutputDirBytes, "the most one run may save in --output-dir, in bytes (at most 64 MiB, a run's /tmp)")
	allowNet := fs.String("allow-net", "", "hosts a call may let its program reach, comma-separated HOST, *.DOMAIN or HOST:PORT (a HOST alone: ports 443 and 80); a call names those it needs, and without this flag no box reaches the network")
	maxTotal := fs.Int64("max-output-dir-total", mcp.DefaultMaxOutputDirTotal, "the most --output-dir may hold, earlier runs included, in bytes as du counts them and 4 KiB more for each file or directory (at most 1,000,000 entries); servers sharing the folder share the bound; when it is full, calls are refused until you make room (pybox never deletes a run's folder)")
	pos, code, err := parse(fs, args)
	if err != nil {
		return mcp.Options{}, code, false
	}
	if len(pos) > 0 {
		return mcp.Options{}, usageError(fs, "unexpected argument %q", pos[0]), false
	}
	o := mcp.Options{Data: mcp.ParseNames(*data), MaxDataBytes: *maxData, OutputDotfiles: *outDot, MaxOutputDirBytes: *maxOut, MaxOutputDirTotal: *maxTotal}
	if *outDir != "" {
		if o.OutputDir, err = filepath.Abs(*outDir); err != nil {
			return mcp.Options{}, usageError(fs, "--output-dir: %v", err), false
		}
	}
	if *allowNet != "" {
		if o.Net, err = egress.ParseAllow(*allowNet); err != nil {
			return mcp.Options{}, usageError(fs, "--allow-net: %v", err), false
		}
	}
	if o.Images, err = mcp.ParseImages(*images); err == nil {
		o.MaxTimeout, err = mcp.ParseMaxTimeout(*maxTimeout)
	}
	if err == nil {
		err = o.Check()
	}
	if err != nil {
		return mcp.Options{}, usageError(fs, "%v", err), false
	}
	return o, exitOK, true
}

// dialVM reaches the VM through its supervisor, never starting it.
func dialVM(home string) mcp.Dialer {
	return func(ctx context.Context) (mcp.VM, error) {
		ctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		c, err := client.DialContext(ctx, home)
		if errors.Is(err, client.ErrNoVM) {
			return nil, noVMError(home)
		}
		if err != nil {
			return nil, err
		}
		if err := c.Sealed(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// noVMError says where the server looked for the VM. A client starts the
// server with an environment of its own choosing, which often lacks the
// user's PYBOX_HOME: then `pybox vm status` says running while every call
// says no VM, and only the home named here tells the two apart.
func noVMError(home string) error {
	return fmt.Errorf("the VM is not running under PYBOX_HOME=%s: start it with `pybox vm start`; "+
		"if `pybox vm status` says it is running, it runs under another PYBOX_HOME: set that one in the client's "+
		"configuration of this server (`pybox mcp config` prints one that does)", home)
}

// stdio returns stdin and stdout. When they are pipes or sockets (as an
// MCP client starts the server) they are made non-blocking, so that the
// runtime's poller manages them and closing one interrupts a read or
// write blocked on it: that is how a client that stops reading is cut
// off after the stall timeout. A terminal is left as it is, since the
// flag would outlive the process in the shell's own terminal.
func stdio() (io.ReadCloser, io.WriteCloser) {
	return pollable(os.Stdin, syscall.Stdin, "stdin"), pollable(os.Stdout, syscall.Stdout, "stdout")
}

func pollable(f *os.File, fd int, name string) *os.File {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return f
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		return f
	}
	return os.NewFile(uintptr(fd), name)
}

func mcpConfig(args []string) int {
	fs := flags("mcp config", "[--client NAME] [--images LIST] [--max-timeout S] [--allow-net HOSTS]", `
Print a ready-to-paste configuration that starts `+"`pybox mcp`"+` with the
options given, naming this pybox by its absolute path (desktop apps do not
see the shell's PATH) and setting PYBOX_HOME to this shell's (clients start
servers with an environment of their own). Where to paste it is said on
stderr.
Clients: `+strings.Join(mcp.ClientNames(), ", ")+`.`)
	clientName := fs.String("client", "generic", "the client to configure: "+strings.Join(mcp.ClientNames(), ", "))
	opts, code, ok := mcpOptions(fs, args)
	if !ok {
		return code
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return fail("cannot tell where this pybox is (%v): use the full path from `which pybox`", err)
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	snippet, hint, err := mcp.Config(*clientName, exe, h, opts)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	fmt.Fprintln(os.Stderr, hint)
	fmt.Print(snippet)
	return exitOK
}
