package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"pybox/host/escape"
	"pybox/host/paths"
	"pybox/host/supervisor"
)

// detachKey is Ctrl-], as in telnet and `virsh console`.
const detachKey = 0x1d

func vmConsole(args []string) int {
	fs := flags("vm console", "", `
Attach this terminal to the VM's serial console, where the guest agent
logs and offers a small prompt (press Enter, then type help). Ctrl-]
detaches; the VM keeps running. When stdin is not a terminal, what it holds
is typed into the console, and the output of the next second is printed.`)
	if pos, code, err := parse(fs, args); err != nil {
		return code
	} else if len(pos) > 0 {
		return usageError(fs, "vm console takes no arguments")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	c, err := net.Dial("unix", paths.ForVM(h).ConsoleSocket())
	if err != nil {
		return fail("the VM is not running: start it with `pybox vm start`")
	}
	defer c.Close()
	restore, err := rawTerminal(int(os.Stdin.Fd()))
	if err != nil {
		return pipeConsole(c)
	}
	defer restore()
	fmt.Fprint(os.Stderr, "attached to the VM console: press Enter for the agent's prompt, Ctrl-] to detach\r\n")
	go io.Copy(guestOutput(), c)
	buf := make([]byte, 256)
	for {
		n, err := os.Stdin.Read(buf)
		if i := bytes.IndexByte(buf[:n], detachKey); i >= 0 {
			c.Write(buf[:i])
			fmt.Fprint(os.Stderr, "\r\ndetached; the VM keeps running\r\n")
			return exitOK
		}
		if _, werr := c.Write(buf[:n]); werr != nil {
			fmt.Fprint(os.Stderr, "\r\nthe console closed (the VM stopped?)\r\n")
			return exitOK
		}
		if err != nil {
			return exitOK
		}
	}
}

// pipeConsole types stdin into the console and prints what comes back
// until a second after stdin ends.
func pipeConsole(c net.Conn) int {
	go io.Copy(guestOutput(), c)
	io.Copy(c, os.Stdin)
	time.Sleep(time.Second)
	return exitOK
}

// guestOutput is where what the guest prints goes: stdout, with every
// control a line-based console does not need shown escaped. The guest is
// not trusted (a program's name reaches the kernel's log lines), and a
// terminal acts on escape sequences.
func guestOutput() io.Writer { return escape.NewWriter(os.Stdout) }

// rawTerminal puts the terminal on fd in raw mode (every key goes to the
// guest, Ctrl-C included) and returns how to restore it.
func rawTerminal(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &raw); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, ioctlSetTermios, old) }, nil
}

func vmLogs(args []string) int {
	fs := flags("vm logs", "[-n LINES] [--all]", `
Print the VM's serial console log: the kernel's and the guest agent's
messages since the VM last started (the log keeps about 1 MiB, plus the
file before it). Control characters from the guest are shown escaped.`)
	lines := fs.Int("n", 0, "print only the last LINES lines")
	all := fs.Bool("all", false, "also print the older file (the previous boot, or this one's beginning)")
	if pos, code, err := parse(fs, args); err != nil {
		return code
	} else if len(pos) > 0 {
		return usageError(fs, "vm logs takes no arguments")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	d := paths.ForVM(h)
	files := []string{d.ConsoleLog()}
	if *all {
		files = []string{d.ConsoleLog() + ".1", d.ConsoleLog()}
	}
	var out []string
	found := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return fail("%v", err)
		}
		found = true
		for _, l := range strings.SplitAfter(strings.ReplaceAll(string(b), "\r", ""), "\n") {
			if l != "" {
				out = append(out, supervisor.Printable(strings.TrimSuffix(l, "\n")))
			}
		}
	}
	if !found {
		return fail("no console log in %s: the VM has not been started here", d.Dir)
	}
	if *lines > 0 && len(out) > *lines {
		out = out[len(out)-*lines:]
	}
	for _, l := range out {
		fmt.Println(l)
	}
	return exitOK
}
