package e2e

// End-to-end tests: the real pybox binary, the real kernel and initramfs
// from build/x86_64/ (or $PYBOX_KERNEL / $PYBOX_INITRAMFS; build/arm64/
// with PYBOX_E2E_ARCH=arm64), real QEMU (TCG here), each in its own
// temporary PYBOX_HOME.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pybox/host/client"
	"pybox/host/guestfiles"
	"pybox/host/image"
	"pybox/host/paths"
	"pybox/host/supervisor"
	"pybox/host/vm"
	"pybox/shared/archs"
	"pybox/shared/frame"
	"pybox/shared/needs"
	"pybox/shared/wire"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// The exit statuses of the pybox command: 0 done, 1 failed, 2 a usage
// error (nothing ran).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// atExit holds what must stop after the last test: a VM that several
// tests share (see boxVM).
var atExit []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range atExit {
		f()
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// guestArch is the guest architecture the suite runs against: the
// host's, or arm64 with PYBOX_E2E_ARCH=arm64 (make test-arm64), which
// QEMU emulates. Every `pybox vm start` of the suite then starts that
// guest, and its image commands take that architecture's images (see
// vmEnv.command).
var guestArch = cmp.Or(os.Getenv("PYBOX_E2E_ARCH"), archs.Host())

// foreignGuest reports whether the suite runs against an emulated guest
// of another architecture than the host's.
func foreignGuest() bool { return guestArch != archs.Host() }

// guestPaths are the kernel and initramfs of an arch guest: from
// build/ARCH/, or for the host's architecture $PYBOX_KERNEL and
// $PYBOX_INITRAMFS when set.
func guestPaths(arch string) (kernel, initramfs string) {
	pick := func(env, name string) string {
		if p := os.Getenv(env); p != "" && arch == archs.Host() {
			return p
		}
		p, _ := filepath.Abs(filepath.Join("..", "build", arch, name))
		return p
	}
	return pick("PYBOX_KERNEL", guestfiles.KernelName(arch)), pick("PYBOX_INITRAMFS", guestfiles.InitramfsName)
}

// guestArtifactsForTest finds the kernel and initramfs, or stops the test:
// a skip with the fix when they are missing, and a failure in CI, where
// a skipped suite would hide that nothing was tested.
func guestArtifactsForTest(t testing.TB) (string, string) {
	t.Helper()
	return guestArtifacts(t, guestArch)
}

// guestArtifacts is guestArtifactsForTest for an arch guest.
func guestArtifacts(t testing.TB, arch string) (string, string) {
	t.Helper()
	k, i := guestPaths(arch)
	for _, p := range []string{k, i} {
		if _, err := os.Stat(p); err != nil {
			needs.Unavailable(t, fmt.Sprintf("no %s: run `make ARCH=%s` first (it builds the kernel and the initramfs), or set PYBOX_KERNEL and PYBOX_INITRAMFS", p, arch))
		}
	}
	qemu := map[string]string{archs.X86_64: "qemu-system-x86_64", archs.Arm64: "qemu-system-aarch64"}[arch]
	if _, err := exec.LookPath(qemu); err != nil {
		needs.Unavailable(t, "no "+qemu+": run `make deps`")
	}
	return k, i
}

// pyboxBin builds the pybox binary once per test run.
func pyboxBin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "pybox-e2e-bin")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "pybox")
		out, err := exec.Command("go", "build", "-o", binPath, "pybox/cmd/pybox").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// vmEnv is one PYBOX_HOME with the binary and guest artifacts to use.
type vmEnv struct {
	t    testing.TB
	bin  string
	home string
	env  []string
	// arch is the guest's architecture (guestArch unless a test asks for
	// another): its images are linked, its guest files booted.
	arch string
	// dir and user, when set, are the working directory and the user
	// every command runs in and as.
	dir  string
	user *syscall.Credential
}

// command is the binary with args, in e's environment.
func (e *vmEnv) command(args ...string) *exec.Cmd {
	if e.arch != "" && e.arch != archs.Host() && len(args) >= 2 {
		// The test's own flags come after, so a test that names its
		// own initramfs still gets it.
		switch cmd := args[0] + " " + args[1]; cmd {
		case "vm start":
			k, i := guestPaths(e.arch)
			args = append([]string{"vm", "start", "--arch", e.arch, "--kernel", k, "--initramfs", i}, args[2:]...)
		case "image build", "image export", "image inspect", "image rm":
			args = append([]string{args[0], args[1], "--arch", e.arch}, args[2:]...)
		}
	}
	cmd := exec.Command(e.bin, args...)
	cmd.Env, cmd.Dir = e.env, e.dir
	if e.user != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.user}
	}
	return cmd
}

func newVMEnv(t testing.TB) *vmEnv { return newArchEnv(t, guestArch) }

// newArchEnv is newVMEnv for an arch guest.
func newArchEnv(t testing.TB, arch string) *vmEnv {
	k, i := guestArtifacts(t, arch)
	// A short path: unix socket paths are limited to about 100 bytes.
	home, err := os.MkdirTemp("", "pybox-e2e")
	if err != nil {
		t.Fatal(err)
	}
	e := &vmEnv{t: t, bin: pyboxBin(t), home: home, arch: arch}
	e.env = append(os.Environ(), "PYBOX_HOME="+home, "PYBOX_KERNEL="+k, "PYBOX_INITRAMFS="+i)
	t.Cleanup(func() {
		e.pybox("vm", "stop")
		e.killAll()
		os.RemoveAll(home)
	})
	return e
}

// pybox runs the binary and returns stdout, stderr and the exit code.
func (e *vmEnv) pybox(args ...string) (string, string, int) {
	e.t.Helper()
	cmd := e.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("pybox %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// mustStart starts the VM and fails the test unless it comes up.
func (e *vmEnv) mustStart(args ...string) string {
	e.t.Helper()
	out, errOut, code := e.pybox(append([]string{"vm", "start", "--cpus", "1", "--memory", "768"}, args...)...)
	if code != 0 || !strings.Contains(out, "VM running") {
		e.t.Fatalf("vm start: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	e.t.Logf("vm start: %s%s", errOut, out)
	return errOut + out
}

// processes returns the pids whose command line mentions this home, or
// the name of its VM (QEMU, jailed, names no path of the home).
func (e *vmEnv) processes() []int {
	marker := []byte(vm.Marker(paths.ForVM(e.home).Dir))
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
		if err == nil && (bytes.Contains(b, []byte(e.home)) || bytes.Contains(b, marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (e *vmEnv) killAll() {
	for _, pid := range e.processes() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func (e *vmEnv) state() *supervisor.State {
	st, err := supervisor.ReadState(paths.ForVM(e.home))
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// expectGone checks that the VM left nothing behind.
func (e *vmEnv) expectGone() {
	e.t.Helper()
	d := paths.ForVM(e.home)
	for _, p := range []string{d.Socket(), d.ConsoleSocket(), d.GuestSocket(), d.State()} {
		if _, err := os.Lstat(p); err == nil {
			e.t.Errorf("%s is left behind", p)
		}
	}
	// A killed QEMU may linger as a zombie for a moment; zombies have an
	// empty command line and do not count.
	deadline := time.Now().Add(5 * time.Second)
	for len(e.processes()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if pids := e.processes(); len(pids) > 0 {
		e.t.Errorf("processes left running: %v", pids)
	}
}

func TestVMLifecycle(t *testing.T) {
	e := newVMEnv(t)

	out := e.mustStart("--accel", "auto")
	if !strings.Contains(out, "accel") {
		t.Errorf("start does not say the accelerator: %s", out)
	}
	if _, err := os.Stat("/dev/kvm"); err == nil && !strings.Contains(out, "kvm") {
		t.Errorf("with /dev/kvm, auto should say what became of kvm: %s", out)
	}

	t.Run("status", func(t *testing.T) {
		out, _, code := e.pybox("vm", "status", "--json")
		var s supervisor.Status
		if err := json.Unmarshal([]byte(out), &s); err != nil || code != 0 || !s.Running || s.State == nil {
			t.Fatalf("status: exit %d %q %v", code, out, err)
		}
		if s.State.QEMUPid == 0 || s.State.AgentVersion == "" || s.State.BootMS == 0 || s.Agent != "answering" {
			t.Errorf("status %+v, state %+v", s, s.State)
		}
		fi, err := os.Stat(paths.ForVM(e.home).Socket())
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket: %v %v", fi, err)
		}
	})

	t.Run("ping", func(t *testing.T) {
		c, err := client.Dial(e.home)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.Hello().Protocol != wire.ProtocolVersion || c.Hello().Kernel == "" {
			t.Errorf("hello %+v", c.Hello())
		}
		t0 := time.Now()
		if err := c.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Logf("ping round trip %v", time.Since(t0))
	})

	t.Run("console log holds the boot line", func(t *testing.T) {
		out, _, code := e.pybox("vm", "logs")
		if code != 0 || !strings.Contains(out, "pybox-agent") {
			t.Errorf("vm logs: exit %d\n%s", code, out)
		}
	})

	t.Run("start while running", func(t *testing.T) {
		qemu := e.state().QEMUPid
		out, _, code := e.pybox("vm", "start")
		if code != 0 || !strings.Contains(out, "already running") {
			t.Errorf("second start: exit %d %q", code, out)
		}
		if st := e.state(); st == nil || st.QEMUPid != qemu {
			t.Errorf("the second start changed the VM: %+v", st)
		}
	})

	t.Run("two clients at once", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := client.Dial(e.home)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				for j := 0; j < 20; j++ {
					if err := c.Ping(context.Background()); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})

	t.Run("oversized and garbage frames refused", func(t *testing.T) {
		for _, bad := range [][]byte{
			binary.BigEndian.AppendUint32(nil, 0xFFFFFFFF),
			binary.BigEndian.AppendUint32(nil, frame.Max+1),
			append(binary.BigEndian.AppendUint32(nil, 6), "garbag"...),
			binary.BigEndian.AppendUint32(nil, 0),
		} {
			nc, err := net.Dial("unix", paths.ForVM(e.home).Socket())
			if err != nil {
				t.Fatal(err)
			}
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			nc.Write(bad)
			p, err := frame.Read(nc)
			if err != nil {
				t.Fatalf("no answer to %x: %v", bad[:4], err)
			}
			m, err := wire.Decode(p)
			if err != nil || m.Type != wire.TypeError || m.Error.Code != wire.ErrProtocol {
				t.Errorf("answer to %x: %+v %v", bad[:4], m, err)
			}
			if _, err := frame.Read(nc); err == nil {
				t.Errorf("the connection stayed open after %x", bad[:4])
			}
			nc.Close()
		}
		c, err := client.Dial(e.home)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Ping(context.Background()); err != nil {
			t.Errorf("the VM no longer answers: %v", err)
		}
	})

	t.Run("console prompt", func(t *testing.T) {
		nc, err := net.Dial("unix", paths.ForVM(e.home).ConsoleSocket())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write([]byte("status\n"))
		nc.SetReadDeadline(time.Now().Add(15 * time.Second))
		sc := bufio.NewScanner(nc)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "kernel") {
				return
			}
		}
		t.Errorf("no status from the console prompt: %v", sc.Err())
	})

	t.Run("stop", func(t *testing.T) {
		out, errOut, code := e.pybox("vm", "stop")
		if code != 0 || !strings.Contains(out, "stopped") || strings.Contains(errOut, "killing") {
			t.Errorf("stop: exit %d %q %q", code, out, errOut)
		}
		e.expectGone()
		// Asked to stop: the supervisor exits 0 (a service manager leaves it stopped).
		if b, _ := os.ReadFile(paths.ForVM(e.home).SupervisorLog()); bytes.Contains(b, []byte("without being asked")) {
			t.Errorf("the supervisor took a stop for a failure:\n%s", b)
		}
		out, _, code = e.pybox("vm", "stop")
		if code != 0 || !strings.Contains(out, "not running") {
			t.Errorf("second stop: exit %d %q", code, out)
		}
	})

	t.Run("start after stop, with an image", func(t *testing.T) {
		img, digest := tinyImage(t, e.home)
		out := e.mustStart("--accel", "auto", "--image-file", "tiny="+img)
		if _, err := os.Stat("/dev/kvm"); err == nil && !strings.Contains(out, "kvm unusable here (cached probe); using tcg") &&
			!strings.Contains(out, "accel kvm") {
			t.Errorf("the second start did not use the cached KVM probe: %s", out)
		}
		st := e.state()
		if len(st.GuestImages) != 1 || st.GuestImages[0].Name != "tiny" || st.GuestImages[0].Digest != digest {
			t.Errorf("the guest mounted %+v, want tiny with sha256 %s", st.GuestImages, digest)
		}
	})

	t.Run("QEMU killed from outside", func(t *testing.T) {
		st := e.state()
		if err := syscall.Kill(st.QEMUPid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		out, _, code := e.pybox("vm", "status")
		if code != 3 || !strings.Contains(out, "not running") {
			t.Errorf("status after kill: exit %d %q", code, out)
		}
		e.expectGone()
		// Not asked to stop: the supervisor exits 1, so a service manager restarts the VM.
		if b, _ := os.ReadFile(paths.ForVM(e.home).SupervisorLog()); !bytes.Contains(b, []byte("the VM ended without being asked to stop")) {
			t.Errorf("the supervisor did not take QEMU's death for a failure:\n%s", b)
		}
	})

	t.Run("run without a VM", func(t *testing.T) {
		script := filepath.Join(e.home, "s.py")
		os.WriteFile(script, []byte("print(1)\n"), 0o600)
		t0 := time.Now()
		_, errOut, code := e.pybox("run", script)
		if code != 1 || !strings.Contains(errOut, "pybox vm start") || !strings.Contains(errOut, "NOT_ATTEMPTED") {
			t.Errorf("run with no VM: exit %d %q", code, errOut)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("run with no VM took %v", d)
		}
	})
}

func TestVMStartFailureLeavesNothing(t *testing.T) {
	e := newVMEnv(t)
	bad := filepath.Join(e.home, "bad.cpio")
	os.WriteFile(bad, []byte("not an initramfs"), 0o600)
	out, errOut, code := e.pybox("vm", "start", "--accel", "tcg", "--cpus", "1", "--memory", "768", "--initramfs", bad)
	if code == 0 {
		t.Fatalf("start with a broken initramfs succeeded: %s", out)
	}
	if !strings.Contains(errOut, "did not start") || !strings.Contains(errOut, "console log") || !strings.Contains(errOut, "nothing is left running") {
		t.Errorf("the failure does not say why:\n%s", errOut)
	}
	e.expectGone()
}

// A damaged image is refused before the VM starts, with the fix, and
// nothing is left running: one byte changed, or the file cut short.
func TestVMStartRefusesDamagedImage(t *testing.T) {
	e := newVMEnv(t)
	src, missing, err := userImage("stdlib", guestArch)
	if err != nil {
		t.Fatal(err)
	}
	if missing != "" {
		needs.Unavailable(t, missing)
	}
	// A copy: the user's own image stays whole.
	dst := image.Dir(e.home, "stdlib", guestArch)
	os.MkdirAll(dst, 0o755)
	for _, f := range []string{"meta.json", "image.erofs"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dst, "image.erofs")
	for _, c := range []struct {
		name, want string
		damage     func(f *os.File) error
	}{
		{"one byte changed", "changed after it was built", func(f *os.File) error {
			_, err := f.WriteAt([]byte{'X'}, 20<<20)
			return err
		}},
		{"cut short", "is truncated", func(f *os.File) error { return f.Truncate(1 << 20) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			err = c.damage(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"vm", "start", "--images", "stdlib"}, {"vm", "start"}} {
				out, errOut, code := e.pybox(args...)
				if code == 0 {
					t.Fatalf("%v with a damaged image succeeded: %s", args, out)
				}
				rebuild := "rebuild it with `pybox image build stdlib`"
				if foreignGuest() {
					rebuild = "rebuild it with `pybox image build stdlib --arch " + guestArch + "`"
				}
				for _, want := range []string{"image stdlib: the image is damaged", c.want, rebuild} {
					if !strings.Contains(errOut, want) {
						t.Errorf("%v: the refusal does not say %q:\n%s", args, want, errOut)
					}
				}
				e.expectGone()
			}
		})
	}
}

// tinyImage makes a small erofs image (the guest mounts erofs) and returns
// its path and sha256.
func tinyImage(t *testing.T, dir string) (string, string) {
	t.Helper()
	src := filepath.Join(dir, "tiny-src")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "hello.txt"), []byte("hello\n"), 0o644)
	img := filepath.Join(dir, "tiny.erofs")
	if out, err := exec.Command("mkfs.erofs", img, src).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.erofs (try: make deps, or apt-get install erofs-utils): %v\n%s", err, out)
	}
	sum, err := vm.FileSHA256(img)
	if err != nil {
		t.Fatal(err)
	}
	return img, sum
}

// BenchmarkVMBoot measures `pybox vm start` to the guest's hello: each
// iteration boots and stops a VM. Run with -benchtime=5x.
func BenchmarkVMBoot(b *testing.B) {
	e := newVMEnv(b)
	var boots []float64
	accel := ""
	for i := 0; i < b.N; i++ {
		e.pybox("vm", "start", "--accel", "auto")
		st := e.state()
		if st == nil {
			b.Fatal("the VM did not start")
		}
		boots = append(boots, float64(st.BootMS))
		accel = st.Accel
		e.pybox("vm", "stop")
	}
	b.ReportMetric(median(boots), "median-boot-ms")
	b.Logf("accel %s, boots (ms): %v", accel, boots)
}

// BenchmarkVMPing measures a ping round trip through the supervisor to
// the guest agent and back.
func BenchmarkVMPing(b *testing.B) {
	e := newVMEnv(b)
	e.pybox("vm", "start", "--accel", "auto")
	st := e.state()
	if st == nil {
		b.Fatal("the VM did not start")
	}
	c, err := client.Dial(e.home)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	rtts := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, float64(time.Since(t0).Microseconds())/1000)
	}
	b.ReportMetric(median(rtts), "median-ms")
	b.Logf("accel %s", st.Accel)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// hangingKVM stands in for QEMU: asked for KVM, it starts a paused TCG
// VM instead, which never says hello, like the nested KVM that hangs
// after "Booting from ROM" on some hosts.
const hangingKVM = `#!/bin/sh
hang=
for a in "$@"; do
  case $a in kvm|host) hang=1 ;; esac
done
if [ -z "$hang" ]; then exec qemu-system-x86_64 "$@"; fi
for a in "$@"; do
  shift
  case $a in kvm) set -- "$@" tcg ;; host) set -- "$@" max ;; *) set -- "$@" "$a" ;; esac
done
exec qemu-system-x86_64 "$@" -S
`

func TestVMHangingKVMFallsBack(t *testing.T) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("auto tries KVM only where /dev/kvm opens: %v", err)
	}
	f.Close()
	e := newVMEnv(t)
	fake := filepath.Join(e.home, "qemu")
	os.WriteFile(fake, []byte(hangingKVM), 0o755)
	e.env = append(e.env, "PYBOX_QEMU="+fake)
	t0 := time.Now()
	out := e.mustStart("--accel", "auto")
	if !strings.Contains(out, "kvm does not boot here (no hello from the guest within 6s); using tcg") || !strings.Contains(out, "accel tcg") {
		t.Errorf("start with a hanging KVM:\n%s", out)
	}
	if d := time.Since(t0); d > 60*time.Second {
		t.Errorf("the fallback took %v", d)
	}
	e.pybox("vm", "stop")
	out = e.mustStart("--accel", "auto")
	if !strings.Contains(out, "kvm unusable here (cached probe); using tcg") {
		t.Errorf("the second start probed KVM again:\n%s", out)
	}
}

// linkImages gives e's fresh home the named images of the user's image
// store (where `make images` put them), as links: they are hundreds of
// MiB, and the VM only reads them. Missing images stop the test: a skip
// with the fix, or a failure in CI.
func linkImages(t testing.TB, e *vmEnv, names ...string) {
	t.Helper()
	missing, err := linkImagesInto(e.home, cmp.Or(e.arch, guestArch), names...)
	if err != nil {
		t.Fatal(err)
	}
	if missing != "" {
		needs.Unavailable(t, missing)
	}
}

// linkImagesInto links the named images of the user's image store into
// home's store. missing says which image is not built, and how to build
// it; err is anything else that went wrong.
func linkImagesInto(home, arch string, names ...string) (missing string, err error) {
	dst := paths.ImagesDir(home)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	for _, n := range names {
		src, missing, err := userImage(n, arch)
		if missing != "" || err != nil {
			return missing, err
		}
		if err := os.Symlink(src, image.Dir(home, n, arch)); err != nil {
			return "", err
		}
	}
	return "", nil
}

// userImage finds the directory of a built image of the guest's
// architecture in the user's store (where `make images` puts them), or
// says it is missing.
func userImage(name, arch string) (dir, missing string, err error) {
	home, err := paths.Home()
	if err != nil {
		return "", "", err
	}
	dir = image.Dir(home, name, arch)
	for _, f := range []string{"image.erofs", "meta.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Sprintf("no %s image %s in %s: build the images with `make images ARCH=%s` (they go to $PYBOX_HOME/images)", arch, name, paths.ImagesDir(home), arch), nil
		}
	}
	return dir, "", nil
}

// mustCheck is r checked for the client, failing the test when it breaks
// a rule.
func mustCheck(t testing.TB, r *wire.Run) *client.Checked {
	t.Helper()
	c, err := client.CheckRun(r)
	if err != nil {
		t.Fatalf("run %s: %v", r.RunID, err)
	}
	return c
}
