package image

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a cancelled command's process group has between
// SIGTERM (mmdebstrap unmounts and cleans up on it) and SIGKILL.
const stopGrace = 20 * time.Second

// command is one program the build runs.
type command struct {
	path   string
	args   []string
	env    []string // nil: this process's environment
	chroot string   // run inside this tree
	stdin  io.Reader
	onLine func(string) // sees each line of output (stdout and stderr)
}

func (c command) String() string { return c.path + " " + strings.Join(c.args, " ") }

// exitError is a command that failed, with the end of what it printed.
type exitError struct {
	cmd  string
	err  error
	tail []string
}

func (e *exitError) Error() string {
	msg := fmt.Sprintf("%s: %v", e.cmd, e.err)
	if len(e.tail) > 0 {
		msg += "; its last lines:\n    " + strings.Join(e.tail, "\n    ")
	}
	return msg
}

func (e *exitError) Unwrap() error { return e.err }

// run runs c in its own process group, copying its output to log. When
// ctx ends, the whole group gets SIGTERM, then SIGKILL after stopGrace:
// mmdebstrap's children (apt, dpkg, maintainer scripts) must stop too.
func run(ctx context.Context, log io.Writer, c command) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cmd := exec.Command(c.path, c.args...)
	cmd.Env = c.env
	cmd.Stdin = c.stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Chroot: c.chroot}
	if c.chroot != "" {
		cmd.Dir = "/"
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	fmt.Fprintf(log, "\n$ %s%s\n", chrootNote(c.chroot), c)
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return fmt.Errorf("%s: %w", c.path, err)
	}
	done := make(chan struct{})
	go stopOnCancel(ctx, cmd.Process.Pid, done)
	tail := copyLines(pr, log, c.onLine)
	pr.Close()
	err = cmd.Wait()
	close(done)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return &exitError{cmd: c.path, err: err, tail: tail}
	}
	return nil
}

func chrootNote(root string) string {
	if root == "" {
		return ""
	}
	return "(chroot " + root + ") "
}

func stopOnCancel(ctx context.Context, pid int, done <-chan struct{}) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopGrace):
		syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// copyLines copies r to log line by line, calls onLine, and returns the
// last lines (for an error message).
func copyLines(r io.Reader, log io.Writer, onLine func(string)) []string {
	const keep = 12
	var tail []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// dpkg draws its progress with carriage returns; the last one is the news.
		if i := strings.LastIndexByte(line, '\r'); i >= 0 {
			line = line[i+1:]
		}
		fmt.Fprintln(log, line)
		if onLine != nil {
			onLine(line)
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		tail = append(tail, line)
		if len(tail) > keep {
			tail = tail[1:]
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		io.Copy(log, r) // a line longer than 1 MiB: keep the log whole
	}
	return tail
}
