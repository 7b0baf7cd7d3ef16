package jail

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/needs"
)

// The test binary is its own helper: run with helperEnv set, it is
// `pybox vm _jail`.
const helperEnv = "PYBOX_JAIL_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

// world is a data folder, a guest file and a canary outside both.
type world struct {
	data, victim, guestFile, canary string
	folder                          Folder
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{}
	// The data folder under /tmp on purpose: the namespaces mode builds
	// its root on a tmpfs over /tmp, and must still find it.
	w.data = t.TempDir()
	w.victim = filepath.Join(w.data, "victim.csv")
	write(t, w.victim, "region,sales\nnorth,120\n")
	os.Chmod(w.data, 0o755)
	other := t.TempDir()
	w.guestFile = filepath.Join(other, "kernel")
	write(t, w.guestFile, "not a kernel")
	w.canary = filepath.Join(other, "canary")
	write(t, w.canary, "secret")
	var st unix.Stat_t
	if err := unix.Stat(w.data, &st); err != nil {
		t.Fatal(err)
	}
	w.folder = Folder{Host: w.data, Dev: st.Dev, Ino: st.Ino}
	return w
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// spec is a shell script run in a jail of mode over w.
func (w *world) spec(mode, script string) *Spec {
	f := w.folder
	f.Jail = Place(mode, w.data, "data", "d")
	sh, _ := exec.LookPath("sh")
	return &Spec{
		Mode: mode, Program: sh, Args: []string{"-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
		Files:   []File{{Host: w.guestFile, Jail: Place(mode, w.guestFile, "kernel", "")}},
		Folders: []Folder{f},
	}
}

// jailed runs spec and returns its output and exit error. inspect, if
// set, is called with the program's pid while it waits on its stdin.
func jailed(t *testing.T, spec *Spec, inspect func(pid int)) (string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stdinR, stdinW, _ := os.Pipe()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cmd{Spec: spec, Helper: []string{exe}, HelperEnv: []string{helperEnv + "=1"}, Stdin: stdinR, Stdout: out, Stderr: out}
	done := make(chan error, 1)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := c.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- c.Wait()
	}()
	if err := <-started; err != nil {
		stdinR.Close()
		stdinW.Close()
		return "", err
	}
	stdinR.Close()
	if inspect != nil {
		inspect(c.Process().Pid)
	}
	stdinW.Close()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(30 * time.Second):
		c.Process().Kill()
		t.Fatal("the jailed program did not end")
	}
	b, _ := os.ReadFile(out.Name())
	return string(b), werr
}

// script is what the program tries in the jail: each line says what
// happened. read waits for stdin to close, so that the test can look at
// the running program from outside first.
const script = `read -r _ || true
echo "pid $$"
if true > %[1]s/victim.csv 2>/dev/null; then echo "truncate: done"; else echo "truncate: refused"; fi
if echo x >> %[1]s/victim.csv 2>/dev/null; then echo "append: done"; else echo "append: refused"; fi
if true > %[1]s/new 2>/dev/null; then echo "create: done"; else echo "create: refused"; fi
if cat %[2]s >/dev/null 2>&1; then echo "guest file: read"; else echo "guest file: unread"; fi
if cat %[3]s >/dev/null 2>&1; then echo "canary: read"; else echo "canary: unread"; fi
if cat %[1]s/victim.csv >/dev/null 2>&1; then echo "data: read"; else echo "data: unread"; fi
if chmod 600 %[3]s %[1]s/victim.csv 2>/dev/null; then echo "chmod: done"; else echo "chmod: refused"; fi
if touch -m -d 2001-01-01 %[3]s 2>/dev/null; then echo "utimes: done"; else echo "utimes: refused"; fi
if echo x > /dev/null; then echo "write /dev/null: done"; else echo "write /dev/null: refused"; fi
`

func TestJail(t *testing.T) {
	for _, mode := range []string{Namespaces, Landlock} {
		t.Run(mode, func(t *testing.T) {
			if mode == Landlock && LandlockABI() < MinLandlockABI {
				needs.Unavailable(t, fmt.Sprintf("Landlock ABI %d here; the landlock jail needs %d (Linux 6.2)", LandlockABI(), MinLandlockABI))
			}
			w := newWorld(t)
			spec := w.spec(mode, "")
			spec.Args[1] = fmt.Sprintf(script, spec.Folders[0].Jail, spec.Files[0].Jail, w.canary)
			var status string
			out, err := jailed(t, spec, func(pid int) {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
				status = string(b)
			})
			if err != nil {
				t.Fatalf("the jailed program: %v\n%s", err, out)
			}
			t.Logf("in the jail:\n%s", out)
			for _, want := range []string{
				"truncate: refused", "append: refused", "create: refused", // the data folder is read-only to the program
				"guest file: read", "data: read", // what the VM needs is there
				"canary: unread", // nothing else of the host is
				// Metadata: Landlock does not control it, the filter does.
				"chmod: refused", "utimes: refused",
				"write /dev/null: done", // a device still works
			} {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("the jail let the program do otherwise than %q", want)
				}
			}
			if b, _ := os.ReadFile(w.victim); string(b) != "region,sales\nnorth,120\n" {
				t.Errorf("the host's data file changed: %q", b)
			}
			if fi, err := os.Stat(w.canary); err != nil || fi.Mode().Perm() != 0o644 || fi.ModTime().Year() == 2001 {
				t.Errorf("the canary's mode or time changed: %v %v", fi.Mode(), fi.ModTime())
			}
			if _, err := os.Stat(filepath.Join(w.data, "new")); err == nil {
				t.Errorf("the program made a file in the data folder")
			}
			// No capability, and no way to gain one, in any namespace.
			for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
				if !strings.Contains(status, want) {
					t.Errorf("the program's /proc status lacks %q:\n%s", want, status)
				}
			}
			if mode == Namespaces && !strings.Contains(out, "pid 1\n") {
				t.Errorf("the program is not alone in a pid namespace of its own")
			}
		})
	}
}

// A data folder swapped between the supervisor's open and the helper's
// is refused, and the program does not run.
func TestJailRefusesSwappedFolder(t *testing.T) {
	w := newWorld(t)
	spec := w.spec(Namespaces, "echo ran")
	spec.Folders[0].Ino++
	out, err := jailed(t, spec, nil)
	if err == nil || !strings.Contains(err.Error(), "no longer the directory") || strings.Contains(out, "ran") {
		t.Fatalf("a swapped folder: err %v, output %q", err, out)
	}
}

// A step that fails is named, and nothing runs.
func TestJailNamesTheFailedStep(t *testing.T) {
	w := newWorld(t)
	spec := w.spec(Namespaces, "echo ran")
	spec.Files = append(spec.Files, File{Host: "/nonexistent/image", Jail: "/pybox/images/x"})
	out, err := jailed(t, spec, nil)
	if err == nil || !strings.Contains(err.Error(), "open /nonexistent/image") || strings.Contains(out, "ran") {
		t.Fatalf("a missing file: err %v, output %q", err, out)
	}
}

// The program inherits descriptor 3 when it is the listener, and nothing
// else the helper held.
func TestJailPassesOnlyTheListener(t *testing.T) {
	w := newWorld(t)
	spec := w.spec(Namespaces, "for fd in 3 4 5 6 7; do if { true >&$fd; } 2>/dev/null; then echo \"fd $fd open\"; fi; done")
	spec.Listener = true
	l, err := os.CreateTemp(t.TempDir(), "listener")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	exe, _ := os.Executable()
	var out bytes.Buffer
	outW, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cmd{Spec: spec, Helper: []string{exe}, HelperEnv: []string{helperEnv + "=1"}, Stdout: outW, Stderr: outW, Listener: l}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := c.Start(); err != nil {
			errc <- err
			return
		}
		errc <- c.Wait()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(outW.Name())
	out.Write(b)
	if out.String() != "fd 3 open\n" {
		t.Errorf("descriptors open in the program: %q (want only fd 3)", out.String())
	}
}

// The helper refuses to run for a supervisor that is gone.
func TestHelperChecksTheSupervisor(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := supervisorAlive(int(r.Fd())); err != nil {
		t.Fatalf("a live life pipe: %v", err)
	}
	w.Close()
	if err := supervisorAlive(int(r.Fd())); err == nil || !strings.Contains(err.Error(), "supervisor is gone") {
		t.Fatalf("a hung-up life pipe: %v", err)
	}
}
