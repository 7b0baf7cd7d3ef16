//go:build linux

package box

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// Wait statuses as the kernel encodes them.
func exitedWith(code int) unix.WaitStatus      { return unix.WaitStatus(code << 8) }
func killedBy(sig unix.Signal) unix.WaitStatus { return unix.WaitStatus(sig) }

func TestDecide(t *testing.T) {
	cases := []struct {
		name   string
		o      outcome
		status string
		code   int // -1: no exit code
		signal string
	}{
		{"ok", outcome{exited: true, status: exitedWith(0)}, wire.StatusOK, 0, ""},
		{"error", outcome{exited: true, status: exitedWith(3)}, wire.StatusError, 3, ""},
		{"segfault", outcome{exited: true, status: killedBy(unix.SIGSEGV)}, wire.StatusError, 139, "SIGSEGV"},
		{"timeout", outcome{timedOut: true, exited: true, status: killedBy(unix.SIGKILL)}, wire.StatusTimeout, 137, "SIGKILL"},
		{"cancelled", outcome{cancelled: true, exited: true, status: killedBy(unix.SIGKILL)}, wire.StatusCancelled, 137, "SIGKILL"},
		{"cancelled before start", outcome{cancelled: true}, wire.StatusCancelled, -1, ""},
		{"oom", outcome{oomKills: 2, exited: true, status: killedBy(unix.SIGKILL)}, wire.StatusOOM, 137, "SIGKILL"},
		{"timeout beats oom", outcome{timedOut: true, oomKills: 1, exited: true, status: killedBy(unix.SIGKILL)}, wire.StatusTimeout, 137, "SIGKILL"},
		{"refused", outcome{refusal: "posture check failed", exited: true, status: exitedWith(exitSetup)}, wire.StatusRefused, -1, ""},
		{"refused before start", outcome{refusal: "no image"}, wire.StatusRefused, -1, ""},
		{"status lost", outcome{}, wire.StatusError, -1, ""},
		// box-init died first: its status is not the program's.
		{"box-init ended first", outcome{exited: true, initEnded: true, status: exitedWith(2)}, wire.StatusError, -1, ""},
		{"oom took box-init too", outcome{oomKills: 1, exited: true, initEnded: true, status: killedBy(unix.SIGKILL)}, wire.StatusOOM, 137, "SIGKILL"},
	}
	if v := decide(outcome{exited: true, initEnded: true, status: exitedWith(2)}); !strings.Contains(v.reason, "box-init") ||
		!strings.Contains(v.reason, "exited with code 2") || !strings.Contains(v.reason, "lost") {
		t.Errorf("box-init ended first: reason %q", v.reason)
	}
	for _, c := range cases {
		v := decide(c.o)
		code := -1
		if v.exitCode != nil {
			code = *v.exitCode
		}
		if v.status != c.status || code != c.code || v.signal != c.signal || v.reason == "" {
			t.Errorf("%s: got %s %d %q (%q), want %s %d %q", c.name, v.status, code, v.signal, v.reason, c.status, c.code, c.signal)
		}
	}
}

func TestPidsNote(t *testing.T) {
	if got := pidsNote("r", 0); got != "r" {
		t.Errorf("got %q", got)
	}
	if got := pidsNote("r", 7); !strings.Contains(got, "7 forks were refused") {
		t.Errorf("got %q", got)
	}
}

func TestParseKV(t *testing.T) {
	kv := parseKV([]byte("low 0\nhigh 0\nmax 12\noom 1\noom_kill 3\noom_group_kill 1\n"))
	if kv["oom_kill"] != 3 || kv["max"] != 12 || kv["oom_group_kill"] != 1 {
		t.Errorf("got %v", kv)
	}
	if kv := parseKV([]byte("populated 0\nfrozen 0\n")); kv["populated"] != 0 || len(kv) != 2 {
		t.Errorf("got %v", kv)
	}
}

func TestParseStatus(t *testing.T) {
	in := "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nGroups:\t\nNoNewPrivs:\t1\nSeccomp:\t2\nCapEff:\t0000000000000000\n"
	m, err := parseStatus(bufio.NewScanner(strings.NewReader(in)))
	if err != nil || m["Uid"] != "1000\t1000\t1000\t1000" || m["Groups"] != "" || m["Seccomp"] != "2" || m["CapEff"] != "0000000000000000" {
		t.Errorf("got %q, %v", m, err)
	}
}

func TestNSInode(t *testing.T) {
	if n, ok := nsInode("net:[4026531840]"); !ok || n != 4026531840 {
		t.Errorf("got %d %v", n, ok)
	}
	for _, bad := range []string{"net:4026531840", "net:[x]", "", "net:[1"} {
		if _, ok := nsInode(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestMountsUnder(t *testing.T) {
	info := strings.Join([]string{
		"22 1 0:21 / /proc rw,relatime - proc proc rw",
		"40 30 0:40 / /run/boxes/r1/tmp rw,nosuid,nodev - tmpfs pybox-tmp rw",
		"41 30 0:41 / /run/boxes/r10/tmp rw - tmpfs pybox-tmp rw",
		`42 30 0:42 / /run/boxes/r1/with\040space rw - tmpfs x rw`,
	}, "\n")
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := mountsUnder(path, "/run/boxes/r1")
	want := []string{"/run/boxes/r1/tmp", "/run/boxes/r1/with space"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v %v, want %v", got, err, want)
	}
}

func TestProgramEnvIsFixed(t *testing.T) {
	env := strings.Join(programEnv("amd64", "tcg"), "\n")
	for _, want := range []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "MPLCONFIGDIR=/tmp/.config/matplotlib"} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %s", want)
		}
	}
}

// OpenBLAS is held to its safe kernels only where the CPU is emulated
// (or the host did not say), and only on x86-64.
func TestProgramEnvOpenBLASCoreType(t *testing.T) {
	for _, c := range []struct {
		goarch, accel string
		want          bool
	}{
		{"amd64", "tcg", true},
		{"amd64", "", true},
		{"amd64", "kvm", false},
		{"arm64", "vz", false},
		{"arm64", "tcg", false},
	} {
		got := slices.Contains(programEnv(c.goarch, c.accel), "OPENBLAS_CORETYPE=Prescott")
		if got != c.want {
			t.Errorf("%s under %q: OPENBLAS_CORETYPE=Prescott set %v, want %v", c.goarch, c.accel, got, c.want)
		}
	}
}

// The receipt names the run's data folders and says nothing more of them:
// where they are on the host and what they hold is the host's to fill in,
// whatever a request carried.
func TestReceiptDataNamesOnly(t *testing.T) {
	b := &Runner{cfg: Config{Images: map[string]wire.ImageInfo{"stdlib": {Name: "stdlib"}}, Data: []string{"sales"}}, paths: paths{staging: t.TempDir()}}
	r := &wire.Run{RunID: "r1", Code: "pass", Image: "none", TimeoutSeconds: 1, MaxOutputBytes: 10,
		Data: []wire.DataFolder{{Name: "sales", HostPath: "/home/u/sales", Files: 3, Bytes: 99, Digest: "ab", LeftOut: []string{"1 symbolic link"}}}}
	rec := b.Run(t.Context(), r, nil, nil).Receipt
	if want := []wire.DataFolder{{Name: "sales"}}; !reflect.DeepEqual(rec.Data, want) {
		t.Errorf("receipt data %+v, want %+v", rec.Data, want)
	}
	if got := dataInfo(nil); got != nil {
		t.Errorf("dataInfo(nil) = %+v, want nil (no data in the receipt)", got)
	}
}
