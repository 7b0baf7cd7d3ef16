package e2e

// PyBox installed and used the way someone handed it would: `make
// install` into a scratch DESTDIR, then everything as an unprivileged
// user (uid 65534) with a fresh PYBOX_HOME, from a directory outside the
// repository: images imported from exported files, the VM kept running by
// a real systemd user manager, one call through `pybox mcp`, and `make
// uninstall` leaving nothing.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pybox/host/paths"
	"pybox/shared/needs"
)

// nobody is the unprivileged user the installed pybox runs as.
const nobody = 65534

func TestInstallAsUser(t *testing.T) {
	if foreignGuest() {
		t.Skip("make install installs this host's pybox and guest files; make test runs this test")
	}
	if os.Geteuid() != 0 {
		needs.Unavailable(t, "this test installs pybox and runs it as another user (uid 65534): run it as root")
	}
	guestArtifactsForTest(t)
	if _, missing, err := userImage("stdlib", guestArch); err != nil || missing != "" {
		needs.Unavailable(t, fmt.Sprint(missing, err))
	}
	repo, _ := filepath.Abs("..")
	// Everything the user touches lives here, readable by them; a short
	// path, for the unix sockets under PYBOX_HOME.
	root, err := os.MkdirTemp("", "pbi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	os.Chmod(root, 0o755)
	destdir := filepath.Join(root, "dest")
	userHome := filepath.Join(root, "u")
	for _, d := range []string{userHome, filepath.Join(userHome, "work"), filepath.Join(userHome, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(d, nobody, nobody)
	}

	// make install, as a packager would.
	mk := exec.Command("make", "-C", repo, "pybox", "manifest", "install", "DESTDIR="+destdir, "PREFIX=/usr/local")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	installed := filepath.Join(destdir, "usr/local/bin/pybox")
	lib := filepath.Join(destdir, "usr/local/lib/pybox/x86_64")
	for _, f := range []string{installed, lib + "/bzImage", lib + "/initramfs.cpio", lib + "/manifest.json"} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("make install did not install %s", f)
		}
	}
	// The user reaches pybox through a link in their own bin/, as the
	// bundle's INSTALL says; the guest files are found from its real path.
	link := filepath.Join(userHome, "bin", "pybox")
	if err := os.Symlink(installed, link); err != nil {
		t.Fatal(err)
	}

	u := &vmEnv{t: t, bin: link, home: filepath.Join(userHome, "p"), dir: filepath.Join(userHome, "work"),
		user: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	u.env = []string{"HOME=" + userHome, "PATH=/usr/local/bin:/usr/bin:/bin", "PYBOX_HOME=" + u.home, "LANG=C.UTF-8"}
	t.Cleanup(func() {
		if _, err := os.Stat(installed); err == nil { // not yet uninstalled
			u.pybox("vm", "stop")
		}
		u.killAll()
	})

	t.Run("version names the installed guest files", func(t *testing.T) {
		out, errOut, code := u.pybox("version")
		for _, want := range []string{lib + "/bzImage (installed)", lib + "/initramfs.cpio (installed)", "as " + lib + "/manifest.json says"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("pybox version: exit %d, does not say %q:\n%s%s", code, want, out, errOut)
			}
		}
		if strings.Count(out, ", matches") != 2 {
			t.Errorf("the installed files do not match their manifest:\n%s", out)
		}
	})

	// The image, exported by root from the store `make images` filled.
	exported := filepath.Join(root, "stdlib.pybox-image")
	export := exec.Command(pyboxBin(t), "image", "export", "stdlib", exported)
	if out, err := export.CombinedOutput(); err != nil {
		t.Fatalf("image export: %v\n%s", err, out)
	}
	original, err := os.ReadFile(exported)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("image import refuses a flipped byte", func(t *testing.T) {
		bad := filepath.Join(root, "flipped.pybox-image")
		b := bytes.Clone(original)
		b[len(b)/2] ^= 0x01
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := u.pybox("image", "import", bad)
		if code != 1 || !strings.Contains(errOut, "the image is damaged: "+bad) || !strings.Contains(errOut, "nothing was imported") {
			t.Errorf("import of a damaged file: exit %d\n%s%s", code, out, errOut)
		}
		if des, _ := os.ReadDir(paths.ImagesDir(u.home)); len(des) != 0 {
			t.Errorf("the refused import left %d entries in the store", len(des))
		}
	})

	var digest string
	t.Run("image import, as a user, without root", func(t *testing.T) {
		out, errOut, code := u.pybox("image", "import", exported)
		if code != 0 || !strings.HasPrefix(out, "imported stdlib sha256 ") {
			t.Fatalf("image import: exit %d\n%s%s", code, out, errOut)
		}
		digest = strings.Fields(out)[3]
		out, _, code = u.pybox("image", "import", exported)
		if code != 0 || !strings.Contains(out, "is in the store already: nothing changed") {
			t.Errorf("the second import: exit %d: %s", code, out)
		}
		back := filepath.Join(userHome, "back.pybox-image")
		if out, errOut, code := u.pybox("image", "export", "stdlib", back); code != 0 || !strings.Contains(out, digest) {
			t.Fatalf("export of the imported image: exit %d\n%s%s", code, out, errOut)
		}
		if b, _ := os.ReadFile(back); !bytes.Equal(b, original) {
			t.Error("export, import and export again changed the file")
		}
	})
	if digest == "" {
		t.FailNow()
	}

	// The VM, kept running by the user's own systemd: the unit pybox
	// writes is enabled, and a fresh manager (what a reboot gives) starts it.
	sd := startUserSystemd(t, userHome)
	unitDir := filepath.Join(userHome, ".config/systemd/user")
	os.MkdirAll(unitDir, 0o755)
	chownTree(filepath.Join(userHome, ".config"))
	unit, errOut, code := u.pybox("vm", "service", "systemd", "--images", "stdlib", "--cpus", "1", "--memory", "768")
	if code != 0 || !strings.Contains(unit, "ExecStart="+installed+" vm start --foreground --cpus 1 --images stdlib --memory 768") {
		t.Fatalf("vm service: exit %d\n%s%s", code, unit, errOut)
	}
	if err := os.WriteFile(filepath.Join(unitDir, "pybox.service"), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := sd.systemctl("daemon-reload"); err != nil {
		t.Fatalf("daemon-reload: %v %s", err, out)
	}
	if out, err := sd.systemctl("enable", "pybox"); err != nil {
		t.Fatalf("systemctl --user enable pybox: %v %s", err, out)
	}
	sd.stop()
	sd = startUserSystemd(t, userHome)
	if !sd.waitActive("pybox", 5*time.Minute) {
		slog, _ := os.ReadFile(paths.ForVM(u.home).SupervisorLog())
		t.Fatalf("the user manager did not bring the VM up; its log:\n%s\nsupervisor log:\n%s", sd.logTail(), slog)
	}

	t.Run("the VM runs, started by the service", func(t *testing.T) {
		out, errOut, code := u.pybox("vm", "status")
		if code != 0 || !strings.Contains(out, "the VM is running") || !strings.Contains(out, lib+"/initramfs.cpio") || !strings.Contains(out, digest) {
			t.Errorf("vm status: exit %d\n%s%s", code, out, errOut)
		}
		if strings.Contains(errOut, "warning") {
			t.Errorf("vm status warns about the service's own VM:\n%s", errOut)
		}
		// An unprivileged user's QEMU is jailed in namespaces of its own:
		// no root, no setuid helper.
		if !strings.Contains(out, "qemu jail:      namespaces") {
			t.Errorf("vm status, as a user, does not show QEMU in its namespaces jail:\n%s", out)
		}
		st := u.state()
		if st == nil || st.SupervisorPid == 0 {
			t.Fatalf("state %+v", st)
		}
		if uid := processUID(st.SupervisorPid); uid != nobody {
			t.Errorf("the supervisor runs as uid %d", uid)
		}
	})

	// An upgrade: guest files whose manifest names a newer agent than the
	// running VM's. No second boot: the manifest alone says what a
	// restart would boot.
	t.Run("after an upgrade, vm status says to restart", func(t *testing.T) {
		newer := filepath.Join(root, "newer")
		os.Mkdir(newer, 0o755)
		for _, f := range []string{"bzImage", "initramfs.cpio"} {
			if err := os.Link(filepath.Join(lib, f), filepath.Join(newer, f)); err != nil {
				t.Fatal(err)
			}
		}
		m, _ := os.ReadFile(filepath.Join(lib, "manifest.json"))
		running := u.state().AgentVersion
		m = bytes.Replace(m, []byte(`"agent_version": "`+running+`"`), []byte(`"agent_version": "v-newer"`), 1)
		os.WriteFile(filepath.Join(newer, "manifest.json"), m, 0o644)
		upgraded := *u
		upgraded.env = append(append([]string(nil), u.env...), "PYBOX_KERNEL="+newer+"/bzImage", "PYBOX_INITRAMFS="+newer+"/initramfs.cpio")
		_, errOut, code := upgraded.pybox("vm", "status")
		want := "warning: the running VM's guest agent is " + running + ", but the guest files this pybox boots (" + newer + ") hold v-newer: " +
			"restart the VM to use them: `pybox vm stop`, then `pybox vm start` (or `systemctl --user restart pybox`"
		if code != 0 || !strings.Contains(errOut, want) {
			t.Errorf("vm status after an upgrade: exit %d, want %q in:\n%s", code, want, errOut)
		}
	})

	t.Run("a call through pybox mcp", func(t *testing.T) {
		r := u.rawClient(t, true)
		r.initialize()
		r.send(callLine(1, pyArgs("import os\nprint(6 * 7, os.getcwd())", "")))
		res := rawResult(t, r.reply("1", 2*time.Minute))
		if res.IsError || res.Execution.Status != "ok" || res.Execution.Capture.Stdout != "42 /tmp\n" ||
			res.Execution.Cleanup.Status != "REMOVED" || res.Execution.Image.Digest != digest {
			t.Errorf("the call: %s\nstderr: %s", res.Text, r.stderr)
		}
	})

	t.Run("systemctl stop powers the VM off, and the service ends cleanly", func(t *testing.T) {
		if out, err := sd.systemctl("stop", "pybox"); err != nil {
			t.Fatalf("systemctl --user stop pybox: %v %s", err, out)
		}
		out, _ := sd.systemctl("show", "-p", "ActiveState", "-p", "Result", "pybox")
		if !strings.Contains(out, "ActiveState=inactive") || !strings.Contains(out, "Result=success") {
			t.Errorf("after the stop: %s", out)
		}
		out, _, code := u.pybox("vm", "status")
		if code != 3 {
			t.Errorf("vm status after the stop: exit %d %s", code, out)
		}
		u.expectGone()
		slog, _ := os.ReadFile(paths.ForVM(u.home).SupervisorLog())
		if !bytes.Contains(slog, []byte("the VM exited: cleanly")) || bytes.Contains(slog, []byte("without being asked")) {
			t.Errorf("the supervisor's log does not show a clean stop:\n%s", slog)
		}
	})
	sd.stop()

	t.Run("make uninstall leaves nothing behind", func(t *testing.T) {
		mk := exec.Command("make", "-C", repo, "uninstall", "DESTDIR="+destdir, "PREFIX=/usr/local")
		if out, err := mk.CombinedOutput(); err != nil {
			t.Fatalf("make uninstall: %v\n%s", err, out)
		}
		filepath.WalkDir(destdir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && (!d.IsDir() || strings.Contains(p, "pybox")) {
				t.Errorf("left behind: %s", p)
			}
			return nil
		})
	})
}

func chownTree(dir string) {
	filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			os.Lchown(p, nobody, nobody)
		}
		return nil
	})
}

func processUID(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				uid, _ := strconv.Atoi(f[0])
				return uid
			}
		}
	}
	return -1
}

// userSystemd is a systemd user manager for uid 65534, as a login (or
// linger at boot) starts one, but private to the test: in its own mount
// namespace, where a tmpfs /run holds /run/systemd/system (systemd's
// sign that it is the init system, which a container's init is not), and
// in a cgroup delegated to that user, as logind would give it.
type userSystemd struct {
	t       *testing.T
	cgroup  string
	runtime string
	env     []string
	cmd     *exec.Cmd
	log     *os.File
	done    chan struct{}
}

func startUserSystemd(t *testing.T, userHome string) *userSystemd {
	t.Helper()
	bin := ""
	for _, p := range []string{"/lib/systemd/systemd", "/usr/lib/systemd/systemd"} {
		if _, err := os.Stat(p); err == nil {
			bin = p
			break
		}
	}
	for _, tool := range []string{"systemctl", "unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			bin = ""
		}
	}
	if bin == "" {
		needs.Unavailable(t, "no systemd, systemctl, unshare or setpriv: run `make deps` (it installs systemd)")
	}
	mnt := cgroup2Mount()
	if mnt == "" {
		needs.Unavailable(t, "no cgroup2 file system mounted: a systemd user manager needs one")
	}
	s := &userSystemd{t: t, runtime: filepath.Join(userHome, "run"), done: make(chan struct{}),
		cgroup: filepath.Join(mnt, fmt.Sprintf("pybox-test-%d-%d", os.Getpid(), time.Now().UnixNano()))}
	os.RemoveAll(s.runtime)
	if err := os.Mkdir(s.runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(s.runtime, nobody, nobody)
	if err := os.Mkdir(s.cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	chownTree(s.cgroup)
	s.env = []string{"HOME=" + userHome, "USER=nobody", "XDG_RUNTIME_DIR=" + s.runtime, "PATH=/usr/local/bin:/usr/bin:/bin",
		"SYSTEMD_LOG_TARGET=console", "SYSTEMD_LOG_LEVEL=info"}
	script := fmt.Sprintf(`set -e
echo $$ > %s/cgroup.procs
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/systemd/system
exec setpriv --reuid=%d --regid=%d --clear-groups env -i %s %s --user`,
		s.cgroup, nobody, nobody, strings.Join(s.env, " "), bin)
	var err error
	if s.log, err = os.CreateTemp("", "pybox-systemd-log"); err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.stop)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err := s.systemctl("show-environment"); err == nil {
			return s
		}
		select {
		case <-s.done:
			needs.Unavailable(t, "a systemd user manager cannot run here; its log:\n"+s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the systemd user manager did not answer within 60 s; its log:\n%s", s.logTail())
		}
	}
}

// cgroup2Mount is where the cgroup2 file system is mounted, "" if nowhere.
func cgroup2Mount() string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if f, g := strings.Fields(pre), strings.Fields(post); ok && len(f) > 4 && len(g) > 0 && g[0] == "cgroup2" {
			return f[4]
		}
	}
	return ""
}

// systemctl runs `systemctl --user ARGS` as the user.
func (s *userSystemd) systemctl(args ...string) (string, error) {
	cmd := exec.Command("systemctl", append([]string{"--user", "--no-pager"}, args...)...)
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitActive waits until unit is active; false if it failed or the time ran out.
func (s *userSystemd) waitActive(unit string, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(time.Second) {
		out, _ := s.systemctl("is-active", unit)
		switch strings.TrimSpace(out) {
		case "active":
			return true
		case "failed":
			return false
		}
	}
	return false
}

func (s *userSystemd) logTail() string {
	b, _ := os.ReadFile(s.log.Name())
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// stop kills the manager and everything it started (the cgroup holds
// them all), then removes the cgroups.
func (s *userSystemd) stop() {
	if s.cmd == nil {
		return
	}
	if err := os.WriteFile(filepath.Join(s.cgroup, "cgroup.kill"), []byte("1"), 0); err != nil {
		s.cmd.Process.Kill()
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.t.Errorf("the systemd user manager did not exit")
	}
	// Children before their parents; a cgroup goes once its last process has.
	var dirs []string
	filepath.WalkDir(s.cgroup, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 50; try++ {
			if err := os.Remove(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	s.log.Close()
	os.Remove(s.log.Name())
	s.cmd = nil
}
