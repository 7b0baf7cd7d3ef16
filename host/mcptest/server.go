package mcptest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/internal/pipes"
	"pybox/host/version"
)

// server is one server process and the client session spoken to it.
type server struct {
	cmd    *exec.Cmd
	tap    *tap
	in     *tapWriter
	stderr *stderrLog
	cs     *mcp.ClientSession // nil when no session opened
	exited chan struct{}      // closed once the process is gone
	state  *os.ProcessState
	grace  time.Duration
}

// startServer starts the server command with env and opens an MCP
// session with it at revision protocol (server/discover at 2026-07-28 and
// later, which the SDK follows with initialize when the server refuses
// it; initialize before). On an error the process is already stopped;
// the server is returned all the same, for what it wrote to stderr.
func startServer(ctx context.Context, argv, env []string, protocol string, grace time.Duration, logf func(string, ...any)) (*server, error) {
	s := &server{tap: newTap(), stderr: &stderrLog{logf: logf}, exited: make(chan struct{}), grace: grace}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = env
	// Our own pipes for stdout and stderr, read to their end: exec's
	// would be closed by Wait as soon as the process exits, losing the
	// last lines, which are the ones a check of a session's end reads.
	ps, err := pipes.Make(2)
	if err != nil {
		return s, err
	}
	stdout, stdoutW, stderr, stderrW := ps[0].R, ps[0].W, ps[1].R, ps[1].W
	s.cmd.Stdout, s.cmd.Stderr = stdoutW, stderrW
	stdin, err := s.cmd.StdinPipe()
	if err == nil {
		err = s.cmd.Start()
	}
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdout.Close()
		stderr.Close()
		return s, fmt.Errorf("cannot start %s: %w", argv[0], err)
	}
	s.in = &tapWriter{t: s.tap, w: stdin}
	go func() {
		s.tap.readFrom(stdout)
		stdout.Close()
	}()
	go func() {
		io.Copy(s.stderr, stderr)
		stderr.Close()
	}()
	go func() {
		s.cmd.Wait()
		s.state = s.cmd.ProcessState
		close(s.exited)
	}()
	c := mcp.NewClient(&mcp.Implementation{Name: "pybox-check", Version: version.Version}, nil)
	cctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	s.cs, err = c.Connect(cctx, &mcp.IOTransport{Reader: s.tap, Writer: s.in}, &mcp.ClientSessionOptions{ProtocolVersion: protocol})
	if err != nil {
		if st, exited := s.waitExit(grace); exited {
			err = fmt.Errorf("it exited (%v) before an MCP %s session opened", st, protocol)
		} else {
			err = fmt.Errorf("no MCP %s session: %v", protocol, err)
		}
		s.close()
		return s, err
	}
	return s, nil
}

// alive reports whether the session can still carry a call.
func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
	}
	return s.cs != nil && !s.tap.snapshot().eof
}

// close ends the session as a client should (closing stdin), then waits
// for the process; one that does not exit gets SIGTERM, then SIGKILL.
func (s *server) close() {
	if s.cs != nil {
		s.cs.Close() // closes the tap and stdin
	} else if s.in != nil {
		s.in.Close()
	}
	if s.cmd.Process == nil {
		return
	}
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		if sig != 0 {
			s.cmd.Process.Signal(sig)
		}
		select {
		case <-s.exited:
			return
		case <-time.After(s.grace):
		}
	}
	<-s.exited
}

// waitExit waits up to d for the process to exit on its own.
func (s *server) waitExit(d time.Duration) (*os.ProcessState, bool) {
	select {
	case <-s.exited:
		return s.state, true
	case <-time.After(d):
		return nil, false
	}
}

// stderrLog keeps the server's stderr lines with the time each came.
type stderrLog struct {
	logf    func(string, ...any)
	mu      sync.Mutex
	partial []byte
	lines   []stderrLine
	changed chan struct{}
}

type stderrLine struct {
	At   time.Time
	Text string
}

// Bounds on what is kept of a chatty server's stderr.
const (
	maxStderrLines = 4096
	maxStderrLine  = 64 << 10
)

func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 && len(l.partial) > maxStderrLine {
			i = maxStderrLine // a line without end is cut into pieces
		}
		if i < 0 {
			break
		}
		text := strings.TrimRight(string(l.partial[:i]), "\r")
		l.partial = l.partial[min(i+1, len(l.partial)):]
		if l.logf != nil {
			l.logf("server: %s", text)
		}
		if len(l.lines) == maxStderrLines {
			l.lines = l.lines[1:]
		}
		l.lines = append(l.lines, stderrLine{time.Now(), text})
	}
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return len(p), nil
}

// waitLine waits up to d for a line written after since that matches re.
func (l *stderrLog) waitLine(since time.Time, re *regexp.Regexp, d time.Duration) (string, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for _, line := range l.lines {
			if !line.At.Before(since) && re.MatchString(line.Text) {
				l.mu.Unlock()
				return line.Text, true
			}
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return "", false
		}
	}
}

// lastWords is what the server said on stderr, in short: its first line
// (where pybox puts a usage error, Go a panic) and its last (where most
// programs put the error they died of).
func (s *server) lastWords() string {
	s.stderr.mu.Lock()
	defer s.stderr.mu.Unlock()
	switch n := len(s.stderr.lines); n {
	case 0:
		return "nothing on stderr"
	case 1:
		return strconv.Quote(s.stderr.lines[0].Text)
	default:
		return fmt.Sprintf("%q … %q", s.stderr.lines[0].Text, strings.TrimSpace(s.stderr.lines[n-1].Text))
	}
}

// version is the MCP revision the session negotiated.
func (s *server) version() string {
	if s.cs == nil {
		return ""
	}
	return s.cs.InitializeResult().ProtocolVersion
}
