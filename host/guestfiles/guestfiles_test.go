package guestfiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree lays out a prefix with bin/pybox and the guest files in the
// directories named, and returns the prefix.
func tree(t *testing.T, dirs ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range append([]string{"bin"}, dirs...) {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(root, "bin", "pybox"), "exe")
	for _, d := range dirs {
		write(t, filepath.Join(root, d, "bzImage"), "kernel "+d)
		write(t, filepath.Join(root, d, InitramfsName), "initramfs "+d)
	}
	return root
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFindOrder(t *testing.T) {
	root := tree(t, "lib/pybox/x86_64", "build/x86_64")
	other := tree(t, "elsewhere")
	s := search{exe: filepath.Join(root, "bin", "pybox"), getenv: env(nil), arch: "x86_64"}
	for _, c := range []struct {
		name            string
		env             map[string]string
		kFlag, iFlag    string
		wantK, wantFrom string
		wantI           string
	}{
		{name: "installed before the build tree",
			wantK: root + "/lib/pybox/x86_64/bzImage", wantFrom: "installed", wantI: root + "/lib/pybox/x86_64/initramfs.cpio"},
		{name: "the environment before the installed files",
			env:   map[string]string{EnvKernel: other + "/elsewhere/bzImage"},
			wantK: other + "/elsewhere/bzImage", wantFrom: "$PYBOX_KERNEL", wantI: root + "/lib/pybox/x86_64/initramfs.cpio"},
		{name: "the flag before the environment",
			env:   map[string]string{EnvKernel: root + "/build/x86_64/bzImage"},
			kFlag: other + "/elsewhere/bzImage", iFlag: root + "/build/x86_64/initramfs.cpio",
			wantK: other + "/elsewhere/bzImage", wantFrom: "--kernel", wantI: root + "/build/x86_64/initramfs.cpio"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.getenv = env(c.env)
			f, err := find(s, c.kFlag, c.iFlag)
			if err != nil {
				t.Fatal(err)
			}
			if f.Kernel.Path != c.wantK || f.Kernel.From != c.wantFrom || f.Initramfs.Path != c.wantI {
				t.Errorf("got %+v", f)
			}
		})
	}

	t.Run("the build tree when nothing is installed", func(t *testing.T) {
		root := tree(t, "build/x86_64")
		f, err := find(search{exe: filepath.Join(root, "bin", "pybox"), getenv: env(nil), arch: "x86_64"}, "", "")
		if err != nil || f.Kernel.From != "build tree" || f.Initramfs.Path != root+"/build/x86_64/initramfs.cpio" {
			t.Errorf("%+v %v", f, err)
		}
	})
	t.Run("arm64 boots an Image", func(t *testing.T) {
		root := tree(t)
		os.MkdirAll(filepath.Join(root, "lib/pybox/arm64"), 0o755)
		write(t, filepath.Join(root, "lib/pybox/arm64/Image"), "k")
		write(t, filepath.Join(root, "lib/pybox/arm64", InitramfsName), "i")
		f, err := find(search{exe: filepath.Join(root, "bin", "pybox"), getenv: env(nil), arch: "arm64"}, "", "")
		if err != nil || filepath.Base(f.Kernel.Path) != "Image" {
			t.Errorf("%+v %v", f, err)
		}
	})
}

// A flag or variable naming a missing file is an error: the person
// asked for that file, and silently booting another would surprise them.
func TestFindExplicitMissing(t *testing.T) {
	root := tree(t, "lib/pybox/x86_64")
	s := search{exe: filepath.Join(root, "bin", "pybox"), getenv: env(map[string]string{EnvInitramfs: "/nonexistent/initramfs.cpio"}), arch: "x86_64"}
	_, err := find(s, "", "")
	if err == nil || !strings.Contains(err.Error(), "$PYBOX_INITRAMFS names the guest initramfs /nonexistent/initramfs.cpio, which does not exist") {
		t.Errorf("got %v", err)
	}
	_, err = find(s, root+"/lib", "")
	if err == nil || !strings.Contains(err.Error(), "--kernel names the guest kernel "+root+"/lib, which is not a regular file") {
		t.Errorf("got %v", err)
	}
}

func TestFindNothingNamesEveryPlace(t *testing.T) {
	root := tree(t)
	_, err := find(search{exe: filepath.Join(root, "bin", "pybox"), getenv: env(nil), arch: "x86_64"}, "", "")
	var nf *NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("got %v, want a NotFoundError", err)
	}
	for _, want := range []string{
		"no guest kernel (bzImage) for this pybox",
		"--kernel: not given",
		"$PYBOX_KERNEL: not set",
		"installed: " + root + "/lib/pybox/x86_64/bzImage: does not exist",
		"build tree: " + root + "/build/x86_64/bzImage: does not exist",
		"`make install`", "`make`", "pass --kernel FILE",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	_, err = find(search{exeErr: errors.New("no /proc"), getenv: env(nil), arch: "x86_64"}, "", "")
	if err == nil || !strings.Contains(err.Error(), "installed: unknown: cannot find this program (no /proc)") {
		t.Errorf("got %v", err)
	}
}

func TestManifest(t *testing.T) {
	root := tree(t, "lib/pybox/x86_64")
	dir := filepath.Join(root, "lib/pybox/x86_64")
	m, err := MakeManifest(dir, "x86_64", "v1.2", "abc")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 2 || m.Files[0].Name != "bzImage" || m.Files[1].Bytes != int64(len("initramfs lib/pybox/x86_64")) {
		t.Errorf("manifest %+v", m)
	}
	first, _ := os.ReadFile(filepath.Join(dir, ManifestName))
	if _, err := MakeManifest(dir, "x86_64", "v1.2", "abc"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, ManifestName)); string(again) != string(first) {
		t.Errorf("the same files gave another manifest:\n%s\n%s", first, again)
	}

	s := search{exe: filepath.Join(root, "bin", "pybox"), getenv: env(nil), arch: "x86_64"}
	f, _ := find(s, "", "")
	r, err := f.Check()
	if err != nil {
		t.Fatal(err)
	}
	if r.Kernel.Manifest != "matches" || r.Initramfs.Manifest != "matches" || r.AgentVersion != "v1.2" || r.Kernel.SHA256 != m.Files[0].SHA256 {
		t.Errorf("report %+v", r)
	}

	// An initramfs rebuilt without its manifest: the manifest's agent
	// version no longer says what it holds.
	write(t, filepath.Join(dir, InitramfsName), "rebuilt")
	r, err = f.Check()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Initramfs.Manifest, "differs from its manifest") || r.AgentVersion != "" || r.Kernel.Manifest != "matches" {
		t.Errorf("report after a rebuild %+v", r)
	}
	os.Remove(filepath.Join(dir, ManifestName))
	if r, _ = f.Check(); r.Kernel.Manifest != "no manifest" || r.ManifestPath != "" {
		t.Errorf("report without a manifest %+v", r)
	}
}
