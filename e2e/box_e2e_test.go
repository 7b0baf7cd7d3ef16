package e2e

// End-to-end tests of the sealed box: programs run through the
// real `pybox run --json` against one real VM with the stdlib image, and
// the tests assert what a user would read in the receipt. TestBox covers
// the box's own behaviour (outcomes, limits, output files, one run at a
// time); hostile_e2e_test.go covers the hostile inputs class by class. Both share
// the VM that boxVM starts, which TestMain stops after the last test.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pybox/host/image"
	"pybox/host/paths"
	"pybox/host/vm"
	"pybox/shared/archs"
	"pybox/shared/needs"
	"pybox/shared/wire"
)

// sharedVM is the VM of the box and hostile suites: started once, by
// whichever of their tests runs first, and stopped after the last test
// (see TestMain's atExit).
var sharedVM struct {
	once   sync.Once
	env    *vmEnv // its t is the test that started it: use boxVM(t)
	skip   string // why the suite cannot run here (a skip, or a failure in CI)
	err    error
	digest string      // the stdlib image's digest, from the store
	base   *agentStats // the agent at rest after the first run
	runs   atomic.Int64
}

// boxVM returns the shared VM for test t, starting it the first time.
func boxVM(t *testing.T) *vmEnv {
	t.Helper()
	// Each test skips (or fails in CI) by itself when the guest is not
	// built, before the VM is started or asked for.
	guestArtifactsForTest(t)
	sharedVM.once.Do(func() { startBoxVM(t) })
	if sharedVM.skip != "" {
		needs.Unavailable(t, sharedVM.skip)
	}
	if sharedVM.err != nil {
		t.Fatal(sharedVM.err)
	}
	e := *sharedVM.env
	e.t = t
	return &e
}

// startBoxVM boots the shared VM with the stdlib image. Its home is a
// temporary directory whose store links to the user's stdlib image (the
// one `make images` built), so nothing is copied.
func startBoxVM(t *testing.T) {
	// Until the VM answers, later tests see why it did not.
	sharedVM.err = fmt.Errorf("the shared VM did not start: see the log of %s", t.Name())
	k, i := guestArtifactsForTest(t)
	home, err := os.MkdirTemp("", "pybox-box")
	if err != nil {
		sharedVM.err = err
		return
	}
	missing, err := linkImagesInto(home, guestArch, "stdlib")
	if err != nil || missing != "" {
		sharedVM.skip, sharedVM.err = missing, err
		return
	}
	if _, sharedVM.digest, err = image.Lookup(home, "stdlib", guestArch); err != nil {
		sharedVM.err = err
		return
	}
	e := &vmEnv{t: t, bin: pyboxBin(t), home: home, arch: guestArch}
	e.env = append(os.Environ(), "PYBOX_HOME="+home, "PYBOX_KERNEL="+k, "PYBOX_INITRAMFS="+i)
	sharedVM.env = e
	atExit = append(atExit, func() { stopSharedVM(e) })
	// The product's default memory: a run's 512 MiB limit must be what
	// stops a memory bomb, not the VM running out. One CPU: the test
	// host's cores are shared.
	e.mustStart("--memory", strconv.Itoa(vm.DefaultMemoryMiB), "--images", "stdlib")
	// The baseline is taken after one run, so that what the first run
	// sets up once (the Go heap's first growth) does not count as a leak.
	r := runPy(t, e, `print("warm")`, "--timeout", "10")
	if r.Receipt == nil || r.Receipt.Status != wire.StatusOK {
		sharedVM.err = fmt.Errorf("the first run on the new VM failed:\n%s\n%s", r.raw, r.stderr)
		return
	}
	sharedVM.base = agentAtRest(t, home, nil)
	sharedVM.err = nil
	t.Logf("the agent at rest after the first run: %v", sharedVM.base)
}

// stopSharedVM stops a VM that several tests shared and removes its home.
func stopSharedVM(e *vmEnv) {
	cmd := exec.Command(e.bin, "vm", "stop")
	cmd.Env = e.env
	cmd.Run()
	e.killAll()
	os.RemoveAll(e.home)
}

// boxRun is one `pybox run --json` and what came of it.
type boxRun struct {
	Receipt *wire.Receipt     `json:"receipt"`
	Files   []wire.OutputFile `json:"files"`
	RunID   string            `json:"run_id"` // set when no receipt came
	Error   *wire.Error       `json:"error"`

	code    int           // pybox's exit status
	raw     string        // pybox's stdout
	stderr  string        // pybox's stderr: the human summary
	elapsed time.Duration // the whole command, as a user waits for it
}

// runPy runs code through `pybox run --json FLAGS... FILE`. It fails the
// test unless pybox printed exactly one JSON document.
func runPy(t testing.TB, e *vmEnv, code string, flags ...string) *boxRun {
	t.Helper()
	return startRun(t, e, code, flags...)()
}

// runCmdFor prepares `pybox run --json FLAGS... FILE` with code in FILE.
func runCmdFor(t testing.TB, e *vmEnv, code string, flags ...string) *exec.Cmd {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "prog-*.py")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(code)
	f.Close()
	args := append(append([]string{"run", "--json"}, flags...), f.Name())
	cmd := exec.Command(e.bin, args...)
	cmd.Env = e.env
	return cmd
}

func finishRun(t testing.TB, cmd *exec.Cmd, err error, d time.Duration, stdout, stderr string) *boxRun {
	t.Helper()
	sharedVM.runs.Add(1)
	r := &boxRun{raw: stdout, stderr: stderr, elapsed: d}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("pybox %v: %v", cmd.Args[1:], err)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	if err := dec.Decode(r); err != nil {
		t.Fatalf("pybox run --json printed no JSON (%v):\nstdout: %.3000s\nstderr: %s", err, stdout, stderr)
	}
	if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) > 0 || dec.More() {
		t.Fatalf("pybox run --json printed more than one JSON document:\n%.3000s", stdout)
	}
	return r
}

// receipt returns the run's receipt, failing the test when there is none.
func (r *boxRun) receipt(t testing.TB) *wire.Receipt {
	t.Helper()
	if r.Receipt == nil {
		t.Fatalf("no receipt: exit %d\nstdout: %.3000s\nstderr: %s", r.code, r.raw, r.stderr)
	}
	return r.Receipt
}

// dump is the receipt for a failure message.
func (r *boxRun) dump() string {
	b, _ := json.MarshalIndent(r.Receipt, "", "  ")
	return fmt.Sprintf("%.6000s\npybox stderr: %.2000s", b, r.stderr)
}

// expectEnd checks what every finished run's receipt must say, then its
// status: the box's posture before the program started, a final memory
// reading, cleanup REMOVED, and pybox's exit status agreeing with it.
func expectEnd(t testing.TB, r *boxRun, status string) *wire.Receipt {
	t.Helper()
	rc := r.receipt(t)
	if rc.Status != status {
		t.Errorf("status %q, want %q (%s)", rc.Status, status, rc.Reason)
	}
	if rc.Cleanup.Status != wire.CleanupRemoved {
		t.Errorf("cleanup %+v, want REMOVED", rc.Cleanup)
	}
	if rc.SchemaVersion != wire.ReceiptSchemaVersion || rc.RunID == "" || rc.Image.Name != "stdlib" ||
		rc.Image.Digest != sharedVM.digest || rc.Agent.Version == "" || rc.Agent.Kernel == "" {
		t.Errorf("receipt header: schema %d, run %q, image %+v (store digest %s), agent %+v",
			rc.SchemaVersion, rc.RunID, rc.Image, sharedVM.digest, rc.Agent)
	}
	if rc.Limits.MemoryBytes != wire.DefaultMemoryBytes || rc.Limits.PidsMax != wire.DefaultPidsMax ||
		rc.Limits.TmpBytes != wire.DefaultTmpBytes || rc.Limits.TmpInodes != wire.DefaultTmpInodes {
		t.Errorf("limits %+v", rc.Limits)
	}
	// A warm box's limit is the program's 512 MiB on top of its preload.
	if rc.Memory.Reading != "final" || rc.Memory.LimitBytes != wire.DefaultMemoryBytes+rc.Memory.PreloadBytes || rc.Memory.PeakBytes <= 0 {
		t.Errorf("memory %+v: want a final reading against the 512 MiB limit (on top of any preload)", rc.Memory)
	}
	expectPosture(t, rc.Posture)
	ok := rc.Status == wire.StatusOK && rc.Cleanup.Status == wire.CleanupRemoved
	if ok != (r.code == 0) {
		t.Errorf("pybox exited %d for status %s, cleanup %s", r.code, rc.Status, rc.Cleanup.Status)
	}
	if t.Failed() {
		t.Logf("receipt: %s", r.dump())
	}
	return rc
}

// expectPosture checks what the box's first process saw of itself just
// before it started the program.
func expectPosture(t testing.TB, p *wire.Posture) {
	t.Helper()
	want := []string{"cgroup", "ipc", "mnt", "net", "pid", "user", "uts"}
	if p == nil {
		t.Errorf("the receipt has no posture")
		return
	}
	ns := slices.Sorted(slices.Values(p.Namespaces))
	if !p.OK || p.CapEff != "0000000000000000" || !p.NoNewPrivs || p.Seccomp != 2 ||
		!slices.Equal(p.OpenFDs, []int{0, 1, 2}) || !p.ReadOnly || !slices.Equal(ns, want) || len(p.Problems) > 0 {
		t.Errorf("posture %+v: want ok, CapEff 0, no_new_privs, seccomp 2, fds 0-2, read-only root, new namespaces %v", *p, want)
	}
}

// expectExit checks the exit code and signal.
func expectExit(t testing.TB, rc *wire.Receipt, code int, signal string) {
	t.Helper()
	if rc.ExitCode == nil || *rc.ExitCode != code || rc.Signal != signal {
		got := "none"
		if rc.ExitCode != nil {
			got = strconv.Itoa(*rc.ExitCode)
		}
		t.Errorf("exit code %s, signal %q; want %d, %q", got, rc.Signal, code, signal)
	}
}

// The programs print one machine-readable line per probe:
// "RESULT name outcome".
var resultLine = regexp.MustCompile(`(?m)^RESULT (\S+) (.*)$`)

func results(stdout string) map[string]string {
	m := map[string]string{}
	for _, g := range resultLine.FindAllStringSubmatch(stdout, -1) {
		m[g[1]] = g[2]
	}
	return m
}

// probe is one RESULT line a program must print.
type probe struct{ name, want string }

// expectResults checks every probe's outcome; a probe with no line is a
// failure too (the program died before it).
func expectResults(t testing.TB, rc *wire.Receipt, probes []probe) {
	t.Helper()
	got := results(rc.Capture.Stdout)
	for _, p := range probes {
		if v, ok := got[p.name]; !ok {
			t.Errorf("%s: no RESULT line", p.name)
		} else if v != p.want {
			t.Errorf("%s: %s, want %s", p.name, v, p.want)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", rc.Capture.Stdout, rc.Capture.Stderr)
	}
}

// cleanProbe is a program that reports what an earlier run could have
// left behind where this one would see it.
const cleanProbe = `
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def res(name, v): print("RESULT", name, v)
res("tmp", ",".join(sorted(set(os.listdir("/tmp")) - {"input", "output", ".config"})) or "clean")
res("output", ",".join(os.listdir("/tmp/output")) or "empty")
res("shm", ",".join(os.listdir("/dev/shm")) or "empty")
for name, r in (("shmget", libc.shmget(0x7079, 0, 0)), ("semget", libc.semget(0x7079, 0, 0)), ("msgget", libc.msgget(0x7079, 0))):
    res(name, "found" if r >= 0 else errno.errorcode[ctypes.get_errno()])
res("sysvipc", sum(len(open("/proc/sysvipc/" + f).readlines()) - 1 for f in ("shm", "sem", "msg")))
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0pybox-leak"); res("abstract", "connected")
except OSError as e:
    res("abstract", errno.errorcode[e.errno])
res("hostname", socket.gethostname())
procs = sorted(p for p in os.listdir("/proc") if p.isdigit())
res("processes", "init+self" if procs == sorted(["1", str(os.getpid())]) else ",".join(procs))
`

// expectClean runs cleanProbe: the box it gets is as fresh as the first.
func expectClean(t testing.TB, e *vmEnv) {
	t.Helper()
	r := runPy(t, e, cleanProbe, "--timeout", "10")
	rc := expectEnd(t, r, wire.StatusOK)
	expectResults(t, rc, []probe{
		{"tmp", "clean"}, {"output", "empty"}, {"shm", "empty"},
		{"shmget", "ENOENT"}, {"semget", "ENOENT"}, {"msgget", "ENOENT"}, {"sysvipc", "0"},
		{"abstract", "ECONNREFUSED"}, {"hostname", "pybox"}, {"processes", "init+self"},
	})
}

// agentConsole sends one command to the guest agent's console prompt
// through the supervisor's console socket (as `pybox vm console` does)
// and returns what the console printed up to the next prompt. The agent
// prints a prompt only after it answered a line, and an attached console
// sees only what is printed after it attached.
func agentConsole(t testing.TB, home, cmd string) string {
	t.Helper()
	nc, err := net.Dial("unix", paths.ForVM(home).ConsoleSocket())
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write([]byte(cmd + "\n")); err != nil {
		t.Fatalf("console: %v", err)
	}
	prompt := []byte("pybox> ")
	var buf []byte
	chunk := make([]byte, 4096)
	for !bytes.Contains(buf, prompt) {
		n, err := nc.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if err != nil {
			t.Fatalf("console %q: no prompt after %q: %v", cmd, buf, err)
		}
	}
	return strings.ReplaceAll(string(buf[:bytes.Index(buf, prompt)]), "\r\n", "\n")
}

// agentStats is what the agent reports of itself on its console.
type agentStats struct {
	Goroutines  int
	FDs         int
	HeapInUse   int64 // KiB
	HeapFromOS  int64 // KiB: the Go runtime's high-water mark, never shrinks
	CgroupMem   int64 // bytes: the agent cgroup's memory.current
	CgroupPids  int   // the agent's threads
	RSS         int64 // KiB: the agent's resident set (VmRSS)
	Running     string
	Mounts      []string // the agent's mount table, one line per mount
	Warm        []string // each image's warm box: "IMAGE STATE"
	Cgroups     []string // the cgroups under /sys/fs/cgroup the agent shows
	statusLines string
}

func (a *agentStats) String() string {
	return fmt.Sprintf("goroutines %d, open fds %d, Go heap %d KiB in use and %d KiB from the OS, resident %d KiB, cgroup memory %d KiB, threads %d, %d mounts, cgroups %v",
		a.Goroutines, a.FDs, a.HeapInUse, a.HeapFromOS, a.RSS, a.CgroupMem>>10, a.CgroupPids, len(a.Mounts), a.Cgroups)
}

var (
	reGoroutines = regexp.MustCompile(`(?m)^goroutines\s+(\d+)`)
	reFDs        = regexp.MustCompile(`(?m)^open fds\s+(\d+)`)
	reHeap       = regexp.MustCompile(`(?m)^go heap\s+(\d+) KiB in use, (\d+) KiB from the OS`)
	// The agent's resident set: current, peak and anonymous, in KiB.
	reAgentMemory = regexp.MustCompile(`(?m)^memory\s+rss (\d+) KiB \(peak (\d+) KiB, anonymous (\d+) KiB\)`)
	reCgroupMem   = regexp.MustCompile(`(?m)^cgroup\s+.*memory\.current=(\d+)`)
	reCgroupPids  = regexp.MustCompile(`(?m)^cgroup\s+.*pids\.current=(\d+)`)
	reRunning     = regexp.MustCompile(`(?m)^running\s+(.*)$`)
	reWarmLine    = regexp.MustCompile(`(?m)^warm (\S+)\s+(\S+)`)
	// A warm box's cgroup and staging are named after its image and a
	// sequence number; the one waiting now is not the one that waited
	// before, but it takes the same place.
	reWarmName = regexp.MustCompile(`warm-(.+?)-[0-9]+\b`)
	// A warm box's /tmp belongs to its uid slot, which turns over.
	reSlotIDs = regexp.MustCompile(`uid=[0-9]+,gid=[0-9]+`)
)

// readAgent reads the agent's status, mounts and cgroups.
func readAgent(t testing.TB, home string) *agentStats {
	t.Helper()
	st := agentConsole(t, home, "status")
	a := &agentStats{statusLines: st}
	num := func(re *regexp.Regexp, i int) int64 {
		g := re.FindStringSubmatch(st)
		if g == nil {
			t.Fatalf("the agent's status has no line for %s:\n%s", re, st)
		}
		n, _ := strconv.ParseInt(g[i], 10, 64)
		return n
	}
	a.Goroutines, a.FDs = int(num(reGoroutines, 1)), int(num(reFDs, 1))
	a.HeapInUse, a.HeapFromOS = num(reHeap, 1), num(reHeap, 2)
	a.CgroupMem, a.CgroupPids = num(reCgroupMem, 1), int(num(reCgroupPids, 1))
	a.RSS = num(reAgentMemory, 1)
	if g := reRunning.FindStringSubmatch(st); g != nil {
		a.Running = strings.TrimSpace(g[1])
	}
	for _, g := range reWarmLine.FindAllStringSubmatch(st, -1) {
		a.Warm = append(a.Warm, g[1]+" "+g[2])
	}
	for _, l := range strings.Split(agentConsole(t, home, "mounts"), "\n") {
		if f := strings.Fields(l); len(f) == 6 && strings.HasPrefix(f[1], "/") {
			a.Mounts = append(a.Mounts, reSlotIDs.ReplaceAllString(reWarmName.ReplaceAllString(l, "warm-$1"), "uid=SLOT,gid=SLOT"))
		}
	}
	for _, l := range strings.Split(agentConsole(t, home, "cgroups"), "\n") {
		if strings.HasPrefix(l, "/sys/fs/cgroup/") {
			a.Cgroups = append(a.Cgroups, reWarmName.ReplaceAllString(strings.Fields(l)[0], "warm-$1"))
		}
	}
	sort.Strings(a.Mounts)
	sort.Strings(a.Cgroups)
	return a
}

// agentAtRest waits until the agent runs nothing and warms no box and,
// when base is given, its goroutines and fds are back to base (a
// finished run's readers may take a moment to end), then returns its
// stats.
func agentAtRest(t testing.TB, home string, base *agentStats) *agentStats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := readAgent(t, home)
		warming := slices.ContainsFunc(a.Warm, func(w string) bool { return strings.HasSuffix(w, " warming") })
		settled := a.Running == "nothing" && !warming &&
			(base == nil || a.Goroutines == base.Goroutines && a.FDs == base.FDs)
		if settled || time.Now().After(deadline) {
			return a
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitRunning waits until the agent has run id in progress for at
// least d, and fails the test after limit.
func waitRunning(t testing.TB, home string, d, limit time.Duration) {
	t.Helper()
	re := regexp.MustCompile(`^(\S+) \(image \S+\) for (\S+)$`)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		a := readAgent(t, home)
		if g := re.FindStringSubmatch(a.Running); g != nil {
			if since, err := time.ParseDuration(g[2]); err == nil && since >= d {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the agent did not have a run in progress for %v within %v", d, limit)
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestBox(t *testing.T) {
	e := boxVM(t)

	t.Run("print, stderr and an empty stdin", func(t *testing.T) {
		r := runPy(t, e, `
import sys, time
print("hello from the box")
print("to stderr", file=sys.stderr)
t = time.monotonic()
data = sys.stdin.buffer.read()
print("RESULT stdin-bytes", len(data))
print("RESULT stdin-eof-at-once", "yes" if time.monotonic() - t < 0.5 else "no")
print("RESULT stdin-tty", sys.stdin.isatty())
`, "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusOK)
		expectExit(t, rc, 0, "")
		want := "hello from the box\nRESULT stdin-bytes 0\nRESULT stdin-eof-at-once yes\nRESULT stdin-tty False\n"
		if rc.Capture.Stdout != want || rc.Capture.Stderr != "to stderr\n" {
			t.Errorf("stdout %q, stderr %q", rc.Capture.Stdout, rc.Capture.Stderr)
		}
		if s := rc.Capture.StdoutInfo; s.Bytes != int64(len(want)) || s.KeptBytes != len(want) || s.Truncated || s.InvalidUTF8 {
			t.Errorf("stdout info %+v", s)
		}
		// The agent's log says where the run's time went.
		phases := regexp.MustCompile(`box: run ` + regexp.QuoteMeta(rc.RunID) + ` \((warm|cold)\): [0-9.]+ ms in all: cgroup [0-9.]+, staging [0-9.]+, spawn [0-9.]+, box-init [0-9.]+, program [0-9.]+, settle [0-9.]+, output [0-9.]+, cleanup [0-9.]+ \(ms\)`)
		if log := agentConsole(t, e.home, "log"); !phases.MatchString(log) {
			t.Errorf("the agent's log has no phase line for %s:\n%s", rc.RunID, log)
		}
		if rc.WallMS <= 0 || rc.WallMS > 10000 || rc.CPU.UserMS+rc.CPU.SystemMS <= 0 {
			t.Errorf("wall %d ms, cpu %+v", rc.WallMS, rc.CPU)
		}
	})

	// A program that times itself gets a fine clock: without a trusted
	// TSC a microvm guest keeps time in 4 ms jiffies.
	t.Run("the program's clock ticks finer than a millisecond", func(t *testing.T) {
		r := runPy(t, e, `
import time
steps, t = [], time.perf_counter_ns()
while len(steps) < 101:
    u = time.perf_counter_ns()
    if u != t:
        steps.append(u - t)
        t = u
steps.sort()
print(time.get_clock_info("perf_counter").resolution, steps[50])
`, "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusOK)
		var resolution float64
		var median int64
		if _, err := fmt.Sscan(rc.Capture.Stdout, &resolution, &median); err != nil {
			t.Fatalf("stdout %q: %v", rc.Capture.Stdout, err)
		}
		if resolution > 1e-6 || median >= 1e6 {
			t.Errorf("the clock's resolution is %g s and it moves in steps of %d ns (median): the guest keeps time in jiffies", resolution, median)
		}
	})

	// The program's environment is the box's own, and OpenBLAS is held to
	// its safe kernels exactly when the CPU is emulated: the guest learns
	// the accelerator from the kernel command line.
	t.Run("the environment, and OpenBLAS's core type under the accelerator", func(t *testing.T) {
		r := runPy(t, e, "import os\nfor k in sorted(os.environ): print(k + '=' + os.environ[k])\n", "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusOK)
		env := strings.Split(strings.TrimSuffix(rc.Capture.Stdout, "\n"), "\n")
		for _, want := range []string{"HOME=/tmp", "LANG=C.UTF-8", "OPENBLAS_NUM_THREADS=1", "PATH=/usr/local/bin:/usr/bin:/bin"} {
			if !slices.Contains(env, want) {
				t.Errorf("the environment lacks %s: %q", want, env)
			}
		}
		accel := e.state().Accel
		want := accel != "kvm" && guestArch == archs.X86_64 // an x86-64 OpenBLAS only
		if got := slices.Contains(env, "OPENBLAS_CORETYPE=Prescott"); got != want {
			t.Errorf("under %s: OPENBLAS_CORETYPE=Prescott set %v, want %v (%q)", accel, got, want, env)
		}
		if rc.Image.Python == "" || rc.Image.Suite == "" {
			t.Errorf("the receipt's image %+v names no Python or suite", rc.Image)
		}
	})

	t.Run("exit code 3 is an error", func(t *testing.T) {
		r := runPy(t, e, "import sys\nprint('bye')\nsys.exit(3)\n", "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusError)
		expectExit(t, rc, 3, "")
		if rc.Capture.Stdout != "bye\n" {
			t.Errorf("stdout %q", rc.Capture.Stdout)
		}
	})

	t.Run("an exception is an error with its traceback", func(t *testing.T) {
		r := runPy(t, e, "def f():\n    raise ValueError('boom')\nf()\n", "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusError)
		expectExit(t, rc, 1, "")
		if !strings.Contains(rc.Capture.Stderr, "Traceback") || !strings.HasSuffix(rc.Capture.Stderr, "ValueError: boom\n") {
			t.Errorf("stderr %q", rc.Capture.Stderr)
		}
	})

	t.Run("a program killed by its own fault is an error", func(t *testing.T) {
		r := runPy(t, e, "import ctypes\nprint('before', flush=True)\nctypes.string_at(0)\n", "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusError)
		expectExit(t, rc, 128+int(syscall.SIGSEGV), "SIGSEGV")
		if rc.Capture.Stdout != "before\n" {
			t.Errorf("stdout %q", rc.Capture.Stdout)
		}
	})

	t.Run("a program that sends itself SIGTERM dies of it", func(t *testing.T) {
		r := runPy(t, e, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nprint('alive after SIGTERM')\n", "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusError)
		expectExit(t, rc, 128+int(syscall.SIGTERM), "SIGTERM")
		if rc.Capture.Stdout != "" {
			t.Errorf("stdout %q: a signal the program sends itself must act as it does anywhere else", rc.Capture.Stdout)
		}
	})

	t.Run("output that is not UTF-8, and a character cut by the limit", func(t *testing.T) {
		r := runPy(t, e, `
import sys
sys.stdout.buffer.write(b"ok \xff\xfe end\n")
sys.stderr.buffer.write("abcdefghijklmno\u20ac".encode())
`, "--timeout", "10", "--max-output-bytes", "16")
		rc := expectEnd(t, r, wire.StatusOK)
		// One U+FFFD per invalid run (guest/box/capture.go); counts are
		// of the raw bytes.
		if c := rc.Capture; c.Stdout != "ok \uFFFD end\n" || !c.StdoutInfo.InvalidUTF8 || c.StdoutInfo.Bytes != 10 || c.StdoutInfo.Truncated {
			t.Errorf("stdout %q %+v", c.Stdout, c.StdoutInfo)
		}
		// The euro sign's 3 bytes straddle the 16-byte limit: dropped
		// whole, not turned into U+FFFD.
		if c := rc.Capture; c.Stderr != "abcdefghijklmno" || c.StderrInfo.InvalidUTF8 || !c.StderrInfo.Truncated ||
			c.StderrInfo.Bytes != 18 || c.StderrInfo.KeptBytes != 15 {
			t.Errorf("stderr %q %+v", c.Stderr, c.StderrInfo)
		}
	})

	t.Run("limits", func(t *testing.T) { testLimits(t, e) })
	t.Run("output files", func(t *testing.T) { testOutputFiles(t, e) })
	t.Run("runs at once", func(t *testing.T) { testRunsAtOnce(t, e) })
}

func testLimits(t *testing.T, e *vmEnv) {
	t.Run("timeout: spinning, sleeping, ignoring SIGTERM", func(t *testing.T) {
		r := runPy(t, e, `
import os, signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"])
print("spinning", flush=True)
while True:
    pass
`, "--timeout", "2")
		rc := expectEnd(t, r, wire.StatusTimeout)
		expectExit(t, rc, 137, "SIGKILL")
		if rc.WallMS < 2000 || rc.WallMS > 4000 || rc.Capture.Stdout != "spinning\n" {
			t.Errorf("wall %d ms for a 2 s timeout, stdout %q", rc.WallMS, rc.Capture.Stdout)
		}
	})

	t.Run("timeout: a program that stops itself", func(t *testing.T) {
		r := runPy(t, e, "import os, signal\nprint('stopping', flush=True)\nos.kill(os.getpid(), signal.SIGSTOP)\nprint('resumed')\n", "--timeout", "2")
		rc := expectEnd(t, r, wire.StatusTimeout)
		expectExit(t, rc, 137, "SIGKILL")
		if rc.WallMS < 2000 || rc.WallMS > 4000 || rc.Capture.Stdout != "stopping\n" {
			t.Errorf("wall %d ms for a 2 s timeout, stdout %q", rc.WallMS, rc.Capture.Stdout)
		}
	})

	t.Run("timeout: a program waiting on a stopped child", func(t *testing.T) {
		r := runPy(t, e, `
import os, signal
pid = os.fork()
if pid == 0:
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
print("waiting", flush=True)
os.waitpid(pid, 0)
print("the child went on")
`, "--timeout", "2")
		rc := expectEnd(t, r, wire.StatusTimeout)
		expectExit(t, rc, 137, "SIGKILL")
		if rc.WallMS < 2000 || rc.WallMS > 4000 || rc.Capture.Stdout != "waiting\n" {
			t.Errorf("wall %d ms for a 2 s timeout, stdout %q", rc.WallMS, rc.Capture.Stdout)
		}
	})

	t.Run("memory bomb: OOM kill of the whole group", func(t *testing.T) {
		r := runPy(t, e, `
import os
if os.fork() == 0:
    import time; time.sleep(60)
x = []
print("allocating", flush=True)
while True:
    x.append(bytearray(16 << 20))
`, "--timeout", "30")
		rc := expectEnd(t, r, wire.StatusOOM)
		expectExit(t, rc, 137, "SIGKILL")
		m := rc.Memory
		if limit := wire.DefaultMemoryBytes + m.PreloadBytes; !m.OOMKilled || m.PeakBytes < limit-32<<20 || m.PeakBytes > limit {
			t.Errorf("memory %+v: want oom_killed and a peak within 32 MiB under the limit (512 MiB on top of any preload)", m)
		}
	})

	t.Run("bytearray(10**10) is a MemoryError the program catches", func(t *testing.T) {
		r := runPy(t, e, `
try:
    b = bytearray(10**10)
    print("RESULT bytearray allocated")
except MemoryError:
    print("RESULT bytearray MemoryError")
`, "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusOK)
		expectResults(t, rc, []probe{{"bytearray", "MemoryError"}})
		if rc.Memory.OOMKilled {
			t.Errorf("memory %+v", rc.Memory)
		}
	})

	t.Run("fork bomb: stopped at pids.max", func(t *testing.T) {
		r := runPy(t, e, `
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
`, "--timeout", "3")
		rc := expectEnd(t, r, wire.StatusTimeout)
		if rc.Pids.Max != wire.DefaultPidsMax || rc.Pids.LimitHit <= 0 || !strings.Contains(rc.Reason, "refused at the limit of 128 processes") {
			t.Errorf("pids %+v, reason %q: want forks refused at the limit", rc.Pids, rc.Reason)
		}
	})

	t.Run("10,000 threads: stopped at pids.max", func(t *testing.T) {
		r := runPy(t, e, `
import threading, time
n = 0
try:
    for i in range(10000):
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        n += 1
    print("RESULT threads all")
except RuntimeError as e:
    print("RESULT threads refused")
    print("RESULT threads-under-128", n < 128)
`, "--timeout", "10")
		rc := expectEnd(t, r, wire.StatusOK)
		expectResults(t, rc, []probe{{"threads", "refused"}, {"threads-under-128", "True"}})
		if rc.Pids.LimitHit <= 0 {
			t.Errorf("pids %+v: the receipt does not say the limit was hit", rc.Pids)
		}
	})

	t.Run("/tmp full: ENOSPC at the tmpfs size, EFBIG past it for one file", func(t *testing.T) {
		// One file cannot be larger than /tmp (RLIMIT_FSIZE); several
		// fill it to its size.
		r := runPy(t, e, `
import errno
n = 0
try:
    for i in range(100):
        with open("/tmp/fill%d" % i, "wb", buffering=0) as f:
            for _ in range(8):
                n += f.write(b"x" * (1 << 20))
except OSError as e:
    print("RESULT error", errno.errorcode[e.errno])
print("RESULT near-64MiB", (60 << 20) <= n <= (64 << 20))
with open("/tmp/one", "wb", buffering=0) as f:
    try:
        f.seek(64 << 20); f.write(b"x")
    except OSError as e:
        print("RESULT past-the-size", errno.errorcode[e.errno])
`, "--timeout", "20")
		rc := expectEnd(t, r, wire.StatusOK)
		expectResults(t, rc, []probe{{"error", "ENOSPC"}, {"near-64MiB", "True"}, {"past-the-size", "EFBIG"}})
	})

	t.Run("flood on both streams: counted, capped, the agent stays flat", func(t *testing.T) {
		before := agentAtRest(t, e.home, sharedVM.base)
		r := runPy(t, e, `
import os, threading
def flood(fd):
    chunk = b"\x01" * (1 << 20)
    for _ in range(64):
        os.write(fd, chunk)
t = threading.Thread(target=flood, args=(2,))
t.start()
flood(1)
t.join()
`, "--timeout", "30", "--max-output-bytes", "8192")
		rc := expectEnd(t, r, wire.StatusOK)
		// \x01 grows sixfold when JSON-escaped: the receipt still parsed.
		want := strings.Repeat("\x01", 8192)
		for _, s := range []struct {
			name string
			info wire.Stream
			text string
		}{{"stdout", rc.Capture.StdoutInfo, rc.Capture.Stdout}, {"stderr", rc.Capture.StderrInfo, rc.Capture.Stderr}} {
			if s.info.Bytes != 64<<20 || s.info.KeptBytes != 8192 || !s.info.Truncated || s.info.InvalidUTF8 || s.text != want {
				t.Errorf("%s: %+v, %d bytes of text", s.name, s.info, len(s.text))
			}
		}
		after := agentAtRest(t, e.home, sharedVM.base)
		t.Logf("the agent before the flood: %v\nafter: %v", before, after)
		// 128 MiB went through the agent; it keeps 16 KiB of it.
		if grew := after.HeapFromOS - before.HeapFromOS; grew > 8<<10 {
			t.Errorf("the agent's Go heap took %d KiB more from the OS", grew)
		}
		if grew := after.CgroupMem - before.CgroupMem; grew > 16<<20 {
			t.Errorf("the agent's cgroup memory grew by %d bytes", grew)
		}
		next := runPy(t, e, `print("after the flood")`, "--timeout", "10")
		if rc := expectEnd(t, next, wire.StatusOK); rc.Capture.Stdout != "after the flood\n" || next.elapsed > 10*time.Second {
			t.Errorf("the next run: stdout %q in %v", rc.Capture.Stdout, next.elapsed)
		}
	})

	t.Run("the next run is clean", func(t *testing.T) { expectClean(t, e) })
}

func testOutputFiles(t *testing.T, e *vmEnv) {
	t.Run("10,000 files: bounded lists", func(t *testing.T) {
		out := t.TempDir()
		r := runPy(t, e, `
import os
for i in range(10000):
    fd = os.open("/tmp/output/f%05d" % i, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"x")
    os.close(fd)
print("RESULT made", len(os.listdir("/tmp/output")))
`, "--timeout", "30", "--out", out)
		rc := expectEnd(t, r, wire.StatusOK)
		expectResults(t, rc, []probe{{"made", "10000"}})
		o := rc.Output
		if len(o.Returned) != wire.MaxReturnedFiles || len(r.Files) != wire.MaxReturnedFiles ||
			len(o.NotReturned) != wire.MaxListedNotReturned || len(o.Returned)+len(o.NotReturned)+o.NotListed != 10000 {
			t.Errorf("returned %d (%d files), listed %d, not listed %d: want 64, 16 and the rest of 10000",
				len(o.Returned), len(r.Files), len(o.NotReturned), o.NotListed)
		}
		for _, n := range o.NotReturned {
			if n.Reason != wire.NotReturnedOverCount || n.Bytes != 1 || n.SHA256 != sha256hex([]byte("x")) {
				t.Errorf("listed %+v", n)
				break
			}
		}
		// --out takes every file whole, up to the delivery cap: the rest
		// are counted, the first 16 listed.
		if ents, _ := os.ReadDir(filepath.Join(out, rc.RunID)); len(ents) != len(o.Delivered) || len(ents) != wire.MaxDeliveredFiles {
			t.Errorf("--out holds %d files; the receipt lists %d delivered; want %d", len(ents), len(o.Delivered), wire.MaxDeliveredFiles)
		}
		if len(o.NotDelivered) != wire.MaxListedNotReturned || o.NotDelivered[0].Reason != wire.NotDeliveredOverCount ||
			len(o.Delivered)+len(o.NotDelivered)+o.NotDeliveredUnlisted != 10000 {
			t.Errorf("not delivered: %d listed (first %+v), %d unlisted", len(o.NotDelivered), o.NotDelivered[:min(1, len(o.NotDelivered))], o.NotDeliveredUnlisted)
		}
		t.Logf("collected in %v beyond the program's %d ms", r.elapsed-time.Duration(rc.WallMS)*time.Millisecond, rc.WallMS)
	})

	t.Run("links, a FIFO, a socket, a directory, big and many files", func(t *testing.T) {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.txt")
		os.WriteFile(in, []byte("input\n"), 0o644)
		out := filepath.Join(dir, "out")
		r := runPy(t, e, `
import errno, hashlib, os, socket
def res(name, v): print("RESULT", name, v, flush=True)
def attempt(name, f):
    try:
        f(); res(name, "made")
    except OSError as e:
        res(name, errno.errorcode[e.errno])
o = "/tmp/output/"
os.symlink("/etc/shadow", o + "shadow")
os.symlink("/proc/1/environ", o + "environ")
os.symlink("/nonexistent", o + "dangling")
attempt("link-image-file", lambda: os.link("/usr/bin/python3", o + "imagelink"))
attempt("link-input-file", lambda: os.link("/tmp/input/in.txt", o + "inlink"))
open("/tmp/keep", "w").write("k")
os.link("/tmp/keep", o + "hardlink")
os.mkfifo(o + "fifo")
socket.socket(socket.AF_UNIX).bind(o + "sock")
os.mkdir(o + "sub"); open(o + "sub/inner.txt", "w").write("inner")
big = os.urandom(1 << 20)
open(o + "big.bin", "wb").write(big)
res("big-sha256", hashlib.sha256(big).hexdigest())
for i in range(7):
    open(o + "small%02d.txt" % i, "w").write(str(i) * 10000)
open(o + "bad\nname", "w").write("x")
open(o + "ok.txt", "w").write("ok")
`, "--timeout", "20", "--file", in, "--out", out)
		rc := expectEnd(t, r, wire.StatusOK)
		got := results(rc.Capture.Stdout)
		// Neither link can be made: the image is another filesystem, and
		// the input file belongs to the box's root (protected_hardlinks).
		// Were one made, it would be listed as a hard link below.
		expectResults(t, rc, []probe{{"link-image-file", "EXDEV"}, {"link-input-file", "EPERM"}})
		want := map[string]string{
			"shadow": wire.NotReturnedSymlink, "environ": wire.NotReturnedSymlink, "dangling": wire.NotReturnedSymlink,
			"hardlink": wire.NotReturnedHardLink, "fifo": wire.NotReturnedNotFile, "sock": wire.NotReturnedNotFile,
			"sub": wire.NotReturnedNotFile, "big.bin": wire.NotReturnedOverCap,
			wire.EscapeName("bad\nname"): wire.NotReturnedName,
			// 48 KiB in name order: ok.txt and small00-03 fit, the rest not.
			"small04.txt": wire.NotReturnedOverCap, "small05.txt": wire.NotReturnedOverCap, "small06.txt": wire.NotReturnedOverCap,
		}
		listed := map[string]wire.NotReturned{}
		for _, n := range rc.Output.NotReturned {
			listed[n.Name] = n
		}
		for name, reason := range want {
			if n, ok := listed[name]; !ok || n.Reason != reason {
				t.Errorf("%q: listed as %+v, want reason %q", name, n, reason)
			}
		}
		if len(listed) != len(want) || rc.Output.NotListed != 0 {
			t.Errorf("listed %d, not listed %d; want %d listed", len(listed), rc.Output.NotListed, len(want))
		}
		if b := listed["big.bin"]; b.Bytes != 1<<20 || b.SHA256 != got["big-sha256"] {
			t.Errorf("big.bin listed as %+v, want 1 MiB with sha256 %s", b, got["big-sha256"])
		}
		returned := map[string]string{"ok.txt": "ok"}
		for i := 0; i < 4; i++ {
			returned[fmt.Sprintf("small%02d.txt", i)] = strings.Repeat(strconv.Itoa(i), 10000)
		}
		if len(rc.Output.Returned) != len(returned) || len(r.Files) != len(returned) {
			t.Errorf("returned %+v", rc.Output.Returned)
		}
		// --out writes into a new directory named for the run.
		if ents, _ := os.ReadDir(out); len(ents) != 1 || ents[0].Name() != rc.RunID {
			t.Errorf("--out holds %v, want the run's directory %s only", ents, rc.RunID)
		}
		// --out takes every regular file with a plain name whole, those
		// too big or too many to return among them.
		saved := maps.Clone(returned)
		for i := 4; i < 7; i++ {
			saved[fmt.Sprintf("small%02d.txt", i)] = strings.Repeat(strconv.Itoa(i), 10000)
		}
		ents, _ := os.ReadDir(filepath.Join(out, rc.RunID))
		if len(ents) != len(saved)+1 || len(rc.Output.Delivered) != len(saved)+1 {
			t.Errorf("--out holds %d entries, the receipt lists %d delivered; want %d", len(ents), len(rc.Output.Delivered), len(saved)+1)
		}
		for name, content := range saved {
			b, err := os.ReadFile(filepath.Join(out, rc.RunID, name))
			if err != nil || string(b) != content {
				t.Errorf("--out %s: %v, %d bytes", name, err, len(b))
			}
		}
		if b, err := os.ReadFile(filepath.Join(out, rc.RunID, "big.bin")); err != nil || sha256hex(b) != got["big-sha256"] {
			t.Errorf("--out big.bin: %v, %d bytes", err, len(b))
		}
		if len(rc.InputFiles) != 1 || rc.InputFiles[0].Name != "in.txt" || rc.InputFiles[0].SHA256 != sha256hex([]byte("input\n")) {
			t.Errorf("input files %+v", rc.InputFiles)
		}
		if r.elapsed > 20*time.Second {
			t.Errorf("the run took %v: something blocked", r.elapsed)
		}
	})

	t.Run("/tmp/output replaced by a link", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		r := runPy(t, e, `
import os
os.rename("/tmp/output", "/tmp/moved")
os.symlink("/etc", "/tmp/output")
print("RESULT swapped", sorted(os.listdir("/tmp/output"))[:1] != [])
`, "--timeout", "10", "--out", out)
		rc := expectEnd(t, r, wire.StatusOK)
		expectResults(t, rc, []probe{{"swapped", "True"}})
		o := rc.Output
		if len(o.Returned) != 0 || len(r.Files) != 0 || len(o.NotReturned) != 1 || !strings.Contains(o.NotReturned[0].Reason, "replaced by a link") {
			t.Errorf("output %+v", o)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("--out holds %d entries", len(ents))
		}
	})

	t.Run("a daemon and a new session outliving the program are killed first", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		r := runPy(t, e, `
import os, subprocess, sys, time
late = "import os, time; time.sleep(1); print('LATE', flush=True); open('/tmp/output/%s.txt', 'w').write('late')"
subprocess.Popen([sys.executable, "-c", late % "session"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        exec(late % "daemon")
        os._exit(0)
    os._exit(0)
os.wait()
print("main exits")
`, "--timeout", "10", "--out", out)
		rc := expectEnd(t, r, wire.StatusOK)
		if rc.Capture.Stdout != "main exits\n" {
			t.Errorf("stdout %q: a late writer was not killed", rc.Capture.Stdout)
		}
		if o := rc.Output; len(o.Returned)+len(o.NotReturned)+o.NotListed != 0 || len(r.Files) != 0 {
			t.Errorf("output %+v: a late writer was not killed", o)
		}
	})

	t.Run("the next run is clean", func(t *testing.T) { expectClean(t, e) })
}

func testRunsAtOnce(t *testing.T, e *vmEnv) {
	t.Run("two clients' runs go on at once, each in its own box", func(t *testing.T) {
		t0 := time.Now()
		first := startRun(t, e, "import os, time\nprint('first', flush=True)\nopen('/tmp/output/first', 'w')\ntime.sleep(4)\nprint('first done', os.listdir('/tmp/output'))\n", "--timeout", "15")
		waitRunning(t, e.home, 0, 15*time.Second)

		second := runPy(t, e, "import os\nopen('/tmp/output/second', 'w')\nprint('second ran', os.listdir('/tmp/output'))\n", "--timeout", "10")
		rc2 := expectEnd(t, second, wire.StatusOK)
		if rc2.Capture.Stdout != "second ran ['second']\n" {
			t.Errorf("second run: stdout %q", rc2.Capture.Stdout)
		}
		r1 := first()
		rc := expectEnd(t, r1, wire.StatusOK)
		if rc.Capture.Stdout != "first\nfirst done ['first']\n" {
			t.Errorf("first run: stdout %q", rc.Capture.Stdout)
		}
		// The second ran while the first slept: it ended first.
		if r1.elapsed < second.elapsed || time.Since(t0) > 12*time.Second {
			t.Errorf("the first took %v, the second %v: they did not overlap", r1.elapsed, second.elapsed)
		}
	})

	t.Run("cancel mid-run with Ctrl-C", func(t *testing.T) {
		cmd := runCmdFor(t, e, "import time\nprint('started', flush=True)\ntime.sleep(25)\nprint('finished')\n", "--timeout", "30")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// Box setup takes well under a second: after 3 s of the run,
		// the program is sleeping.
		waitRunning(t, e.home, 3*time.Second, 20*time.Second)
		sent := time.Now()
		cmd.Process.Signal(os.Interrupt)
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("pybox run did not end within 30 s of Ctrl-C")
		}
		took := time.Since(sent)
		r := finishRun(t, cmd, err, time.Since(t0), out.String(), errb.String())
		rc := expectEnd(t, r, wire.StatusCancelled)
		if rc.Capture.Stdout != "started\n" || rc.WallMS >= 25000 {
			t.Errorf("stdout %q, wall %d ms", rc.Capture.Stdout, rc.WallMS)
		}
		if took > 10*time.Second {
			t.Errorf("the cancelled run took %v to end", took)
		}
		next := runPy(t, e, `print("after the cancel")`, "--timeout", "10")
		if rc := expectEnd(t, next, wire.StatusOK); rc.Capture.Stdout != "after the cancel\n" {
			t.Errorf("the next run: stdout %q", rc.Capture.Stdout)
		}
	})
}
