//go:build linux

package box

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/needs"
	"pybox/shared/wire"
)

// These tests run real boxes on the test machine itself: box-init is
// this test binary started again (TestMain), the image a directory or a
// mounted image file.
// They need root and user namespaces, and skip the cgroup: its parts are
// exercised in the VM. The end-to-end suite runs the same kinds of
// programs in the real VM.
const imageEnv = "PYBOX_TEST_IMAGE_ROOT"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "box-init" {
		ChildMain()
	}
	code := m.Run()
	if mountedImage != "" {
		unix.Unmount(mountedImage, unix.MNT_DETACH)
		os.RemoveAll(filepath.Dir(mountedImage))
	}
	os.Exit(code)
}

// Where the tests find an image: a directory, or an image file they
// mount read-only for the duration (the store's stdlib by default, which
// `make test` builds first).
const imageFileEnv = "PYBOX_TEST_IMAGE"

var (
	imageOnce    sync.Once
	imageRoot    string
	imageErr     error
	mountedImage string
)

func findImage() (string, error) {
	imageOnce.Do(func() {
		if dir := os.Getenv(imageEnv); dir != "" {
			imageRoot = dir
			return
		}
		file := os.Getenv(imageFileEnv)
		if file == "" {
			home := os.Getenv("PYBOX_HOME")
			if home == "" {
				h, _ := os.UserHomeDir()
				home = filepath.Join(h, ".local/share/pybox")
			}
			file = filepath.Join(home, "images/stdlib/image.erofs")
		}
		if _, err := os.Stat(file); err != nil {
			imageErr = fmt.Errorf("no image: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "pybox-box-image-")
		if err != nil {
			imageErr = err
			return
		}
		os.Chmod(dir, 0o755)
		root := filepath.Join(dir, "stdlib")
		os.Mkdir(root, 0o755)
		if out, err := exec.Command("mount", "-o", "loop,ro", file, root).CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("mount %s: %v: %s", file, err, out)
			return
		}
		imageRoot, mountedImage = root, root
	})
	return imageRoot, imageErr
}

// hostRunner returns a Runner whose image is the directory named by imageEnv.
func hostRunner(t *testing.T) *Runner {
	t.Helper()
	needs.Root(t, "running a box")
	root, err := findImage()
	if err != nil {
		needs.Unavailable(t, fmt.Sprintf("%v: build one (make images), or set %s to an image file or %s to a root directory with python3",
			err, imageFileEnv, imageEnv))
	}
	staging := t.TempDir()
	// box-init walks to its tmpfs as "other": open the path up.
	for d := staging; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o711)
	}
	name := filepath.Base(root)
	return &Runner{
		cfg:     Config{Images: map[string]wire.ImageInfo{name: {Name: name, Digest: "test"}}, Agent: wire.AgentInfo{Version: "test"}},
		paths:   paths{exe: "/proc/self/exe", images: filepath.Dir(root), staging: staging},
		wait:    wait4,
		agentNS: agentNamespaces(),
	}
}

// wait4 stands in for the guest's reaper.
func wait4(pid int) (unix.WaitStatus, *unix.Rusage) {
	var ws unix.WaitStatus
	var ru unix.Rusage
	for {
		_, err := unix.Wait4(pid, &ws, 0, &ru)
		if !errors.Is(err, unix.EINTR) {
			return ws, &ru
		}
	}
}

var runs atomic.Int64

func hostRun(t *testing.T, b *Runner, ctx context.Context, code string, edit func(*wire.Run)) *wire.Result {
	t.Helper()
	r := &wire.Run{
		RunID: fmt.Sprintf("host-%d", runs.Add(1)), Code: code, Image: filepath.Base(imageRoot),
		TimeoutSeconds: 10, MaxOutputBytes: wire.MaxOutputBytes,
	}
	if edit != nil {
		edit(r)
	}
	res := b.Run(ctx, r, nil, nil)
	rec := res.Receipt
	if rec.Cleanup.Status != wire.CleanupRemoved {
		t.Errorf("cleanup %+v, want REMOVED", rec.Cleanup)
	}
	if _, err := os.Lstat(filepath.Join(b.paths.staging, r.RunID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging directory left behind: %v", err)
	}
	if aside := b.SetAside(); len(aside) > 0 {
		t.Errorf("set aside after the run: %v", aside)
	}
	return res
}

func TestHostRunPrints(t *testing.T) {
	b := hostRunner(t)
	res := hostRun(t, b, context.Background(), "print('hello from the box')", nil)
	rec := res.Receipt
	if rec.Status != wire.StatusOK || *rec.ExitCode != 0 || rec.Capture.Stdout != "hello from the box\n" {
		t.Fatalf("receipt %+v", rec)
	}
	if rec.Posture == nil || !rec.Posture.OK || rec.Posture.Seccomp != 2 || len(rec.Posture.Namespaces) != 7 {
		t.Errorf("posture %+v", rec.Posture)
	}
	if rec.WallMS <= 0 || rec.Agent.Version != "test" || rec.Image.Digest != "test" {
		t.Errorf("receipt fields %+v", rec)
	}
}

func TestHostRunExitAndException(t *testing.T) {
	b := hostRunner(t)
	rec := hostRun(t, b, context.Background(), "import sys; sys.exit(3)", nil).Receipt
	if rec.Status != wire.StatusError || *rec.ExitCode != 3 {
		t.Errorf("exit 3: %s %v %s", rec.Status, rec.ExitCode, rec.Reason)
	}
	rec = hostRun(t, b, context.Background(), "raise ValueError('boom')", nil).Receipt
	if rec.Status != wire.StatusError || *rec.ExitCode != 1 || !strings.Contains(rec.Capture.Stderr, "ValueError: boom") {
		t.Errorf("exception: %+v", rec)
	}
	// The program is its pid namespace's init, so a signal it sends
	// itself without a handler is ignored; a fault is not.
	rec = hostRun(t, b, context.Background(), "import ctypes; ctypes.string_at(0)", nil).Receipt
	if rec.Status != wire.StatusError || rec.Signal != "SIGSEGV" || *rec.ExitCode != 139 {
		t.Errorf("segfault: %s %v %q %s", rec.Status, rec.ExitCode, rec.Signal, rec.Reason)
	}
}

// sealedProbe checks the box from inside and prints one JSON object.
const sealedProbe = `
import ctypes, errno, json, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return 0 if r >= 0 else errno.errorcode[ctypes.get_errno()]
out = {}
out['mount'] = call(165, b'none', b'/tmp', b'tmpfs', 0, None)
out['unshare_user'] = call(272, 0x10000000)
out['unshare_net'] = call(272, 0x40000000)
out['ptrace'] = call(101, 0, 0, 0, 0)
out['clone3'] = call(435, None, 0)
out['keyctl'] = call(250, 0, 0)
out['bpf'] = call(321, 0, None, 0)
for name, fam in (('vsock', 40), ('netlink', 16), ('packet', 17)):
    try:
        socket.socket(fam, socket.SOCK_DGRAM).close(); out[name] = 0
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
t = time.monotonic()
try:
    socket.create_connection(('1.1.1.1', 80), timeout=5); out['connect'] = 0
except OSError as e:
    out['connect'] = errno.errorcode.get(e.errno, str(e))
out['connect_s'] = time.monotonic() - t
s = open('/proc/self/status').read()
out['status'] = {l.split(':')[0]: l.split(':', 1)[1].strip() for l in s.splitlines() if l.startswith(('CapEff', 'CapBnd', 'NoNewPrivs', 'Seccomp', 'Uid'))}
bad = []
for fd in range(3, 1024):
    try:
        os.fstat(fd); bad.append(fd)
    except OSError:
        pass
out['open_fds_above_2'] = bad
out['hostname'] = socket.gethostname()
out['dev'] = sorted(os.listdir('/dev'))
try:
    open('/etc/pybox-write-test', 'w'); out['root_write'] = 0
except OSError as e:
    out['root_write'] = errno.errorcode[e.errno]
out['input'] = open('/tmp/input/in.txt').read()
try:
    open('/tmp/input/in.txt', 'w'); out['input_write'] = 0
except OSError as e:
    out['input_write'] = errno.errorcode[e.errno]
out['pid1'] = open('/proc/1/cmdline').read().split('\0')[0]
out['mounts'] = sorted(l.split()[4] for l in open('/proc/self/mountinfo'))
out['stdin'] = os.read(0, 10).decode()
out['uid'] = os.getuid()
open('/tmp/output/result.txt', 'w').write('done')
os.symlink('/etc/shadow', '/tmp/output/shadow')
os.mkfifo('/tmp/output/fifo')
print(json.dumps(out))
`

func TestHostRunSealed(t *testing.T) {
	b := hostRunner(t)
	res := hostRun(t, b, context.Background(), sealedProbe, func(r *wire.Run) {
		r.Files = []wire.InputFile{{Name: "in.txt", Content: []byte("input data")}}
		r.ReturnFiles = true
	})
	rec := res.Receipt
	if rec.Status != wire.StatusOK {
		t.Fatalf("status %s (%s)\nstderr: %s", rec.Status, rec.Reason, rec.Capture.Stderr)
	}
	t.Logf("probe: %s", rec.Capture.Stdout)
	var got map[string]any
	if err := json.Unmarshal([]byte(rec.Capture.Stdout), &got); err != nil {
		t.Fatalf("probe output %q: %v", rec.Capture.Stdout, err)
	}
	want := map[string]any{
		"mount": "EPERM", "unshare_user": "EPERM", "unshare_net": "EPERM", "ptrace": "EPERM",
		"clone3": "ENOSYS", "keyctl": "EPERM", "bpf": "EPERM", "vsock": "EPERM", "netlink": "EPERM",
		"packet": "EPERM", "connect": "ENETUNREACH", "hostname": "pybox", "root_write": "EROFS",
		"input": "input data", "input_write": "EACCES", "pid1": "box-init", "stdin": "", "uid": 1000.0,
	}
	for k, v := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
	if s, _ := got["connect_s"].(float64); s > 1 {
		t.Errorf("connecting outward took %.1fs; it must fail at once", s)
	}
	st, _ := got["status"].(map[string]any)
	for k, v := range map[string]string{"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2", "Uid": "1000\t1000\t1000\t1000"} {
		if st[k] != v {
			t.Errorf("status %s: got %q, want %q", k, st[k], v)
		}
	}
	if fds := fmt.Sprint(got["open_fds_above_2"]); fds != "[]" {
		t.Errorf("descriptors above 2 open in the box: %s", fds)
	}
	if dev := fmt.Sprint(got["dev"]); dev != "[fd full null random shm stderr stdin stdout urandom zero]" {
		t.Errorf("/dev holds %s", dev)
	}
	for _, m := range got["mounts"].([]any) {
		if !boxMounts[m.(string)] {
			t.Errorf("the box sees mount %v", m)
		}
	}
	if len(res.Files) != 1 || res.Files[0].Name != "result.txt" || string(res.Files[0].Content) != "done" {
		t.Errorf("returned files %+v", res.Files)
	}
	if r := reasons(rec.Output); r["shadow"].Reason != wire.NotReturnedSymlink || r["fifo"].Reason != wire.NotReturnedNotFile {
		t.Errorf("output %+v", rec.Output)
	}
	if len(rec.InputFiles) != 1 || rec.InputFiles[0].SHA256 != sum([]byte("input data")) {
		t.Errorf("input files %+v", rec.InputFiles)
	}
}

func TestHostRunTimeout(t *testing.T) {
	b := hostRunner(t)
	start := time.Now()
	rec := hostRun(t, b, context.Background(), "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass",
		func(r *wire.Run) { r.TimeoutSeconds = 1 }).Receipt
	if rec.Status != wire.StatusTimeout || rec.Signal != "SIGKILL" {
		t.Errorf("receipt %s %q %s", rec.Status, rec.Signal, rec.Reason)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a 1s timeout took %v", took)
	}
}

func TestHostRunCancel(t *testing.T) {
	b := hostRunner(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	rec := hostRun(t, b, ctx, "import time; time.sleep(60)", nil).Receipt
	if rec.Status != wire.StatusCancelled {
		t.Errorf("receipt %s %s", rec.Status, rec.Reason)
	}
}

func TestHostRunFloodAndDaemon(t *testing.T) {
	b := hostRunner(t)
	code := `
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        # Long after the program's flood is done, on a busy machine too.
        time.sleep(5)
        open('/tmp/output/late.txt', 'w').write('daemon')
        os._exit(0)
    os._exit(0)
sys.stdout.buffer.write(b'\x01' * (64 << 20))
sys.stderr.buffer.write(b'\xff' * (64 << 20))
`
	res := hostRun(t, b, context.Background(), code, func(r *wire.Run) { r.ReturnFiles = true })
	rec := res.Receipt
	if rec.Status != wire.StatusOK {
		t.Fatalf("receipt %s %s", rec.Status, rec.Reason)
	}
	c := rec.Capture
	if c.StdoutInfo.Bytes != 64<<20 || !c.StdoutInfo.Truncated || c.StdoutInfo.KeptBytes != wire.MaxOutputBytes || len(c.Stdout) != wire.MaxOutputBytes {
		t.Errorf("stdout %+v (%d chars)", c.StdoutInfo, len(c.Stdout))
	}
	if c.StderrInfo.Bytes != 64<<20 || !c.StderrInfo.InvalidUTF8 || c.Stderr != "\uFFFD" {
		t.Errorf("stderr %+v %q", c.StderrInfo, c.Stderr)
	}
	if len(res.Files) != 0 || len(rec.Output.NotReturned) != 0 {
		t.Errorf("the daemon outlived the program: %+v %+v", res.Files, rec.Output)
	}
}

// An image without python3: box-init seals the box, then exec fails;
// the receipt says refused with the step, and nothing ran.
func TestHostRunRefusedWithoutPython(t *testing.T) {
	b := hostRunner(t)
	empty := filepath.Join(t.TempDir(), "empty")
	for _, d := range []string{"tmp", "dev", "proc"} {
		if err := os.MkdirAll(filepath.Join(empty, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d := empty; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	b.paths.images = filepath.Dir(empty)
	b.cfg.Images["empty"] = wire.ImageInfo{Name: "empty", Digest: "none"}
	rec := hostRun(t, b, context.Background(), "print('never')", func(r *wire.Run) { r.Image = "empty" }).Receipt
	if rec.Status != wire.StatusRefused || rec.ExitCode != nil || !strings.Contains(rec.Reason, "step start program") {
		t.Errorf("receipt %s %v %q", rec.Status, rec.ExitCode, rec.Reason)
	}
	if rec.Posture == nil || !rec.Posture.OK {
		t.Errorf("posture %+v: the box was sealed before exec failed", rec.Posture)
	}
}

// A run the box's admission refuses makes nothing and says so. (The
// run's rules are the agent's to check, before the box.)
func TestRunRefusedBeforeStart(t *testing.T) {
	b := &Runner{cfg: Config{Images: map[string]wire.ImageInfo{"stdlib": {Name: "stdlib"}}}, paths: paths{staging: t.TempDir()}}
	for name, r := range map[string]*wire.Run{
		"no such image": {RunID: "r1", Code: "pass", Image: "data", TimeoutSeconds: 1, MaxOutputBytes: 10},
	} {
		rec := b.Run(context.Background(), r, nil, nil).Receipt
		if rec.Status != wire.StatusRefused || rec.Cleanup.Status != wire.CleanupNotAttempted || rec.RunID != r.RunID {
			t.Errorf("%s: %s %s %q", name, rec.Status, rec.Cleanup.Status, rec.Reason)
		}
	}
}

// A cleanup that cannot unmount is FAILED, says what is left, and sets
// the box aside (listed, its slot kept) until a later attempt succeeds.
func TestCleanupFailureAndRecovery(t *testing.T) {
	needs.Root(t, "mounting the staging tmpfs")
	b := &Runner{paths: paths{staging: t.TempDir()}}
	st, err := makeStaging(b.paths.staging, "stuck", "/nonexistent-image", nil, slotIDs(0))
	if err != nil {
		t.Fatal(err)
	}
	// An open file keeps the tmpfs busy: umount fails with EBUSY.
	f, err := os.Open(filepath.Join(st.tmp, "output"))
	if err != nil {
		t.Fatal(err)
	}
	rn := &run{b: b, req: &wire.Run{RunID: "stuck"}, st: st, empty: true}
	c := rn.cleanup()
	if c.Status != wire.CleanupFailed || !strings.Contains(c.Detail, "mount "+st.tmp) {
		t.Errorf("cleanup %+v, want FAILED naming the mount", c)
	}
	if len(b.left) != 1 {
		t.Errorf("the box remembers %d leftovers, want 1", len(b.left))
	}
	f.Close()
	if aside := b.SetAside(); len(aside) > 0 {
		t.Errorf("still set aside once the mount could go: %v", aside)
	}
	if left := (leftover{st: st}).what(); len(left) != 0 {
		t.Errorf("left after recovery: %v", left)
	}
}

// Boxes run at once, each with its own /tmp, output and receipt: no run
// sees another's token or files.
func TestHostRunsAtOnce(t *testing.T) {
	b := hostRunner(t)
	const n = 4
	results := make([]*wire.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := fmt.Sprintf(`import os, time
token = "token-%d"
os.makedirs("/tmp/output", exist_ok=True)
open("/tmp/output/" + token + ".txt", "w").write(token)
time.sleep(0.5)
print(token, sorted(os.listdir("/tmp/output")))`, i)
			results[i] = hostRun(t, b, context.Background(), code, func(r *wire.Run) { r.ReturnFiles = true })
		}()
	}
	wg.Wait()
	for i, res := range results {
		token := fmt.Sprintf("token-%d", i)
		rec := res.Receipt
		want := fmt.Sprintf("%s ['%s.txt']\n", token, token)
		if rec.Status != wire.StatusOK || rec.Capture.Stdout != want {
			t.Errorf("run %d: %s, stdout %q, want %q (stderr %q)", i, rec.Status, rec.Capture.Stdout, want, rec.Capture.Stderr)
		}
		if len(res.Files) != 1 || res.Files[0].Name != token+".txt" || string(res.Files[0].Content) != token {
			t.Errorf("run %d returned %+v", i, res.Files)
		}
	}
}

// A tmpfs kept busy for a moment (another box being started holds the
// agent's descriptors until its execve) is removed once it is let go,
// not left behind.
func TestStagingBusyForAMoment(t *testing.T) {
	needs.Root(t, "mounting the staging tmpfs")
	base := t.TempDir()
	st, err := makeStaging(base, "briefly", "/nonexistent-image", nil, slotIDs(0))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(st.tmp, "output"))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(150*time.Millisecond, func() { f.Close() })
	if err := st.remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if left := st.leftovers(); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
}
