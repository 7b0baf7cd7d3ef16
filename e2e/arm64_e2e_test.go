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
	"testing"

	"pybox/host/archs"
	"pybox/host/vm"
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
	e.mustStart("--images", "stdlib", "--data", "d="+data)
	if st := e.state(); st.Arch != archs.Arm64 || st.Accel != "tcg" || st.Machine != vm.MachineVirt {
		t.Errorf("the VM is %s on %s (%s), want arm64 on virt (tcg)", st.Arch, st.Machine, st.Accel)
	}

	r := runPy(t, e, fmt.Sprintf(arm64Program, syscallNumbers[archs.Arm64]["mount"]), "--data", "d", "--timeout", "30")
	rc := expectEnd(t, r, wire.StatusOK)
	expectResults(t, rc, []probe{
		{"machine", "aarch64"}, {"sum", "42"}, {"seccomp", "2"}, {"raw-socket", "EPERM"}, {"mount", "EPERM"},
	})

	// Every escape of the hostile suite, by arm64's syscall numbers.
	r = runPy(t, e, escapeProgram(archs.Arm64), "--timeout", "30")
	rc = expectEnd(t, r, wire.StatusOK)
	expectResults(t, rc, escapeProbes(archs.Arm64))
}
