package launcher

// These tests compile pybox-launch.c against this machine's own Python
// (Debian's /usr/bin/python3 and its headers, which `make deps` installs)
// and run programs twice: as `python3 -I -B -c CODE`, and through the
// launcher as the agent drives it in a warm box (its interpreter up, a
// stdlib preload, the program handed over on fd 3). Whatever a program
// prints, its exit status and its stderr must be the same. The end-to-end
// suite does the same inside the VM, with the images' Python.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pybox/shared/needs"
	"pybox/shared/wire"
)

// hostPreload is what the tests preload: a few stdlib modules, and the
// ones CPython imports on its own for -c code and tracebacks.
const hostPreload = "json\nre\ncollections\ndatetime\n# a comment\npathlib\nlinecache\ntraceback\nwarnings\n"

type hostPython struct {
	python, so, preload string
	env                 []string
}

var (
	hostOnce sync.Once
	host     *hostPython
	hostErr  string
)

// TestMain keeps whatever descriptors this process was given out of the
// programs it starts, as box-init does for a box.
func TestMain(m *testing.M) {
	for fd := 3; fd < 1024; fd++ {
		syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETFD, syscall.FD_CLOEXEC)
	}
	code := m.Run()
	madeMu.Lock()
	for _, d := range made {
		os.RemoveAll(d)
	}
	madeMu.Unlock()
	os.Exit(code)
}

// made are the directories compile made, removed when the tests end (the
// compiled launcher outlives one test).
var (
	madeMu sync.Mutex
	made   []string
)

// compiled returns the launcher built for this machine's python3.
func compiled(t *testing.T) *hostPython {
	t.Helper()
	hostOnce.Do(func() { host, hostErr = compile(hostPreload, nil) })
	if host == nil {
		needs.Unavailable(t, hostErr)
	}
	return host
}

// compile builds the launcher with preload as its list, or, when place
// is given, with whatever place makes at the list's path instead.
func compile(preload string, place func(path string) error) (*hostPython, string) {
	const python = "/usr/bin/python3"
	out, err := exec.Command(python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		return nil, fmt.Sprintf("no %s: %v (try: make deps)", python, err)
	}
	minor := strings.TrimSpace(string(out))
	include := "/usr/include/python" + minor
	if _, err := os.Stat(include + "/internal/pycore_interp.h"); err != nil {
		return nil, fmt.Sprintf("no Python %s headers in %s (try: make deps, which installs libpython3-dev)", minor, include)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		return nil, "no gcc (try: make deps)"
	}
	// The box's user reads these: a directory others may enter.
	dir, err := os.MkdirTemp("", "pybox-launch-")
	if err != nil {
		return nil, err.Error()
	}
	madeMu.Lock()
	made = append(made, dir)
	madeMu.Unlock()
	os.Chmod(dir, 0o755)
	h := &hostPython{python: python, so: filepath.Join(dir, "pybox-launch.so"), preload: filepath.Join(dir, "preload")}
	if place == nil {
		place = func(p string) error { return os.WriteFile(p, []byte(preload), 0o644) }
	}
	if err := place(h.preload); err != nil {
		return nil, err.Error()
	}
	src := filepath.Join(dir, "pybox-launch.c")
	if err := os.WriteFile(src, []byte(Source), 0o644); err != nil {
		return nil, err.Error()
	}
	args := []string{"-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror",
		"-I" + include, `-DPRELOAD_FILE="` + h.preload + `"`, "-o", h.so, src}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		return nil, fmt.Sprintf("gcc: %v\n%s", err, out)
	}
	os.Chmod(h.so, 0o755)
	h.env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	return h, ""
}

type outcome struct {
	status         string // how the process ended
	stdout, stderr string
}

// asBox makes cmd run as a box's program would: an unprivileged user
// (RLIMIT_NPROC binds only those), in /tmp, with no terminal.
func asBox(cmd *exec.Cmd) {
	cmd.Dir = "/tmp"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true}
	}
}

func ended(t *testing.T, cmd *exec.Cmd, werr error) string {
	t.Helper()
	if cmd.ProcessState == nil {
		t.Fatalf("%v", werr)
	}
	return cmd.ProcessState.String()
}

// cold runs code as python3 -I -B -c.
func (h *hostPython) cold(t *testing.T, code string) outcome {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(h.python, "-I", "-B", "-c", code)
	cmd.Args[0] = "python3"
	cmd.Env, cmd.Stdout, cmd.Stderr = h.env, &out, &errOut
	asBox(cmd)
	err := cmd.Run()
	return outcome{ended(t, cmd, err), out.String(), errOut.String()}
}

// warm runs code through the launcher, after its preload, telling it to
// keep what the first keep modules set at import. It returns what the
// launcher said too.
func (h *hostPython) warm(t *testing.T, code string, keep int) (outcome, []string) {
	t.Helper()
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	agent, box := os.NewFile(uintptr(pair[0]), "agent"), os.NewFile(uintptr(pair[1]), "box")
	defer agent.Close()
	preR, preW, _ := os.Pipe()
	defer preR.Close()
	cmd := exec.Command(h.python, "-I", "-B", "-c", StandIn)
	cmd.Args[0] = "python3"
	cmd.Env = append(append([]string{}, h.env...), "LD_PRELOAD="+h.so)
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = preW, preW, []*os.File{box} // box: fd 3
	asBox(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	box.Close()
	preW.Close()
	go io.Copy(io.Discard, preR)
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()

	var said []string
	hear := func() string {
		buf := make([]byte, 1<<17)
		n, err := agent.Read(buf)
		if err != nil {
			cmd.Wait()
			t.Fatalf("the launcher said nothing more (%v) after %q", err, said)
		}
		said = append(said, string(buf[:n]))
		return string(buf[:n])
	}
	tell := func(s string) {
		if _, err := agent.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if m := hear(); m != Initialized {
		t.Fatalf("first message %q", m)
	}
	tell(Preload)
	for m := hear(); !strings.HasPrefix(m, Ready); m = hear() {
		if !strings.HasPrefix(m, Importing+" ") {
			t.Fatalf("during the preload: %q", m)
		}
	}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	var out, errOut bytes.Buffer
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { io.Copy(&out, outR); copies.Done() }()
	go func() { io.Copy(&errOut, errR); copies.Done() }()
	rights := syscall.UnixRights(int(outW.Fd()), int(errW.Fd()))
	if err := syscall.Sendmsg(pair[0], []byte(Run+code), rights, nil, 0); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	errW.Close()
	if m := hear(); m != Fds+" 0,1,2" {
		t.Fatalf("after the program: %q", m)
	}
	tell(fmt.Sprintf("%s %d", Go, keep))
	agent.Close()
	err = cmd.Wait()
	copies.Wait()
	return outcome{ended(t, cmd, err), out.String(), errOut.String()}, said
}

// address is an object's address in a repr: random from run to run.
var address = regexp.MustCompile(`0x[0-9a-f]{6,}`)

func (o outcome) addressless() outcome {
	o.stdout, o.stderr = address.ReplaceAllString(o.stdout, "0x…"), address.ReplaceAllString(o.stderr, "0x…")
	return o
}

// programs are compared warm and cold on everything they print and how
// they end.
var programs = []struct{ name, code string }{
	{"the stack", "import sys, inspect, traceback\nf = sys._getframe()\nwhile f:\n    print(f.f_code.co_filename, f.f_code.co_name, f.f_lineno); f = f.f_back\nprint(len(inspect.stack()))\ntraceback.print_stack()"},
	{"recursion depth", "n = 0\ndef f():\n    global n\n    n += 1\n    f()\ntry:\n    f()\nexcept RecursionError:\n    print(n)"},
	{"a warning's stacklevel", "import warnings\ndef g():\n    warnings.warn('from g', stacklevel=2)\ng()\nwarnings.warn('top', stacklevel=2)\nprint(__warningregistry__)"},
	{"the command line", "import sys\nprint(open('/proc/self/cmdline', 'rb').read())\nprint(sorted(open('/proc/self/environ', 'rb').read().split(b'\\0')))\nprint(sys.orig_argv, sys.argv, sys.executable, sys.flags)"},
	{"__main__", "import sys\nm = sys.modules['__main__']\nprint(sorted(vars(m)), __name__, __spec__, __loader__, __doc__, __package__)"},
	{"the collector", "import gc\nprint(gc.get_stats(), gc.get_count()[1:], gc.get_threshold(), gc.collect(), gc.garbage, gc.get_freeze_count() >= 0)"},
	{"stdin and descriptors", "import os, sys\nprint(sys.stdin.seekable(), repr(sys.stdin.read()), os.readlink('/proc/self/fd/0'), sorted(os.listdir('/proc/self/fd')))"},
	{"threads and children", "import os, resource\nprint(len(os.listdir('/proc/self/task')), resource.getrusage(resource.RUSAGE_CHILDREN))"},
	{"warnings filters", "import warnings\nprint(warnings.filters)"},
	{"an exception", "def f():\n    raise ValueError('boom')\nf()"},
	{"a syntax error", "x = (1,\nprint('never')"},
	{"sys.exit(3)", "import sys\nprint('out')\nsys.exit(3)"},
	{"sys.exit past 255", "import sys\nsys.exit(256 + 7)"},
	{"sys.exit past 64 bits", "import sys\nsys.exit(2 ** 70)"},
	{"sys.exit with a message", "import sys\nsys.exit('bad input')"},
	{"KeyboardInterrupt", "raise KeyboardInterrupt"},
	{"atexit and unflushed output", "import atexit, sys\natexit.register(print, 'at exit')\nsys.stdout.write('no newline')"},
	{"__del__ using a module at exit", "import os\nclass D:\n    def __del__(self):\n        print('del', os.getpid() > 0, os.sep)\nd = D()"},
	{"a file left open in a cycle", "class C: pass\nc = C(); c.me = c\nc.f = open('/dev/stdout', 'w'); c.f.write('written from a cycle\\n')\ndel c"},
	{"a file left open in another module", "import json\njson.f = open('/dev/stdout', 'w'); json.f.write('written from json\\n')"},
	{"a daemon thread at exit", "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\nprint('main done')"},
	{"os._exit replaced", "import os, sys\nos._exit = lambda c: None\nsys.exit(3)"},
	{"builtins.__import__ replaced", "import builtins\nbuiltins.__import__ = None\nprint('x')\nraise SystemExit(4)"},
	{"gc.collect replaced", "import gc\ngc.collect = None\nclass C:\n    def __del__(self): print('collected')\nc = C(); c.me = c\ndel c"},
	{"sys.modules['atexit'] replaced", "import sys, atexit\natexit.register(print, 'registered')\nsys.modules['atexit'] = None"},
	{"sys.stdout closed", "import sys\nprint('to stderr', file=sys.stderr)\nsys.stdout.close()"},
	{"a sys.stdout that cannot flush", "import sys\nclass W:\n    def write(self, s): return len(s)\n    def flush(self): raise OSError('no flush')\nsys.stdout = W()\nprint('lost')"},
	{"an unraisable exception", "class X:\n    def __del__(self): raise ValueError('in del')\nx = X(); del x\nprint('after')"},
}

func TestLauncherRunsAsPython(t *testing.T) {
	h := compiled(t)
	for _, p := range programs {
		t.Run(p.name, func(t *testing.T) {
			k := h.cold(t, p.code).addressless()
			w, said := h.warm(t, p.code, 0)
			if w = w.addressless(); w != k {
				t.Errorf("warm and cold differ\nwarm: %+v\ncold: %+v\nthe launcher said %q", w, k, said)
			}
		})
	}
}

// The preload is what the list names, comments left out; the program's
// code is the command line, and LD_PRELOAD is gone from everything the
// program can see.
func TestLauncherConversation(t *testing.T) {
	h := compiled(t)
	w, said := h.warm(t, "import os\nprint(os.environ.get('LD_PRELOAD'))", 0)
	if w.stdout != "None\n" || w.status != "exit status 0" {
		t.Errorf("warm: %+v", w)
	}
	want := []string{Initialized, "importing json", "importing re", "importing collections", "importing datetime",
		"importing pathlib", "importing linecache", "importing traceback", "importing warnings",
		"ready json re collections datetime pathlib linecache traceback warnings", "fds 0,1,2"}
	if strings.Join(said, "|") != strings.Join(want, "|") {
		t.Errorf("the launcher said\n%q\nwant\n%q", said, want)
	}
}

// Without the agent's socket on fd 3, python3 with the launcher loaded
// is python3 (the image build checks this too), and what it starts does
// not load the launcher again.
func TestLauncherOutsideABox(t *testing.T) {
	h := compiled(t)
	code := "import os, subprocess, sys\nprint(sys.argv, os.environ.get('LD_PRELOAD'), flush=True)\nsubprocess.run([sys.executable, '-c', 'import os; print(os.environ.get(\"LD_PRELOAD\"))'])"
	var out bytes.Buffer
	cmd := exec.Command(h.python, "-I", "-c", code, "arg")
	cmd.Env, cmd.Stdout, cmd.Stderr = append(append([]string{}, h.env...), "LD_PRELOAD="+h.so), &out, &out
	if err := cmd.Run(); err != nil || out.String() != "['-c', 'arg'] None\nNone\n" {
		t.Errorf("%v: %q", err, out.String())
	}
}

// An image's preload list that is a FIFO, a link or a device is refused
// at once: the launcher says so and exits before its interpreter waits
// for anything.
func TestLauncherRefusesAStrangePreloadList(t *testing.T) {
	compiled(t) // this machine can build it
	for name, place := range map[string]func(string) error{
		"a FIFO":              func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"a link to /dev/zero": func(p string) error { return os.Symlink("/dev/zero", p) },
		"a directory":         func(p string) error { return os.Mkdir(p, 0o755) },
	} {
		t.Run(name, func(t *testing.T) {
			h, why := compile("", place)
			if h == nil {
				t.Fatal(why)
			}
			pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			agent, box := os.NewFile(uintptr(pair[0]), "agent"), os.NewFile(uintptr(pair[1]), "box")
			defer agent.Close()
			cmd := exec.Command(h.python, "-I", "-B", "-c", StandIn)
			cmd.Args[0] = "python3"
			cmd.Env, cmd.ExtraFiles = append(append([]string{}, h.env...), "LD_PRELOAD="+h.so), []*os.File{box}
			asBox(cmd)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			box.Close()
			timer := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
			defer timer.Stop()
			agent.SetReadDeadline(time.Now().Add(20 * time.Second))
			buf := make([]byte, 4096)
			n, _ := agent.Read(buf)
			cmd.Wait()
			if got := string(buf[:n]); !strings.HasPrefix(got, Fail+" reading the preload list") || cmd.ProcessState.ExitCode() != 3 {
				t.Errorf("the launcher said %q and ended %v", got, cmd.ProcessState)
			}
		})
	}
}

// The C source and the Go side agree on the contract.
func TestSourceMatchesContract(t *testing.T) {
	for _, want := range []string{
		`"` + wire.ImagePreloadFile + `"`,
		fmt.Sprintf("CTL = %d,", ControlFD),
		fmt.Sprintf("MAX_CODE = %d,", MaxCode),
		`say("initialized")`, `say("importing %s", name)`, `"fail %s`, `"ready"`, `char line[4096] = "fds"`,
		`strcmp(msg, "preload")`, `memcmp(msg, "run\n", 4)`, `strncmp(go, "go ", 3)`,
	} {
		if !strings.Contains(Source, want) {
			t.Errorf("pybox-launch.c does not have %s", want)
		}
	}
	if !strings.HasPrefix(Env, "LD_PRELOAD=/") || len(StandIn) != MaxCode || MaxCode != wire.MaxCodeBytes {
		t.Errorf("Env %q, stand-in %d bytes, MaxCode %d", Env, len(StandIn), MaxCode)
	}
}
