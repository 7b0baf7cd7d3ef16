// Command pybox runs Python programs in fresh sealed boxes inside a local
// VM: `pybox vm start` boots the VM, `pybox run` runs one program, and
// `pybox mcp` offers the run_python tool to AI agents.
//
// This package stays thin: one file per command, the work in host/.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// command is one `pybox NAME` command. Each command's file registers it.
type command struct {
	name    string
	summary string
	run     func(args []string) int
	hidden  bool
}

var commands = map[string]*command{}

// register adds a command; each command's file calls it from init, so a
// new command needs no edit here.
func register(c *command) { commands[c.name] = c }

func main() {
	os.Exit(dispatch(os.Args[1:]))
}

func dispatch(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && commands[args[1]] != nil {
			return commands[args[1]].run([]string{"--help"})
		}
		usage(os.Stdout)
		return exitOK
	case "-v", "--version":
		name = "version"
	}
	c := commands[name]
	if c == nil {
		fmt.Fprintf(os.Stderr, "pybox: unknown command %q\n\n", name)
		usage(os.Stderr)
		return exitUsage
	}
	return c.run(args[1:])
}

// subcommand runs one command of a group such as `pybox vm`, or prints
// the group's usage: to stdout when asked, to stderr with exit 2 when the
// command is missing or unknown.
func subcommand(group string, cmds map[string]*command, usage func(*os.File), args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(os.Stdout)
		return exitOK
	}
	c := cmds[args[0]]
	if c == nil {
		fmt.Fprintf(os.Stderr, "pybox: unknown command \"%s %s\"\n\n", group, args[0])
		usage(os.Stderr)
		return exitUsage
	}
	return c.run(args[1:])
}

func usage(w io.Writer) {
	fmt.Fprint(w, "usage: pybox COMMAND [flags]\n\nPyBox runs Python programs in fresh sealed boxes inside a local VM.\n\ncommands:\n")
	printCommands(w, commands)
	fmt.Fprint(w, "\nRun `pybox COMMAND --help` for a command's flags.\n")
}

func printCommands(w io.Writer, cs map[string]*command) {
	var names []string
	for n, c := range cs {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cs[n].summary)
	}
}

// flags makes the flag set of a command: `pybox NAME --help` prints the
// usage line, what the command does and its flags.
func flags(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("pybox "+name, flag.ContinueOnError)
	// parse prints usage and errors itself, to the right stream.
	fs.SetOutput(io.Discard)
	usageText[fs] = fmt.Sprintf("usage: pybox %s %s\n\n%s\n", name, synopsis, strings.TrimSpace(about))
	return fs
}

var usageText = map[*flag.FlagSet]string{}

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usageText[fs])
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// errHelp asks the caller to exit 0 after --help.
var errHelp = errors.New("help")

// parse parses args, allowing flags after positional arguments (as in
// `pybox run script.py --json`); "--" ends the flags. On --help it prints
// the usage to stdout; on a mistake, the mistake and the usage to stderr.
// The caller returns code when err is not nil.
func parse(fs *flag.FlagSet, args []string) (positional []string, code int, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(os.Stdout, fs)
				return nil, exitOK, errHelp
			}
			fmt.Fprintf(os.Stderr, "pybox: %v\n\n", err)
			printUsage(os.Stderr, fs)
			return nil, exitUsage, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if len(rest) == 0 {
			return positional, exitOK, nil
		}
		if consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), exitOK, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// usageError reports a wrong use of a command.
func usageError(fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "pybox: "+format+"\n\n", a...)
	printUsage(os.Stderr, fs)
	return exitUsage
}

// fail reports a failure.
func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "pybox: "+format+"\n", a...)
	return exitFailure
}

// say prints a progress line.
func say(s string) { fmt.Fprintf(os.Stderr, "pybox: %s\n", s) }
