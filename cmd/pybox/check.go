package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"

	"pybox/host/escape"
	"pybox/host/mcp"
	"pybox/host/mcptest"
)

func init() {
	register(&command{name: "check", summary: "check that `pybox mcp` works, as an agent's MCP client would", run: checkMain})
}

func checkMain(args []string) int {
	fs := flags("check", "[--images LIST] [--max-timeout S] [--data NAMES] [--output-dir DIR] [--json] [-v] [--vm-down] [--server CMD...]", `
Start `+"`pybox mcp`"+` with the options given and check it through an MCP
client, as an agent would. The checks speak MCP 2026-07-28, the newest
revision (server/discover, no handshake), except one that opens a second
session at 2025-11-25 (the initialize handshake, the tool list and a run).
They cover the tool's schema and cache hint, a run in each image, each data
folder read-only (--data), a file landing in the output folder
(--output-dir), files in and out, a PNG chart back as a file and as an
image, refused arguments, output that tries to forge a protocol message,
busy, cancel, timeout, trimming, a message over 512 KiB and the memory
reading. Each check prints one line: PASS, or FAIL with what was expected,
what came back and a hint. The VM must be running (pybox vm start) with
every image in --images.
Exit status: 0 when every check passes, 1 when one fails.

--server runs the checks against another stdio MCP server: everything
after it is the command, for example
  pybox check --images stdlib,data --server pybox mcp --images stdlib,data`)
	server, args, hasServer := cutServer(args)
	images := fs.String("images", mcp.DefaultImage, "the images the server allows, comma-separated: one run in each")
	maxTimeout := fs.String("max-timeout", "2", "the server's --max-timeout in seconds: the schema must show it")
	asJSON := fs.Bool("json", false, "print one JSON object per check per line")
	verbose := fs.Bool("v", false, "say what each check saw, and echo the server's stderr to stderr")
	vmDown := fs.Bool("vm-down", false, "also check a server with no VM (an empty PYBOX_HOME): calls refused with cleanup NOT_ATTEMPTED")
	data := fs.String("data", "", "the server's --data: each data folder must be visible, read-only")
	outDir := fs.String("output-dir", "", "the server's --output-dir: a file the program writes must land there")
	if pos, code, err := parse(fs, args); err != nil {
		return code
	} else if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q (a server command goes after --server)", pos[0])
	}
	o := mcptest.Options{VMDown: *vmDown, Data: mcp.ParseNames(*data)}
	var err error
	if *outDir != "" {
		o.OutputDir, err = filepath.Abs(*outDir)
	}
	if err == nil {
		o.Images, err = mcp.ParseImages(*images)
	}
	if err == nil {
		o.MaxTimeout, err = mcp.ParseMaxTimeout(*maxTimeout)
	}
	mo := mcp.Options{Images: o.Images, MaxTimeout: o.MaxTimeout, Data: o.Data, OutputDir: o.OutputDir}
	if err == nil {
		err = mo.Check()
	}
	if err != nil {
		return usageError(fs, "%v", err)
	}
	if hasServer && len(server) == 0 {
		return usageError(fs, "--server needs a command after it")
	}
	if o.Server = server; !hasServer {
		exe, err := os.Executable()
		if err != nil {
			return fail("cannot find this pybox to start `pybox mcp` (%v): give the command with --server", err)
		}
		o.Server = append([]string{exe, "mcp"}, mo.Args()...)
	}
	if *verbose {
		o.Logf = func(format string, a ...any) {
			fmt.Fprintln(os.Stderr, "pybox check: "+escape.Line(fmt.Sprintf(format, a...)))
		}
	}
	// An interrupt cancels the checks; their servers are stopped on the way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := &mcptest.Printer{W: os.Stdout, JSON: *asJSON, Verbose: *verbose}
	passed, failed := mcptest.Run(ctx, o, p.Print)
	summary := mcptest.Summary(passed, failed)
	if *asJSON {
		fmt.Fprintln(os.Stderr, summary) // stdout holds only the checks' JSON
	} else {
		fmt.Println(summary)
	}
	if failed > 0 {
		return exitFailure
	}
	return exitOK
}

// cutServer splits off --server and the command after it.
func cutServer(args []string) (server, rest []string, ok bool) {
	i := slices.IndexFunc(args, func(a string) bool { return a == "--server" || a == "-server" })
	if i < 0 {
		return nil, args, false
	}
	return args[i+1:], args[:i], true
}
