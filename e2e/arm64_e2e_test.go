package e2e

// The Mac's guest in make test: on an x86-64 host, the arm64 kernel,
// initramfs, agent and stdlib image boot on QEMU's emulation of aarch64
// (TCG), as `pybox vm start --arch arm64` boots them, and a box runs on
// them sealed as on x86-64. make test-arm64 runs the whole suite there;
// this is its smoke test, cheap enough for every run.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pybox/host/image"
	"pybox/host/vm"
	"pybox/shared/archs"
	"pybox/shared/needs"
	"pybox/shared/wire"
)

// arm64Program reads a data folder, and shows it runs on aarch64 under
// the arm64 seccomp policy: a raw socket and a mount refused by number.
const arm64Program = `
import csv, ctypes, errno, os, platform, socket
libc = ctypes.CDLL(None, use_errno=True)
def res(name, v): print("RESULT", name, v, flush=True)
res("machine", platform.machine())
with open("/data/d/in.csv") as f:
    res("sum", sum(int(r["n"]) for r in csv.DictReader(f)))
res("seccomp", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); res("raw-socket", "ok")
except OSError as e:
    res("raw-socket", errno.errorcode[e.errno])
ctypes.set_errno(0)
r = libc.syscall(%d, b"none", b"/tmp", b"tmpfs", 0, None)
res("mount", "ok" if r == 0 else errno.errorcode[ctypes.get_errno()])
`

func TestArm64Guest(t *testing.T) {
	switch {
	case foreignGuest():
		t.Skip("the whole suite runs on the arm64 guest here (make test-arm64)")
	case archs.Host() == archs.Arm64:
		t.Skip("this host is arm64: every other test runs on its own guest")
	}
	e := newArchEnv(t, archs.Arm64)
	linkImages(t, e, "stdlib")
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "in.csv"), []byte("n\n1\n2\n39\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The host's stdlib image too, attached as a file: the wrong
	// architecture, which a box of it must refuse with the reason.
	x86, missing, err := userImage("stdlib", archs.X86_64)
	if err != nil || missing != "" {
		needs.Unavailable(t, fmt.Sprint(missing, err))
	}
	e.mustStart("--images", "stdlib", "--image-file", "x86="+filepath.Join(x86, image.ImageFile), "--data", "d="+data)
	if st := e.state(); st.Arch != archs.Arm64 || st.Accel != "tcg" || st.Machine != vm.MachineVirt {
		t.Errorf("the VM is %s on %s (%s), want arm64 on virt (tcg)", st.Arch, st.Machine, st.Accel)
	}

	r := runPy(t, e, fmt.Sprintf(arm64Program, syscallNumbers[archs.Arm64]["mount"]), "--data", "d", "--timeout", "30")
	rc := expectOK(t, r)
	expectResults(t, rc, []probe{
		{"machine", "aarch64"}, {"sum", "42"}, {"seccomp", "2"}, {"raw-socket", "EPERM"}, {"mount", "EPERM"},
	})

	r = runPy(t, e, "print(1)", "--image", "x86", "--timeout", "10")
	if rc := r.receipt(t); rc.Status != wire.StatusRefused || !strings.Contains(rc.Reason, "not built for this arm64 guest") || rc.Cleanup.Status != wire.CleanupRemoved {
		t.Errorf("a run on the x86_64 image: %s (%s), cleanup %s", rc.Status, rc.Reason, rc.Cleanup.Status)
	}

	// Every escape of the hostile suite, by arm64's syscall numbers.
	r = runPy(t, e, escapeProgram(archs.Arm64), "--timeout", "30")
	rc = expectOK(t, r)
	expectResults(t, rc, escapeProbes(archs.Arm64))
}

// expectOK checks that a run ended ok, its box sealed as on any guest and
// removed.
func expectOK(t *testing.T, r *boxRun) *wire.Receipt {
	t.Helper()
	rc := r.receipt(t)
	if rc.Status != wire.StatusOK || rc.Cleanup.Status != wire.CleanupRemoved || r.code != 0 {
		t.Errorf("status %s (%s), cleanup %s, exit %d", rc.Status, rc.Reason, rc.Cleanup.Status, r.code)
	}
	expectPosture(t, rc.Posture)
	return rc
}
