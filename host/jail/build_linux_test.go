package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"pybox/shared/needs"
)

// buildTreeFor makes a tree like an image's, its programs the host's
// /usr (bound read-only, as a build binds nothing else of the host's),
// with a canary file of root's mode 0600 in it and a writable directory.
func buildTreeFor(t *testing.T) (tree, out string, binds []Bind) {
	t.Helper()
	tree = t.TempDir()
	for _, d := range []string{"usr", "dev", "proc", "tmp", "etc", "work"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if target, err := os.Readlink("/" + l); err == nil {
			os.Symlink(target, filepath.Join(tree, l))
		}
	}
	write(t, filepath.Join(tree, "etc", "secret"), "root only")
	os.Chmod(filepath.Join(tree, "etc", "secret"), 0o600)
	write(t, filepath.Join(tree, "etc", "readable"), "anyone")
	out = t.TempDir()
	os.Chown(out, 65534, 65534)
	return tree, out, []Bind{{Host: "/usr", Jail: "/usr"}, {Host: out, Jail: "/work", Write: true}}
}

// A build's jail runs its program as an ordinary user with no
// capability, in the tree, read-only but for what the build made
// writable, with no network unless asked, and nothing of the host's
// beyond what it bound.
func TestBuildJail(t *testing.T) {
	needs.Root(t, "a build's jail is made by root, as image builds are")
	tree, out, binds := buildTreeFor(t)
	canary := filepath.Join(t.TempDir(), "canary")
	write(t, canary, "host file")
	sh, _ := exec.LookPath("sh")
	script := `id -u; id -g; id -G
grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status
if cat /etc/readable >/dev/null 2>&1; then echo "read readable: done"; else echo "read readable: refused"; fi
if cat /etc/secret >/dev/null 2>&1; then echo "read secret: done"; else echo "read secret: refused"; fi
if echo x > /etc/new 2>/dev/null; then echo "write tree: done"; else echo "write tree: refused"; fi
if echo x > /usr/new 2>/dev/null; then echo "write usr: done"; else echo "write usr: refused"; fi
if echo x > /work/made 2>/dev/null; then echo "write work: done"; else echo "write work: refused"; fi
if test -e ` + canary + `; then echo "host file: seen"; else echo "host file: absent"; fi
echo "interfaces $(grep -c : /proc/net/dev)"
echo "pid $$"`
	run := func(network bool) string {
		spec := &Spec{Mode: Build, Program: sh, Args: []string{"-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
			Root: tree, Binds: binds, Network: network, User: 65534}
		got, err := jailed(t, spec, nil)
		if err != nil {
			t.Fatalf("jailed: %v\n%s", err, got)
		}
		return got
	}
	got := run(false)
	t.Logf("in the jail:\n%s", got)
	for _, want := range []string{"65534\n65534\n65534\n", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000",
		"CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "read readable: done", "read secret: refused", "write tree: refused",
		"write usr: refused", "write work: done", "host file: absent", "interfaces 1\n", "pid 1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the jail's program did not say %q", want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "made")); err != nil || string(b) != "x\n" {
		t.Errorf("what it wrote to its writable directory: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(tree, "etc", "new")); err == nil {
		t.Error("the program wrote into the tree")
	}
	hostIfaces, _ := os.ReadFile("/proc/net/dev")
	if n := strings.Count(string(hostIfaces), ":"); n > 1 {
		if got := run(true); !strings.Contains(got, "interfaces "+strconv.Itoa(n)+"\n") {
			t.Errorf("with the network, the jail sees %d interfaces, want the host's %d:\n%s", strings.Count(got, ":"), n, got)
		}
	}
}

// A build's jail never runs its program as root, nor with a root path
// that is not absolute.
func TestBuildJailRefuses(t *testing.T) {
	needs.Root(t, "a build's jail is made by root, as image builds are")
	tree, _, binds := buildTreeFor(t)
	sh, _ := exec.LookPath("sh")
	for _, c := range []struct {
		name string
		spec Spec
		want string
	}{
		{"root", Spec{Root: tree, Binds: binds, User: 0}, "not as uid 0"},
		{"relative root", Spec{Root: "tree", Binds: binds, User: 65534}, "absolute root"},
		{"bind outside", Spec{Root: tree, Binds: append(binds, Bind{Host: "/etc", Jail: "../etc"}), User: 65534}, "not an absolute, clean path"},
	} {
		spec := c.spec
		spec.Mode, spec.Program, spec.Args = Build, sh, []string{"-c", "echo ran"}
		got, err := jailed(t, &spec, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(got, "ran") {
			t.Errorf("%s: err %v, output %q; want a refusal saying %q", c.name, err, got, c.want)
		}
	}
}
