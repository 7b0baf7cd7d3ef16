package e2e

// End-to-end tests of the host's side of the VM wall (docs/threat-model.md,
// "The host wall"), against a guest taken over: QEMU is the last wall
// between a guest that was taken over and the user's machine, so what
// QEMU may do to the data folders and what it can see is judged here
// from outside, on the host. The guest's own /init is replaced by
// testdata/hostileinit, which speaks 9p itself against the first data
// folder before it hands over to the real agent.

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/host/paths"
	"pybox/initramfs"
	"pybox/shared/archs"
	"pybox/shared/needs"
	"pybox/shared/wire"
)

// victimCSV is the file the hostile guest goes after: 26 bytes.
const victimCSV = "id,amount\n1,100\n2,200\n3,3\n"

// hostileDialects and hostileAttempts are what testdata/hostileinit
// must have tried, each logged on the console as
// "hostile: DIALECT ATTEMPT TARGET: RESULT (...)". The test holds its own
// copy on purpose: a hostile init that skipped an attempt, or a dialect,
// would otherwise let the test pass without having tried it.
var (
	hostileDialects = []string{"9p2000.u", "9p2000.L", "9p2000"}
	hostileAttempts = []string{
		"open-trunc-rdonly", "open-trunc-wronly", "open-write", "open-rdwr-write", "open-append",
		"create", "unlink", "rename", "mkdir", "rmdir", "chmod", "chown", "truncate",
		"link", "symlink", "setxattr", "utimes", "mknod-fifo",
	}
)

// hostileInitramfs builds testdata/hostileinit for the guest's
// architecture and packs it as /init of an initramfs, the way the real
// one is packed (initramfs.WriteGuest).
func hostileInitramfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "init")
	goarch := map[string]string{archs.X86_64: "amd64", archs.Arm64: "arm64"}[guestArch]
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/hostileinit")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the hostile init: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := initramfs.WriteGuest(&buf, b); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "hostile.cpio")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// victimFolder is the data folder the hostile init attacks: victim.csv
// with an xattr, notes.txt, script.sh, an empty directory empty/ and a
// directory sub/ with a file, every one with a known mode and an mtime
// in the past (so that a utimes, or an entry added and removed again,
// shows).
func victimFolder(t *testing.T) string {
	t.Helper()
	dir := openTempDir(t)
	for _, f := range []struct {
		name, content string
		mode          os.FileMode
	}{
		{"victim.csv", victimCSV, 0o644},
		{"notes.txt", "a note\n", 0o644},
		{"script.sh", "#!/bin/sh\necho hi\n", 0o755},
		{"sub/inner.txt", "inner\n", 0o444},
	} {
		p := filepath.Join(dir, f.name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode) // past the umask
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(filepath.Join(dir, "victim.csv"), "user.origin", []byte("host"), 0); err != nil {
		needs.Unavailable(t, "the test folder's filesystem keeps no user xattrs: "+err.Error())
	}
	past := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, p := range []string{"victim.csv", "notes.txt", "script.sh", "sub/inner.txt", "sub", "empty", "."} {
		if err := os.Chtimes(filepath.Join(dir, p), past, past); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// folderSnapshot describes every entry under dir, without following
// links: type and mode, owner, link count, size, content's sha256 or
// link target, mtime, ctime (any change of metadata moves it, even back
// to the same value) and xattrs.
func folderSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		s := fmt.Sprintf("mode %07o uid %d gid %d nlink %d size %d mtime %d.%09d ctime %d.%09d",
			st.Mode, st.Uid, st.Gid, st.Nlink, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			s += " sha256 " + hex.EncodeToString(sum[:])
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			s += " -> " + target
		}
		s += " xattrs " + xattrsOf(p)
		rel, _ := filepath.Rel(dir, p)
		snap[rel] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// xattrsOf renders p's extended attributes, sorted, without following
// a link.
func xattrsOf(p string) string {
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n <= 0 {
		return "none"
	}
	buf := make([]byte, n)
	if n, err = unix.Llistxattr(p, buf); err != nil {
		return "error " + err.Error()
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	slices.Sort(names)
	var out []string
	for _, name := range names {
		v := make([]byte, 64<<10)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			out = append(out, name+"=error "+err.Error())
			continue
		}
		out = append(out, fmt.Sprintf("%s=%q", name, v[:m]))
	}
	return strings.Join(out, ",")
}

// snapshotDiff lists the entries that differ, one per line.
func snapshotDiff(before, after map[string]string) string {
	var names []string
	for n := range before {
		names = append(names, n)
	}
	for n := range after {
		if _, ok := before[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		was, ok1 := before[n]
		now, ok2 := after[n]
		switch {
		case !ok1:
			fmt.Fprintf(&b, "  %s: added: %s\n", n, now)
		case !ok2:
			fmt.Fprintf(&b, "  %s: removed (was %s)\n", n, was)
		case was != now:
			fmt.Fprintf(&b, "  %s:\n    was %s\n    now %s\n", n, was, now)
		}
	}
	return b.String()
}

// hostileLog waits for the hostile init's last line in the console log
// (`pybox vm logs`) and returns its lines.
func hostileLog(t *testing.T, e *vmEnv) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _, _ := e.pybox("vm", "logs")
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			if i := strings.Index(l, "hostile: "); i >= 0 {
				lines = append(lines, strings.TrimRight(l[i:], "\r"))
			}
		}
		if slices.Contains(lines, "hostile: done") || time.Now().After(deadline) {
			return lines
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkAttempts fails the test unless the hostile init mounted the share
// in every dialect, made every attempt in each, unmounted, and finished:
// without that, an unchanged folder would prove nothing.
func checkAttempts(t *testing.T, lines []string) {
	t.Helper()
	has := func(prefix string) bool {
		return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
	}
	for _, v := range hostileDialects {
		// QEMU speaks 9P2000.u and 9P2000.L only: it answers a plain
		// 9P2000 Tversion with an error (the guest's mount gets
		// EREMOTEIO), so nothing of that dialect reaches the folder.
		if v == "9p2000" && slices.ContainsFunc(lines, func(l string) bool {
			n := strings.Count(l, "version=9p2000,")
			return strings.HasPrefix(l, "hostile: 9p2000 mount failed: ") && n > 0 && strings.Count(l, "remote I/O error") == n
		}) {
			t.Logf("QEMU refuses the plain 9P2000 dialect at version negotiation")
			continue
		}
		// Catches: a dialect the guest could not mount (its attempts
		// never reached QEMU).
		if !has("hostile: " + v + " mount ok") {
			t.Errorf("the hostile init did not mount the share in %s", v)
			continue
		}
		for _, a := range hostileAttempts {
			// Catches: an attempt that was never made.
			if !has("hostile: " + v + " " + a + " ") {
				t.Errorf("the hostile init did not try %s in %s", a, v)
			}
		}
		// Catches: a mount left behind, which would hold the share's
		// channel and keep the agent's own read-only mount from it.
		if !slices.Contains(lines, "hostile: "+v+" umount: ok") {
			t.Errorf("the hostile init did not unmount its %s mount", v)
		}
	}
	// Catches: a hostile init that died half way (the VM would then not
	// be up at all, but say so plainly).
	if !slices.Contains(lines, "hostile: done") {
		t.Errorf("the hostile init did not finish")
	}
}

// needJail stops a test whose jail mode this host cannot give: Landlock
// from ABI 3 (it governs truncation), or user namespaces.
func needJail(t *testing.T, mode string) {
	t.Helper()
	switch mode {
	case "landlock":
		// landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
		abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1)
		if errno != 0 || abi < 3 {
			needs.Unavailable(t, fmt.Sprintf("the landlock jail needs Landlock ABI 3 or later (this kernel: %d, %v): boot a kernel from 6.2 on with lsm=...,landlock", int(abi), errno))
		}
	case "namespaces":
		b, _ := os.ReadFile("/proc/sys/user/max_user_namespaces")
		if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n == 0 {
			needs.Unavailable(t, "the namespaces jail needs user namespaces (try: sysctl user.max_user_namespaces=15000)")
		}
	}
}

// jailState is state.json's "jail", read raw so that the test does not
// depend on the field's Go name.
func jailState(t *testing.T, e *vmEnv) string {
	t.Helper()
	b, err := os.ReadFile(paths.ForVM(e.home).State())
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Jail string `json:"jail"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st.Jail
}

// checkJailReported checks that state.json and `pybox vm status` name
// the jail mode the VM runs in.
func checkJailReported(t *testing.T, e *vmEnv, mode string) {
	t.Helper()
	// Catches: a jail that fell back to another mode (or to none)
	// without saying so.
	if j := jailState(t, e); !strings.HasPrefix(j, mode) {
		t.Errorf("state.json says the jail is %q, want it to start with %q", j, mode)
	}
	out, _, _ := e.pybox("vm", "status")
	row := ""
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "qemu jail:") {
			row = l
		}
	}
	// Catches: a status that hides the jail, or names another mode.
	if !strings.Contains(row, mode) {
		t.Errorf("pybox vm status has no `qemu jail:` row naming %s (row %q):\n%s", mode, row, out)
	}
}

// homeCanary writes a file in the user's real home, where a QEMU that
// sees the home would find it.
func homeCanary(t *testing.T) string {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(home, fmt.Sprintf(".pybox-hostwall-canary-%d", os.Getpid()))
	if err := os.WriteFile(p, []byte("the user's own\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// checkQEMURoot judges QEMU's own view of the machine in namespaces mode,
// through /proc/PID/root (the host kernel's view of QEMU's root).
func checkQEMURoot(t *testing.T, qemu int, dir, canary string) {
	t.Helper()
	root := fmt.Sprintf("/proc/%d/root", qemu)
	// What the jail must hold. These also keep the checks below from
	// passing because /proc/PID/root could not be read at all.
	for _, p := range []string{"/pybox/kernel", "/pybox/initramfs", "/pybox/images/stdlib", "/pybox/data/d/victim.csv", "/usr", "/dev"} {
		if _, err := os.Lstat(root + p); err != nil {
			t.Errorf("QEMU's root lacks %s: %v", p, err)
		}
	}
	top, _ := os.ReadDir(root)
	var names []string
	for _, d := range top {
		names = append(names, d.Name())
	}
	t.Logf("QEMU's root holds %v", names)
	// Catches: a jail /dev that gives QEMU a block device (the host's
	// disks, read raw past every file permission).
	filepath.WalkDir(root+"/dev", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeDevice != 0 && d.Type()&fs.ModeCharDevice == 0 {
			t.Errorf("QEMU's /dev holds a block device: %s", strings.TrimPrefix(p, root))
		}
		return nil
	})
	// Catches: a jail whose root is the host's, or that binds the home.
	if _, err := os.Lstat(root + canary); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("QEMU can reach the user's home: %s%s: %v", root, canary, err)
	}
	// Catches: a jail that binds the folder's host path (or all of
	// /tmp) rather than only the folder at /pybox/data/d.
	if _, err := os.Lstat(root + filepath.Join(dir, "victim.csv")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("QEMU sees the data folder at its host path %s too: %v", dir, err)
	}
	// Catches: a data folder bound writable, or without nodev, nosuid,
	// noexec: the host kernel, not QEMU's readonly=on, must refuse.
	if opts := mountOptions(t, qemu, "/pybox/data/d"); opts == nil {
		t.Errorf("no mount at /pybox/data/d in QEMU's mount namespace")
	} else {
		for _, o := range []string{"ro", "nodev", "nosuid", "noexec"} {
			if !slices.Contains(opts, o) {
				t.Errorf("QEMU's /pybox/data/d is mounted %v: no %s", opts, o)
			}
		}
	}
	// Catches: a bind mount that is read-only in name only. A write
	// through QEMU's own view must get EROFS from the host kernel.
	fd, err := unix.Open(root+"/pybox/data/d/victim.csv", unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	if !errors.Is(err, unix.EROFS) {
		t.Errorf("open(O_WRONLY|O_TRUNC) of victim.csv through QEMU's root: %v, want EROFS", err)
	}
}

// mountOptions returns the per-mount options of the mount at target in
// pid's mount namespace, or nil.
func mountOptions(t *testing.T, pid int, target string) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Errorf("mountinfo: %v", err)
		return nil
	}
	var opts []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// id parent major:minor root mountpoint options ...; the last
		// mount at target is the one that shows.
		if f := strings.Fields(sc.Text()); len(f) > 5 && f[4] == target {
			opts = strings.Split(f[5], ",")
		}
	}
	return opts
}

// TestHostWallHostileGuest boots a guest whose /init attacks the first
// data folder over 9p in every dialect (testdata/hostileinit), in each
// jail mode, and checks from the host that the folder is unchanged: bytes,
// modes, owners, times and xattrs.
func TestHostWallHostileGuest(t *testing.T) {
	guestArtifactsForTest(t)
	initrd := hostileInitramfs(t)
	for _, mode := range []string{"namespaces", "landlock"} {
		t.Run(mode, func(t *testing.T) {
			needJail(t, mode)
			e := newVMEnv(t)
			linkImages(t, e, "stdlib")
			dir := victimFolder(t)
			before := folderSnapshot(t, dir)
			canary := homeCanary(t)
			e.mustStart("--accel", "tcg", "--images", "stdlib", "--initramfs", initrd, "--data", "d="+dir, "--qemu-jail", mode)

			lines := hostileLog(t, e)
			t.Logf("the hostile init's console lines:\n%s", strings.Join(lines, "\n"))
			checkAttempts(t, lines)
			if mode == "namespaces" {
				checkQEMURoot(t, e.state().QEMUPid, dir, canary)
			}
			// Catches: any write of the guest's that QEMU carried out on
			// the host (the 9P2000.u truncate bit empties victim.csv
			// where only QEMU's readonly=on stands in the way).
			if d := snapshotDiff(before, folderSnapshot(t, dir)); d != "" {
				t.Errorf("the hostile guest changed the host folder %s:\n%s", dir, d)
			}
			checkJailReported(t, e, mode)

			// The VM still works: a real box reads the folder.
			r := runPy(t, e, `print(open("/data/d/victim.csv").read(), end="")`, "--data", "d", "--timeout", "30")
			rc := r.receipt(t)
			// Catches: a jail that breaks the share for the agent (or a
			// hostile init that left its mount behind).
			if r.code != exitOK || rc.Status != wire.StatusOK || rc.Capture.Stdout != victimCSV {
				t.Errorf("a box reading victim.csv after the attack: exit %d, status %s, stdout %q\n%s", r.code, rc.Status, rc.Capture.Stdout, r.dump())
			}
		})
	}
}

// procAlive says whether pid, started at start (field 22 of
// /proc/PID/stat), is still alive: not gone and not a zombie. A pid that
// was reused (another start time) counts as gone.
func procAlive(pid int, start string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The command name is in parentheses and may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	// f[0] is field 3 (state), so field 22 is f[19].
	return len(f) > 19 && f[0] != "Z" && (start == "" || f[19] == start)
}

// procStartTime is field 22 of /proc/PID/stat, or "".
func procStartTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// descendants returns pid's descendants, each with its start time.
func descendants(pid int) map[int]string {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		p, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], p)
		}
	}
	out := map[int]string{}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out[c] = procStartTime(c)
			queue = append(queue, c)
		}
	}
	return out
}

// TestHostWallSupervisorKilled kills the supervisor with SIGKILL: QEMU,
// and whatever runs it (a jail's helper), must not outlive it.
func TestHostWallSupervisorKilled(t *testing.T) {
	// "" starts the VM as a user would, in the default mode.
	for _, mode := range []string{"", "landlock"} {
		t.Run(cmp.Or(mode, "default"), func(t *testing.T) {
			needJail(t, mode)
			e := newVMEnv(t)
			linkImages(t, e, "stdlib")
			args := []string{"--accel", "tcg", "--images", "stdlib"}
			if mode != "" {
				args = append(args, "--qemu-jail", mode)
			}
			e.mustStart(args...)
			st := e.state()
			family := descendants(st.SupervisorPid)
			qemuStart := procStartTime(st.QEMUPid)
			if qemuStart == "" {
				t.Fatalf("state.json names QEMU pid %d, which is not running", st.QEMUPid)
			}
			if _, ok := family[st.QEMUPid]; !ok {
				t.Logf("QEMU (pid %d) is not a descendant of the supervisor (pid %d): %v", st.QEMUPid, st.SupervisorPid, family)
			}
			family[st.QEMUPid] = qemuStart
			// The supervisor itself takes a moment to die too: waited for
			// with the rest, so that the check of the home below sees what
			// is left, not what is still exiting.
			family[st.SupervisorPid] = procStartTime(st.SupervisorPid)
			if err := syscall.Kill(st.SupervisorPid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			var left []int
			for {
				left = left[:0]
				for pid, start := range family {
					if procAlive(pid, start) {
						left = append(left, pid)
					}
				}
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Catches: a QEMU (or a jail helper holding it) that lives on
			// without its supervisor: a VM nobody stops, holding the data
			// folders, with no state.json owner to find it.
			if len(left) > 0 {
				slices.Sort(left)
				t.Errorf("5 s after the supervisor was killed, still running: %v (QEMU is %d)", left, st.QEMUPid)
			}
			// Catches: anything else started for this home left behind.
			if pids := e.processes(); len(pids) > 0 {
				for _, p := range pids {
					b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
					c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
					t.Logf("left: %d %q\n%s", p, c, b)
				}
				t.Errorf("processes of this home left running: %v", pids)
			}
		})
	}
}

// TestHostWallFolderRefusedAtStart: a data folder that holds a file with
// another name (a hard link) or a special file is refused by `vm start`
// itself, before QEMU is given it, and nothing is left running.
func TestHostWallFolderRefusedAtStart(t *testing.T) {
	e := newVMEnv(t)
	outside := filepath.Join(t.TempDir(), "outside-secret.txt")
	if err := os.WriteFile(outside, []byte("outside the folder\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		plant      func(t *testing.T, dir string) error
	}{
		{"hard link", "hard link", func(t *testing.T, dir string) error {
			return os.Link(outside, filepath.Join(dir, "linked.txt"))
		}},
		// In a subdirectory: the walk must go all the way down.
		{"FIFO", "fifo", func(t *testing.T, dir string) error {
			os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			return unix.Mkfifo(filepath.Join(dir, "sub", "pipe"), 0o644)
		}},
		{"device", "device", func(t *testing.T, dir string) error {
			err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
			if errors.Is(err, unix.EPERM) {
				needs.Unavailable(t, "making a device node needs root (try: sudo go test)")
			}
			return err
		}},
		{"socket", "socket", func(t *testing.T, dir string) error {
			l, err := net.Listen("unix", filepath.Join(dir, "sock"))
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := *e
			e.t = t
			dir := openTempDir(t)
			os.WriteFile(filepath.Join(dir, "fine.txt"), []byte("fine\n"), 0o644)
			if err := c.plant(t, dir); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := e.pybox("vm", "start", "--accel", "tcg", "--cpus", "1", "--memory", "768", "--data", "d="+dir)
			// Catches: a folder given to QEMU although a hard link in it
			// leads outside (its other name), or a special file in it
			// would open something on the host.
			if code == 0 {
				t.Errorf("vm start with a %s in the data folder succeeded:\n%s%s", c.name, out, errOut)
				e.pybox("vm", "stop")
			} else if !strings.Contains(strings.ToLower(errOut), c.want) {
				// Catches: a refusal that does not say what to fix.
				t.Errorf("the refusal does not name the %s:\n%s", c.want, errOut)
			} else {
				t.Logf("refused: %s", strings.TrimSpace(errOut))
			}
			// Catches: a refused start that leaves QEMU or the
			// supervisor behind.
			e.expectGone()
		})
	}
}

// TestHostWallBoxIDs: host files that carry the ids a box runs as (guest
// uid and gid 101000 in slot 0, 103000 in slot 1) but that others may
// not read stay unread by a box, as for any other user.
func TestHostWallBoxIDs(t *testing.T) {
	needs.Root(t, "giving files the ids a box runs as (os.Chown)")
	guestArtifactsForTest(t)
	dir := openTempDir(t)
	for _, f := range []struct {
		name     string
		mode     os.FileMode
		uid, gid int
	}{
		{"box-owner.txt", 0o600, 101000, 0},
		{"box-group.txt", 0o640, 0, 101000},
		{"slot1-owner.txt", 0o600, 103000, 0},
		{"public.txt", 0o644, 0, 0},
	} {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, []byte("secret of "+f.name+"\n"), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, f.uid, f.gid); err != nil {
			t.Fatal(err)
		}
	}
	const prog = `import os
print("uid_map", " ".join(open("/proc/self/uid_map").read().split()))
for n in sorted(os.listdir("/data/d")):
    try:
        open("/data/d/" + n).read()
        print(n, "read")
    except OSError as e:
        print(n, type(e).__name__)
`
	// "" starts the VM as a user would, in the default mode.
	for _, mode := range []string{"", "landlock"} {
		t.Run(cmp.Or(mode, "default"), func(t *testing.T) {
			needJail(t, mode)
			e := newVMEnv(t)
			linkImages(t, e, "stdlib")
			args := []string{"--accel", "tcg", "--images", "stdlib", "--data", "d=" + dir}
			if mode != "" {
				args = append(args, "--qemu-jail", mode)
			}
			e.mustStart(args...)
			// Runs take turns between slots (the warm box of the next
			// run starts in the other one), so three runs reach both
			// slots' ids; which one a run had shows in its uid_map.
			slots := map[string]bool{}
			defer func() { t.Logf("the runs ran as guest uids %v", slices.Sorted(maps.Keys(slots))) }()
			for i := range 3 {
				r := runPy(t, e, prog, "--data", "d", "--timeout", "30")
				rc := r.receipt(t)
				if rc.Status != wire.StatusOK {
					t.Fatalf("run %d: status %s\n%s", i, rc.Status, r.dump())
				}
				t.Logf("run %d: %s", i, strings.ReplaceAll(strings.TrimSpace(rc.Capture.Stdout), "\n", "; "))
				for _, id := range []string{"101000", "103000"} {
					if strings.Contains(rc.Capture.Stdout, " "+id+" ") {
						slots[id] = true
					}
				}
				for _, n := range []string{"box-owner.txt", "box-group.txt", "slot1-owner.txt"} {
					// Catches: a file the host keeps from others that a
					// box reads because its uid or gid matches the box's
					// (QEMU passes the host ids through to the guest).
					if !strings.Contains(rc.Capture.Stdout, "\n"+n+" ") || strings.Contains(rc.Capture.Stdout, "\n"+n+" read\n") {
						t.Errorf("run %d: the box read (or did not list) %s:\n%s", i, n, rc.Capture.Stdout)
					}
				}
				// Catches: a fix that hides everything, the readable file too.
				if !strings.Contains(rc.Capture.Stdout, "\npublic.txt read\n") {
					t.Errorf("run %d: the box did not read public.txt:\n%s", i, rc.Capture.Stdout)
				}
				// Catches: a receipt that does not count what the box
				// could not read.
				if len(rc.Data) != 1 || !slices.ContainsFunc(rc.Data[0].LeftOut, func(s string) bool {
					return strings.HasPrefix(s, "3 files others may not read")
				}) {
					t.Errorf("run %d: the receipt's data does not count the 3 files others may not read: %+v", i, rc.Data)
				}
			}
		})
	}
}

// TestHostWallFolderSwapped: a data folder's path swapped after `vm
// start` (for a link to another folder, or another folder moved into its
// place) gives either a refusal, or a receipt that describes the folder
// the box saw, never one that counts the other folder.
func TestHostWallFolderSwapped(t *testing.T) {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	base := openTempDir(t)
	dir := filepath.Join(base, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("only a\n"), 0o644)
	e.mustStart("--accel", "tcg", "--images", "stdlib", "--data", "d="+dir)

	// folders are what each folder holds: name to content.
	folders := map[string]map[string]string{
		"original": {"a.txt": "only a\n"},
		"link":     {"b.txt": "b\n", "c.txt": "c\n"},
		"moved":    {"x.txt": "x\n", "y.txt": "yy\n", "z.txt": "zzz\n"},
	}
	makeFolder := func(name string) string {
		p := filepath.Join(base, name)
		os.Mkdir(p, 0o755)
		for n, c := range folders[name] {
			os.WriteFile(filepath.Join(p, n), []byte(c), 0o644)
		}
		return p
	}
	check := func(t *testing.T) {
		r := runPy(t, e, `import os; print(" ".join(sorted(os.listdir("/data/d"))))`, "--data", "d", "--timeout", "30")
		if r.code != exitOK {
			msg := r.stderr
			if r.Error != nil {
				msg += " " + r.Error.Message
			}
			msg = strings.ToLower(msg)
			// Catches: a refusal that does not say why.
			if !strings.Contains(msg, "changed") && !strings.Contains(msg, "moved") && !strings.Contains(msg, "replaced") {
				t.Errorf("the call was refused without saying the folder changed: exit %d\n%s\n%s", r.code, msg, r.raw)
			}
			// Catches: a "refusal" that came after the program had run
			// on the folder anyway.
			if r.Receipt != nil && r.Receipt.Capture.Stdout != "" {
				t.Errorf("the call failed after the program listed %q", r.Receipt.Capture.Stdout)
			}
			t.Logf("refused: %s", strings.TrimSpace(r.stderr))
			return
		}
		rc := r.receipt(t)
		listed := strings.Fields(rc.Capture.Stdout)
		var saw string
		for name, files := range folders {
			if slices.Equal(listed, slices.Sorted(maps.Keys(files))) {
				saw = name
			}
		}
		if saw == "" {
			t.Fatalf("the box listed %v, none of the folders", listed)
		}
		var size int64
		for _, c := range folders[saw] {
			size += int64(len(c))
		}
		t.Logf("the box saw the %s folder; the receipt: %+v", saw, rc.Data)
		// Catches: a receipt made from the path as it is now (the other
		// folder) while the box reads the folder QEMU was given.
		if len(rc.Data) != 1 || rc.Data[0].Files != len(folders[saw]) || rc.Data[0].Bytes != size {
			t.Errorf("the box listed the %s folder (%d files, %d bytes), the receipt says %+v", saw, len(folders[saw]), size, rc.Data)
		}
	}

	t.Run("a link to another folder", func(t *testing.T) {
		if err := os.Rename(dir, dir+".orig"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(makeFolder("link"), dir); err != nil {
			t.Fatal(err)
		}
		check(t)
	})
	t.Run("another folder moved into its place", func(t *testing.T) {
		os.Remove(dir)
		if err := os.Rename(makeFolder("moved"), dir); err != nil {
			t.Fatal(err)
		}
		check(t)
	})
}

// TestHostWallNoJailPossible: where no jail can be built (here: pybox run
// inside a user namespace whose limit of further user namespaces is 0,
// as on a system that allows none), a VM with a data folder is refused,
// saying why and both ways on; one without starts unjailed, and says so
// loudly, in vm start and in vm status.
func TestHostWallNoJailPossible(t *testing.T) {
	needs.Root(t, "lowering user.max_user_namespaces inside a user namespace of the test's own")
	if _, err := exec.LookPath("unshare"); err != nil {
		needs.Unavailable(t, "no unshare (util-linux): run `make deps`")
	}
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	dir := openTempDir(t)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
	// noUserns runs pybox with args where no user namespace can be made.
	noUserns := func(args ...string) (string, string, int) {
		cmd := exec.Command("unshare", append([]string{"-U", "-r", "--", "sh", "-c",
			`echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"`, e.bin}, args...)...)
		cmd.Env = e.env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}
	start := []string{"vm", "start", "--accel", "tcg", "--cpus", "1", "--memory", "768", "--images", "stdlib"}

	out, errOut, code := noUserns(append(start, "--data", "d="+dir)...)
	// Catches: a data folder given to an unjailed QEMU without the user
	// saying so, or a refusal that does not say what to do.
	if code == 0 || !strings.Contains(errOut, "cannot be jailed here") || !strings.Contains(errOut, "without --data") || !strings.Contains(errOut, "--qemu-jail none") {
		t.Errorf("vm start --data where no jail can be built: exit %d\n%s%s", code, out, errOut)
	}
	e.expectGone()

	out, errOut, code = noUserns(start...)
	// Catches: a silent fallback to no jail.
	if code != 0 || !strings.Contains(errOut, "warning: QEMU is not jailed") {
		t.Fatalf("vm start without data folders where no jail can be built: exit %d\n%s%s", code, out, errOut)
	}
	if j := jailState(t, e); !strings.HasPrefix(j, "none: QEMU could not be jailed here") {
		t.Errorf("state.json's jail: %q", j)
	}
	status, _, _ := e.pybox("vm", "status")
	if !strings.Contains(status, "qemu jail:      none:") {
		t.Errorf("vm status does not say QEMU runs unjailed:\n%s", status)
	}
	e.pybox("vm", "stop")
	e.expectGone()
}

// TestHostFull: 32 connections to the supervisor that never say hello
// fill it. A run then is told the truth (the supervisor is full; nothing
// ran, cleanup NOT_ATTEMPTED); a few seconds later the silent ones have
// been dropped, and a run goes through.
func TestHostFull(t *testing.T) {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	e.mustStart("--accel", "tcg", "--images", "stdlib")
	sock := paths.ForVM(e.home).Socket()
	for range 32 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	r := runPy(t, e, `print("ran")`)
	// Catches: "no_vm: write: broken pipe", or busy with cleanup UNKNOWN,
	// for a run that never started on a VM that runs.
	if r.code == exitOK || r.Error == nil || r.Error.Cleanup == nil || r.Error.Cleanup.Status != wire.CleanupNotAttempted ||
		!strings.Contains(r.Error.Message, "nothing ran") || !strings.Contains(r.Error.Message, "32 connections") {
		t.Fatalf("a run on a full host: exit %d, %+v\n%s", r.code, r.Error, r.stderr)
	}
	// Catches: connections that say nothing keeping their places forever.
	deadline := time.Now().Add(20 * time.Second)
	for {
		time.Sleep(time.Second)
		r = runPy(t, e, `print("ran")`)
		if r.code == exitOK || time.Now().After(deadline) {
			break
		}
	}
	if r.code != exitOK || r.receipt(t).Capture.Stdout != "ran\n" {
		t.Fatalf("a run once the silent connections should be gone: exit %d\n%s", r.code, r.stderr)
	}
}
