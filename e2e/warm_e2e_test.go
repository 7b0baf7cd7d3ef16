package e2e

// End-to-end tests of warm boxes: a program in a warm box behaves as in a
// cold one (`python3 -I -B -c CODE` in a box made for it), every warm box
// is fresh, and a VM without them (--warm 0) or an image whose warm box
// fails falls back to cold boxes and says why.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pybox/host/vm"
	"pybox/shared/wire"
)

// coldVM starts a VM like the shared one, but with warm boxes off. Its
// memory is the same: the kernel sets RLIMIT_NPROC by it, and a program
// sees that.
func coldVM(t *testing.T) *vmEnv {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	e.mustStart("--images", "stdlib", "--memory", strconv.Itoa(vm.DefaultMemoryMiB), "--warm", "0")
	return e
}

// worldCode prints what a program finds of its process and box.
const worldCode = `
import os, sys, signal, resource, threading, stat
m = sys.modules["__main__"]
print("main", sorted(k for k in vars(m)), m.__name__, m.__spec__, m.__package__, getattr(m, "__file__", None))
print("argv", sys.argv, sys.orig_argv, sys.executable)
print("cmdline", open("/proc/self/cmdline", "rb").read())
print("environ", sorted(open("/proc/self/environ", "rb").read().split(b"\0")))
print("flags", sys.flags.isolated, sys.flags.dont_write_bytecode, sys.flags.no_user_site, sys.flags.ignore_environment)
print("stdin", repr(sys.stdin.read()), stat.S_ISCHR(os.fstat(0).st_mode), sys.stdin.isatty())
print("fds", sorted(int(f) for f in os.listdir("/proc/self/fd")))
print("cwd", os.getcwd(), "ids", os.getuid(), os.getgid(), os.getppid())
print("env", sorted(os.environ))
print("tmp", sorted(os.listdir("/tmp")), sorted(os.listdir("/tmp/input")), sorted(os.listdir("/tmp/output")))
print("signals", [(s.name, signal.getsignal(s)) for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)])
print("rlimits", [resource.getrlimit(r) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE, resource.RLIMIT_CORE, resource.RLIMIT_NPROC)])
print("threads", threading.active_count(), "umask", os.umask(0o22))
print("status", [l for l in open("/proc/self/status") if l.split(":")[0] in ("CapEff", "NoNewPrivs", "Seccomp", "Uid", "Threads")])
print("modules", " ".join(sorted(sys.modules)))
`

// equivalence are programs whose receipts must agree, warm or cold, on
// everything but timings, the box and memory.
var equivalence = []struct {
	name, code string
	flags      []string
}{
	// A run the user opened the network to takes a warm box of its own
	// kind, whose python3 started with the proxy in its environment: it
	// comes first, so that the plain world below is checked on a VM
	// that has such boxes too.
	{"the program's world, the network opened", worldCode + `
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
print("proxy", s.recv(4096).split(b"\r\n")[0])
`, []string{"--max-output-bytes", "8192", "--allow-net", "127.0.0.1:2"}},
	{"the program's world", worldCode, []string{"--max-output-bytes", "8192"}},
	{"an uncaught exception", "def f():\n    raise ValueError('boom')\nf()\n", nil},
	{"a syntax error", "x = (1,\nprint('never')\n", nil},
	{"sys.exit with a code", "import sys\nprint('out')\nsys.exit(3)\n", nil},
	{"sys.exit with a message", "import sys\nsys.exit('bad input')\n", nil},
	{"atexit and unflushed output", "import atexit, sys\natexit.register(lambda: print('at exit'))\nsys.stdout.write('no newline, not flushed')\n", nil},
	{"SIGTERM to itself", "import os, signal\nprint('before', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\nprint('after')\n", nil},
	{"SIGINT to itself", "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(1)\n", nil},
	{"a thread outliving the main code", "import threading, time\ndef late():\n    time.sleep(0.3); print('thread done', flush=True)\nthreading.Thread(target=late).start()\nprint('main done', flush=True)\n", nil},
	{"multiprocessing", "import multiprocessing as mp\ndef sq(x):\n    return x * x\nif __name__ == '__main__':\n    with mp.Pool(2) as p:\n        print(p.map(sq, range(5)))\n", nil},
	{"fork", "import os\npid = os.fork()\nif pid == 0:\n    print('child', flush=True); os._exit(7)\n_, st = os.waitpid(pid, 0)\nprint('parent saw', os.waitstatus_to_exitcode(st))\n", nil},
	{"sys.exit with a code past 255", "import sys\nsys.exit(256 + 7)\n", nil},
	{"sys.exit with a code past 64 bits", "import sys\nsys.exit(2 ** 70)\n", nil},
	{"__del__ and an unclosed file at exit", "class Bye:\n    def __del__(self):\n        print('bye from __del__')\nb = Bye()\nf = open('/tmp/output/unclosed.txt', 'w')\nf.write('written, never closed')\nprint('main done')\n", nil},
	{"cyclic garbage at exit", "import gc\ngc.disable()\nclass Cycle:\n    def __del__(self):\n        print('cycle collected')\nc = Cycle()\nc.me = c\ndel c\nprint('main done')\n", nil},
	{"a daemon thread still running", "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\nprint('main done')\n", nil},
	{"sys.stdout closed by the program", "import sys\nprint('to stderr', file=sys.stderr)\nsys.stdout.close()\n", nil},
	{"a sys.stdout that cannot flush", "import sys\nclass W:\n    def write(self, s):\n        return len(s)\n    def flush(self):\n        raise OSError('no flush')\nsys.stdout = W()\nprint('lost')\n", nil},
	{"interleaved streams", "import sys\nfor i in range(5):\n    print('out', i, flush=True); print('err', i, file=sys.stderr, flush=True)\n", nil},
	{"large and non-UTF-8 output", "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe' + b'y' * 20000)\nsys.stderr.write('z' * 9000)\n", []string{"--max-output-bytes", "100"}},
	{"input and output files", "import shutil\nprint(open('/tmp/input/in.txt').read())\nshutil.copy('/tmp/input/in.txt', '/tmp/output/copy.txt')\n", []string{"--file", "@in.txt"}},
	// The program's frame is the bottom of its stack, as -c makes it.
	{"the stack", "import sys, inspect, traceback\nf = sys._getframe()\nwhile f:\n    print(f.f_code.co_filename, f.f_code.co_name, f.f_lineno); f = f.f_back\nprint(len(inspect.stack()))\ntraceback.print_stack()\n", nil},
	{"a faulthandler dump", "import faulthandler, sys\ndef f():\n    faulthandler.dump_traceback(sys.stdout)\nf()\n", nil},
	{"the recursion depth", "n = 0\ndef f():\n    global n\n    n += 1\n    f()\ntry:\n    f()\nexcept RecursionError:\n    print(n)\n", nil},
	{"a warning's stacklevel", "import warnings\ndef g():\n    warnings.warn('from g', stacklevel=2)\ng()\nwarnings.warn('top', stacklevel=2)\nprint(__warningregistry__)\n", nil},
	{"the collector", "import gc\nprint(gc.get_stats(), gc.get_count()[1:], gc.get_threshold(), gc.collect(), gc.garbage, gc.isenabled())\n", nil},
	{"what the process was given", "import os, sys, resource\nprint(len(os.listdir('/proc/self/task')), resource.getrusage(resource.RUSAGE_CHILDREN))\nprint(sys.stdin.seekable(), os.readlink('/proc/self/fd/0'), os.readlink('/proc/self/exe'))\nimport warnings\nprint(warnings.filters)\n", nil},
	{"KeyboardInterrupt", "raise KeyboardInterrupt\n", nil},
	{"__del__ using a module at exit", "import os\nclass D:\n    def __del__(self):\n        print('del', os.getpid() > 0, os.sep)\nd = D()\n", nil},
	{"a file left open in a cycle", "class C: pass\nc = C(); c.me = c\nc.f = open('/tmp/output/cycle.txt', 'w'); c.f.write('written from a cycle')\ndel c\n", nil},
	{"a file left open in another module", "import json\njson.f = open('/tmp/output/module.txt', 'w'); json.f.write('written from json')\n", nil},
	{"os._exit replaced", "import os, sys\nos._exit = lambda c: None\nsys.exit(3)\n", nil},
	{"builtins.__import__ replaced", "import builtins\nbuiltins.__import__ = None\nprint('x')\nraise SystemExit(4)\n", nil},
	{"gc.collect replaced", "import gc\ngc.collect = None\nclass C:\n    def __del__(self): print('collected')\nc = C(); c.me = c\ndel c\n", nil},
	{"sys.modules['atexit'] replaced", "import sys, atexit\natexit.register(print, 'registered')\nsys.modules['atexit'] = None\n", nil},
	{"an unraisable exception", "class X:\n    def __del__(self): raise ValueError('in del')\nx = X(); del x\nprint('after')\n", nil},
}

// address is an object's address in a repr or a thread's id in a dump:
// random in every process.
var address = regexp.MustCompile(`0x[0-9a-f]{6,}`)

// comparable is a receipt with what may differ between a warm and a cold
// box (times, memory, the box, the ids that name the run) taken out.
func comparable(rc *wire.Receipt) string {
	c := *rc
	c.RunID, c.WallMS, c.CPU, c.Memory, c.Box, c.Agent = "", 0, wire.CPUTime{}, wire.Memory{}, nil, wire.AgentInfo{}
	c.Posture = nil
	if c.Network != nil {
		nw := *c.Network
		nw.Connections = slices.Clone(nw.Connections)
		for i := range nw.Connections {
			nw.Connections[i].Millis = 0
		}
		c.Network = &nw
	}
	c.Image.Digest = ""
	out, errOut := address.ReplaceAllString(c.Capture.Stdout, "0x…"), address.ReplaceAllString(c.Capture.Stderr, "0x…")
	// An address's length varies: the byte counts of a stream that
	// held one are not compared.
	if out != c.Capture.Stdout {
		c.Capture.StdoutInfo.Bytes, c.Capture.StdoutInfo.KeptBytes = 0, 0
	}
	if errOut != c.Capture.Stderr {
		c.Capture.StderrInfo.Bytes, c.Capture.StderrInfo.KeptBytes = 0, 0
	}
	// The files are compared as the receipt gives them (JSON), so that
	// a pointer's address is never what differs.
	files, _ := json.Marshal(c.Output)
	network, _ := json.Marshal(c.Network) // each connection's time taken out above
	return fmt.Sprintf("%s|%s|%v|%s|%+v|%q|%q|%+v|%s|%s", c.Status, c.Reason, deref(c.ExitCode), c.Signal, c.Capture.StdoutInfo,
		out, errOut, c.Capture.StderrInfo, files, network)
}

// modulesLine reads a "modules ..." line of the program's output, and
// takes it out of the receipt's stdout so that the rest can be compared.
func modulesLine(rc *wire.Receipt) map[string]bool {
	lines := strings.Split(rc.Capture.Stdout, "\n")
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(l, "modules "); ok {
			m := map[string]bool{}
			for _, name := range strings.Fields(rest) {
				m[name] = true
			}
			rc.Capture.Stdout = strings.Join(append(lines[:i:i], lines[i+1:]...), "\n")
			rc.Capture.StdoutInfo = wire.Stream{}
			return m
		}
	}
	return nil
}

// preloadClosure is every module a cold box holds after importing the
// preload list.
var preloadClosures = map[string]map[string]bool{}

func preloadClosure(t *testing.T, cold *vmEnv, preload []string) map[string]bool {
	key := strings.Join(preload, ",")
	if m, ok := preloadClosures[key]; ok {
		return m
	}
	code := "import sys\n"
	for _, p := range preload {
		code += "import " + p + "\n"
	}
	code += "print('modules', ' '.join(sorted(sys.modules)))\n"
	m := modulesLine(runPy(t, cold, code, "--timeout", "20").receipt(t))
	preloadClosures[key] = m
	return m
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestWarmEquivalence(t *testing.T) {
	warm := boxVM(t)
	cold := coldVM(t)

	// A VM without warm boxes says so in every receipt and in its status.
	t.Run("warm boxes off", func(t *testing.T) {
		rc := runPy(t, cold, `print(1)`, "--timeout", "10").receipt(t)
		if rc.Box == nil || rc.Box.Warm || !strings.Contains(rc.Box.Fallback, "--warm 0") {
			t.Errorf("box %+v", rc.Box)
		}
		out, _, _ := cold.pybox("vm", "status")
		if !strings.Contains(out, "warm stdlib:    off") {
			t.Errorf("vm status:\n%s", out)
		}
	})

	// Code holding a NUL is refused before anything runs, the same way
	// whatever box would have run it.
	t.Run("a NUL in the code", func(t *testing.T) {
		prog := filepath.Join(t.TempDir(), "nul.py")
		os.WriteFile(prog, []byte("print('before')\nx = '\x00'\n"), 0o644)
		var said []string
		for _, e := range []*vmEnv{warm, cold} {
			e.t = t
			out, errOut, code := e.pybox("run", prog)
			if code != exitUsage || out != "" || !strings.Contains(errOut, "NUL character (U+0000) on line 2") {
				t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			said = append(said, errOut)
		}
		if said[0] != said[1] {
			t.Errorf("warm and cold VMs refused it differently:\n%s\n%s", said[0], said[1])
		}
	})

	in := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(in, []byte("input text\n"), 0o644)
	for _, c := range equivalence {
		t.Run(c.name, func(t *testing.T) {
			flags := []string{"--timeout", "20"}
			for _, f := range c.flags {
				flags = append(flags, strings.Replace(f, "@in.txt", in, 1))
			}
			if slices.Contains(c.flags, "--file") || strings.Contains(c.code, "/tmp/output/") {
				flags = append(flags, "--out", t.TempDir())
			}
			if slices.Contains(c.flags, "--allow-net") {
				// The image's first run that opens the network starts
				// its boxes with the proxy.
				runPy(t, warm, "pass", "--allow-net", "127.0.0.1:2")
				waitWarmReady(t, warm.home, "stdlib (with the proxy)")
			} else {
				waitWarmReady(t, warm.home, "stdlib")
			}
			w := runPy(t, warm, c.code, flags...).receipt(t)
			k := runPy(t, cold, c.code, flags...).receipt(t)
			if w.Box == nil || !w.Box.Warm {
				t.Fatalf("the warm VM ran it cold: %+v", w.Box)
			}
			if k.Box == nil || k.Box.Warm || !strings.Contains(k.Box.Fallback, "off") {
				t.Fatalf("the cold VM's box: %+v", k.Box)
			}
			if w.Cleanup.Status != wire.CleanupRemoved || k.Cleanup.Status != wire.CleanupRemoved {
				t.Errorf("cleanup warm %+v, cold %+v", w.Cleanup, k.Cleanup)
			}
			// The one difference allowed: what the preload imported is
			// in sys.modules already.
			wm, km := modulesLine(w), modulesLine(k)
			if wm != nil {
				closure := preloadClosure(t, cold, w.Box.Preloaded)
				for m := range km {
					if !wm[m] {
						t.Errorf("the warm box lacks module %s", m)
					}
				}
				for m := range wm {
					if !km[m] && !closure[m] {
						t.Errorf("the warm box has module %s, which neither a cold box nor the preload (%v) imports", m, w.Box.Preloaded)
					}
				}
			}
			if cw, ck := comparable(w), comparable(k); cw != ck {
				t.Errorf("warm and cold disagree:\nwarm: %s\ncold: %s", cw, ck)
			}
		})
	}
}

// dataEquivalence are data-image programs, with a data folder, whose
// receipts must agree warm and cold: what numpy, pandas and matplotlib
// do when imported (a preloaded warm box did it before the program) is
// there only for a program that imports them.
var dataEquivalence = []struct{ name, code string }{
	{"a program that imports nothing", `import os, resource, warnings, threading
print("threads", len(os.listdir("/proc/self/task")), threading.active_count())
print("children", resource.getrusage(resource.RUSAGE_CHILDREN))
print("filters", warnings.filters)
print("environ", sorted(open("/proc/self/environ", "rb").read().split(b"\0")))
`},
	{"a program that imports numpy", `import numpy, os, warnings
print("threads", len(os.listdir("/proc/self/task")))
print("filters", len(warnings.filters), warnings.filters[:4])
print(numpy.arange(10).sum(), numpy.linalg.inv(numpy.eye(3)).trace())
`},
	{"pandas on a data folder", `import pandas as pd
df = pd.read_csv("/data/sales/sales.csv")
print(df.groupby("region")["units"].sum().to_dict())
try:
    open("/data/sales/new.csv", "w")
except OSError as e:
    print("write:", type(e).__name__, e.errno)
`},
	// The host ids a box's root maps to differ from box to box (its
	// slot), warm or cold: the tmpfs options show them.
	{"the data folder's mounts", `import os, re
st = os.stat("/data")
print(oct(st.st_mode), st.st_uid, st.st_gid, os.listdir("/data"), sorted(os.listdir("/data/sales")))
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4].startswith("/data"):
        sep = f.index("-")
        print(f[3], f[4], f[5], f[6:sep], f[sep + 1:sep + 3], re.sub(r"(uid|gid)=\d+", r"\1=(slot)", f[sep + 3]))
`},
	{"a matplotlib chart", `import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig = plt.figure(); plt.plot([1, 3, 2]); fig.savefig("/tmp/output/chart.png")
print(len(plt.get_fignums()))
`},
}

// A call on the data image takes a warm box, data folders included, and
// its program sees what a cold box's sees: the same output for the
// table above, and the same memory it may allocate.
func TestWarmEquivalenceData(t *testing.T) {
	folder := openTempDir(t)
	csv := "region,units\n"
	for i := range 200 {
		csv += fmt.Sprintf("%s,%d\n", []string{"north", "south", "east"}[i%3], i)
	}
	os.WriteFile(filepath.Join(folder, "sales.csv"), []byte(csv), 0o644)
	os.Mkdir(filepath.Join(folder, "sub"), 0o755)
	start := func(warmBoxes string) *vmEnv {
		e := newVMEnv(t)
		linkImages(t, e, "stdlib", "data")
		e.mustStart("--images", "stdlib,data", "--memory", "1024", "--warm", warmBoxes, "--data", "sales="+folder)
		return e
	}
	warm, cold := start("1"), start("0")
	flags := []string{"--image", "data", "--data", "sales", "--timeout", "30"}
	for _, c := range dataEquivalence {
		t.Run(c.name, func(t *testing.T) {
			fl := flags
			if strings.Contains(c.code, "/tmp/output/") {
				fl = append(slices.Clone(flags), "--out", t.TempDir())
			}
			waitWarmReady(t, warm.home, "data")
			w := runPy(t, warm, c.code, fl...).receipt(t)
			k := runPy(t, cold, c.code, fl...).receipt(t)
			if w.Box == nil || !w.Box.Warm {
				t.Fatalf("the warm VM ran it cold: %+v", w.Box)
			}
			if w.Status != wire.StatusOK || w.Cleanup.Status != wire.CleanupRemoved || k.Cleanup.Status != wire.CleanupRemoved {
				t.Errorf("warm %s (%s), cleanup warm %+v, cold %+v\n%s", w.Status, w.Reason, w.Cleanup, k.Cleanup, w.Capture.Stderr)
			}
			if cw, ck := comparable(w), comparable(k); cw != ck {
				t.Errorf("warm and cold disagree:\nwarm: %s\ncold: %s", cw, ck)
			}
		})
	}

	// What a program can allocate before the OOM killer ends it: the
	// preload's memory is on top of a cold box's limit, its page cache
	// not.
	t.Run("memory a program can allocate", func(t *testing.T) {
		const grab = "held = []\nwhile True:\n    held.append(bytearray(4 << 20))\n    print(len(held) * 4, flush=True)\n"
		most := func(e *vmEnv) (int, *wire.Receipt) {
			waitWarmReady(t, warm.home, "data")
			rc := runPy(t, e, grab, flags...).receipt(t)
			lines := strings.Fields(rc.Capture.Stdout)
			if rc.Status != wire.StatusOOM || len(lines) == 0 {
				t.Fatalf("status %s (%s), stdout %.200q", rc.Status, rc.Reason, rc.Capture.Stdout)
			}
			n, _ := strconv.Atoi(lines[len(lines)-1])
			return n, rc
		}
		w, wr := most(warm)
		k, _ := most(cold)
		t.Logf("allocated before the OOM kill: warm %d MiB (preload %d MiB, limit %d MiB), cold %d MiB",
			w, wr.Memory.PreloadBytes>>20, wr.Memory.LimitBytes>>20, k)
		if wr.Box == nil || !wr.Box.Warm || w < k-16 || w > k+16 {
			t.Errorf("warm %d MiB, cold %d MiB: a warm box's program may allocate what a cold box's may, within 16 MiB", w, k)
		}
	})
	expectClean(t, warm)
	expectClean(t, cold)
}

// Values that a box made by forking one template would repeat differ
// from run to run; nothing of a run (a file in /tmp or /dev/shm, an
// abstract socket, a process), nor of the warm box waiting next, is
// visible to the next run.
func TestWarmFreshness(t *testing.T) {
	e := boxVM(t)
	const probe = `
import ctypes, os, random, tempfile, uuid
print("random", random.random())
print("hash", hash("pybox"))
print("temp", tempfile.mktemp())
print("uuid", uuid.uuid4())
print("addr", ctypes.addressof(ctypes.create_string_buffer(16)))
print("urandom", os.urandom(8).hex())
print("pids", sorted(p for p in os.listdir("/proc") if p.isdigit()) == sorted(["1", str(os.getpid())]))
# What an earlier run left, or a later one could find: shared memory,
# abstract sockets, SysV IPC, files in /tmp.
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        return e.strerror
def ipc(kind):
    try:
        return len(open("/proc/sysvipc/" + kind).readlines()) - 1
    except OSError:
        return 0
abstract = [f[-1] for f in (l.split() for l in open("/proc/net/unix").readlines()[1:]) if len(f) > 7 and f[-1].startswith("@")]
shm = listing("/dev/shm") if os.path.isdir("/dev/shm") else []
tmp = [n for n in listing("/tmp") if n != ".config"]  # the box's matplotlib config
found = [shm, abstract, ipc("shm"), ipc("msg"), ipc("sem"), tmp]
print("found", "nothing" if found == [[], [], 0, 0, 0, ["input", "output"]] else found)
import socket
try:
    open("/dev/shm/pybox-left", "w").write("left")
except OSError:
    pass
open("/tmp/pybox-left", "w").write("left")
left = socket.socket(socket.AF_UNIX)
left.bind("\0pybox-left")
left.listen()
`
	seen := map[string]map[string]bool{}
	line := regexp.MustCompile(`(?m)^(\w+) (.*)$`)
	for i := range 3 {
		waitWarmReady(t, e.home, "stdlib")
		rc := expectEnd(t, runPy(t, e, probe, "--timeout", "10"), wire.StatusOK)
		if rc.Box == nil || !rc.Box.Warm {
			t.Errorf("run %d was not warm: %+v", i, rc.Box)
		}
		for _, m := range line.FindAllStringSubmatch(rc.Capture.Stdout, -1) {
			if m[1] == "pids" {
				if m[2] != "True" {
					t.Errorf("run %d sees processes besides box-init and itself", i)
				}
				continue
			}
			if m[1] == "found" {
				if m[2] != "nothing" {
					t.Errorf("run %d found [/dev/shm, abstract sockets, SysV shm, msg, sem, /tmp] %s", i, m[2])
				}
				continue
			}
			if seen[m[1]] == nil {
				seen[m[1]] = map[string]bool{}
			}
			if seen[m[1]][m[2]] {
				t.Errorf("run %d repeats %s %s", i, m[1], m[2])
			}
			seen[m[1]][m[2]] = true
		}
	}
	if len(seen) != 6 {
		t.Errorf("probes seen: %v", seen)
	}
	expectClean(t, e)
}

// A warm box discarded or killed while it waits is replaced at once; a
// call that comes while the next one warms, and imports what it
// preloads, takes it as it is.
func TestWarmReplaced(t *testing.T) {
	e := boxVM(t)
	if got := agentConsole(t, e.home, "warm discard stdlib"); !strings.Contains(got, "discarded stdlib's warm box") {
		t.Fatalf("the console said %q", got)
	}
	status := agentConsole(t, e.home, "warm")
	if !strings.Contains(status, "stdlib: warming") && !strings.Contains(status, "stdlib: ready") {
		t.Errorf("after the discard: %q", status)
	}
	// The program imports the last module of the preload list: whatever
	// module the new box is at, the program needs it, and takes the box.
	rc := expectEnd(t, runPy(t, e, "import dataclasses\nprint('after the discard')", "--timeout", "10"), wire.StatusOK)
	if rc.Box == nil || !rc.Box.Warm {
		t.Errorf("the call after the discard ran %+v", rc.Box)
	}
	t.Logf("the call after the discard: box %+v", rc.Box)
	if log := agentConsole(t, e.home, "log"); !strings.Contains(log, "discarded: discarded from the console") {
		t.Errorf("the log does not say the box was discarded:\n%s", log)
	}

	// A waiting box killed as the OOM killer would kill it: the agent
	// notices, says why, and the next call runs in the box warmed after.
	if got := agentConsole(t, e.home, "warm kill stdlib"); !strings.Contains(got, "killed stdlib's warm box") {
		t.Fatalf("the console said %q", got)
	}
	noticed := false
	for deadline := time.Now().Add(10 * time.Second); !noticed && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		noticed = strings.Contains(agentConsole(t, e.home, "log"), "the warm box ended while it waited (killed by SIGKILL)")
	}
	if !noticed {
		t.Fatalf("the agent did not notice the killed box:\n%s", agentConsole(t, e.home, "log"))
	}
	rc = expectEnd(t, runPy(t, e, "import dataclasses\nprint('after the kill')", "--timeout", "10"), wire.StatusOK)
	if rc.Box == nil || !rc.Box.Warm || rc.Capture.Stdout != "after the kill\n" {
		t.Errorf("the call after the kill ran %+v: %q", rc.Box, rc.Capture.Stdout)
	}
	expectClean(t, e)
}

// An image whose preload imports at build time (as root, in the build's
// chroot) but fails in a box (as the box's unprivileged user) runs its
// programs in cold boxes that say why; after three failures in a row it
// stops trying until the VM restarts, and other images stay warm. A call
// that comes while a box still warms takes it as it is when it imports
// the module in progress (its preload stops at the next module, before
// the one that fails), and a cold box when it does not.
func TestWarmPreloadFails(t *testing.T) {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	dir := t.TempDir()
	modules := map[string]string{
		"pybox_slow.py":     "import time\ntime.sleep(3)\n",
		"pybox_slower.py":   "import time\ntime.sleep(6)\n",
		"pybox_rootonly.py": "import os\nif os.getuid() != 0:\n    raise ImportError('this module imports only as root')\n",
	}
	args := []string{"image", "build", "rootonly", "--from", "stdlib", "--preload", "json,pybox_slow,pybox_slower,pybox_rootonly"}
	for name, src := range modules {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--add", filepath.Join(dir, name)+":/usr/lib/python3/dist-packages/"+name)
	}
	out, errOut, code := e.pybox(args...)
	if code != 0 {
		t.Fatalf("image build: exit %d\n%s\n%s", code, out, errOut)
	}
	e.mustStart("--images", "stdlib,rootonly", "--memory", "1024")

	const probe = "import sys\nprint(sorted(m for m in ('json', 'pybox_slow', 'pybox_slower', 'pybox_rootonly') if m in sys.modules))\n"
	// At once: the box warmed at boot is still in its preload. The
	// program imports pybox_slow too, so it takes the box as it is.
	rc := runPy(t, e, "import sys\nbefore = sorted(m for m in ('json', 'pybox_slow', 'pybox_rootonly') if m in sys.modules)\nimport pybox_slow\nprint(before)\n",
		"--image", "rootonly", "--timeout", "10").receipt(t)
	if rc.Box == nil {
		t.Fatalf("no box in the receipt: %+v", rc)
	}
	want := "[" + strings.Join(mapSlice(rc.Box.Preloaded, func(m string) string { return "'" + m + "'" }), ", ") + "]\n"
	if rc.Status != wire.StatusOK || !rc.Box.Warm || slices.Contains(rc.Box.Preloaded, "pybox_rootonly") || rc.Capture.Stdout != want {
		t.Errorf("the call during the preload: status %s, box %+v, stdout %q", rc.Status, rc.Box, rc.Capture.Stdout)
	}
	t.Logf("the call during the preload ran with %v imported", rc.Box.Preloaded)

	// The next box, importing pybox_slow: a program that does not import
	// it runs in a cold box at once.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(agentConsole(t, e.home, "warm"), "importing pybox_slow"); {
		if time.Now().After(deadline) {
			t.Fatalf("the next box never reached pybox_slow: %q", agentConsole(t, e.home, "warm"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	rc = runPy(t, e, probe, "--image", "rootonly", "--timeout", "10").receipt(t)
	if rc.Status != wire.StatusOK || rc.Box == nil || rc.Box.Warm || !strings.Contains(rc.Box.Fallback, "still importing pybox_slow, which the program does not import") || rc.Capture.Stdout != "[]\n" {
		t.Errorf("the call that needs nothing of the preload: status %s, box %+v, stdout %q", rc.Status, rc.Box, rc.Capture.Stdout)
	}

	// The same box, importing pybox_slower (six seconds): a program that
	// imports it waits for that import, longer than any one exchange of
	// the hand-over may take, and runs warm.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(agentConsole(t, e.home, "warm"), "importing pybox_slower"); {
		if time.Now().After(deadline) {
			t.Fatalf("the box never reached pybox_slower: %q", agentConsole(t, e.home, "warm"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	rc = runPy(t, e, "import pybox_slower\n"+probe, "--image", "rootonly", "--timeout", "10").receipt(t)
	if rc.Status != wire.StatusOK || rc.Box == nil || !rc.Box.Warm || rc.Capture.Stdout != "['json', 'pybox_slow', 'pybox_slower']\n" {
		t.Errorf("the call that waited for pybox_slower: status %s, box %+v, stdout %q", rc.Status, rc.Box, rc.Capture.Stdout)
	}

	failures := func() int {
		return strings.Count(agentConsole(t, e.home, "log"), "the preload failed: pybox_rootonly")
	}
	for i := range 4 {
		// A call that comes while the box warms would take it as it is,
		// before its preload reaches the failing module: each call here
		// comes once the box warmed for it has failed.
		for deadline := time.Now().Add(time.Minute); failures() < min(i+1, 3) && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
		}
		rc = runPy(t, e, probe, "--image", "rootonly", "--timeout", "10").receipt(t)
		if rc.Status != wire.StatusOK || rc.Cleanup.Status != wire.CleanupRemoved || rc.Image.Name != "rootonly" {
			t.Errorf("run %d: status %s (%s), cleanup %+v, image %+v", i, rc.Status, rc.Reason, rc.Cleanup, rc.Image)
		}
		if rc.Capture.Stdout != "[]\n" {
			t.Errorf("run %d: stdout %q: a cold box imports nothing ahead", i, rc.Capture.Stdout)
		}
		if i == 0 && rc.Box != nil && strings.Contains(rc.Box.Fallback, "3 failures") {
			t.Errorf("run %d: %s", i, rc.Box.Fallback)
		}
		if rc.Box == nil || rc.Box.Warm || !strings.Contains(rc.Box.Fallback, "the preload failed: pybox_rootonly: ImportError: this module imports only as root") {
			t.Fatalf("run %d: box %+v", i, rc.Box)
		}
		if rc.Memory.PreloadBytes != 0 || rc.Memory.LimitBytes != 512<<20 {
			t.Errorf("run %d: memory %+v", i, rc.Memory)
		}
		t.Logf("run %d: %s", i, rc.Box.Fallback)
		if i == 3 && !strings.Contains(rc.Box.Fallback, "runs cold until the VM restarts") {
			t.Errorf("after three failures: %q", rc.Box.Fallback)
		}
	}
	if n := failures(); n != 3 {
		t.Errorf("the agent tried the warm box %d times, not three:\n%s", n, agentConsole(t, e.home, "log"))
	}
	rc = expectEnd(t, runPy(t, e, `print("stdlib")`, "--timeout", "10"), wire.StatusOK)
	if rc.Box == nil || !rc.Box.Warm {
		t.Errorf("stdlib ran %+v", rc.Box)
	}
	if out, _, _ := e.pybox("vm", "status"); !strings.Contains(out, "runs cold until the VM restarts") {
		t.Errorf("vm status:\n%s", out)
	}
	expectClean(t, e)
}

// waitWarmReady waits until image's warm box is ready.
func waitWarmReady(t testing.TB, home, image string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		status := agentConsole(t, home, "warm")
		if strings.Contains(status, image+": ready") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's warm box was not ready within 2 minutes: %q", image, status)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func mapSlice[T, U any](s []T, f func(T) U) []U {
	out := make([]U, 0, len(s))
	for _, v := range s {
		out = append(out, f(v))
	}
	return out
}
