package image

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pybox/shared/archs"
)

// Debian and qemu-user name the architectures their own way.
func TestArchNames(t *testing.T) {
	if debianArch(archs.X86_64) != "amd64" || debianArch(archs.Arm64) != "arm64" || qemuArch(archs.Arm64) != "aarch64" || qemuArch(archs.X86_64) != "x86_64" {
		t.Error("Debian's or qemu's names of the architectures are wrong")
	}
	for _, a := range archs.All {
		if err := CheckArch(a); err != nil {
			t.Errorf("CheckArch(%q): %v", a, err)
		}
	}
	for _, bad := range []string{"", "amd64", "aarch64", "riscv64", "ARM64"} {
		if err := CheckArch(bad); err == nil || !strings.Contains(err.Error(), "use x86_64 or arm64") {
			t.Errorf("CheckArch(%q): %v", bad, err)
		}
	}
}

// The store's directory names keep architectures apart and cannot be
// mistaken for another image's.
func TestDirName(t *testing.T) {
	for _, c := range []struct{ name, arch, dir string }{
		{"stdlib", archs.X86_64, "stdlib"},
		{"stdlib", archs.Arm64, "stdlib@arm64"},
		{"my-tools_2", "riscv64", "my-tools_2@riscv64"},
	} {
		if got := dirName(c.name, c.arch); got != c.dir {
			t.Errorf("dirName(%q, %q) = %q, want %q", c.name, c.arch, got, c.dir)
		}
		if n, a, ok := parseDirName(c.dir); !ok || n != c.name || a != c.arch {
			t.Errorf("parseDirName(%q) = %q, %q, %v", c.dir, n, a, ok)
		}
	}
	// x86_64 has one place only, the one from before images had an
	// architecture; work files and junk are no image's.
	for _, bad := range []string{"stdlib@x86_64", ".tmp-stdlib-1234", ".old-stdlib@arm64-12", "stdlib@", "stdlib@ARM", "@arm64", "a@b@c", "Stdlib"} {
		if n, a, ok := parseDirName(bad); ok {
			t.Errorf("parseDirName(%q) = %q, %q: want no image", bad, n, a)
		}
	}
	for _, bad := range []string{"", "ARM64", "arm-64", "../x", "x/y", "9arch", strings.Repeat("a", 17), "arm64\x1b"} {
		if err := checkArchName(bad); err == nil {
			t.Errorf("checkArchName(%q) accepted", bad)
		}
	}
}

// A build for another architecture stops before it starts, saying what
// to do, when this machine cannot run that architecture's programs.
func TestEmulationCheck(t *testing.T) {
	foreign := archs.Arm64
	if archs.Host() == archs.Arm64 {
		foreign = archs.X86_64
	}
	q := "qemu-" + qemuArch(foreign)
	found := func(string) (string, error) { return "/usr/bin/arch-test", nil }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	registered := "enabled\ninterpreter /usr/libexec/qemu-binfmt/x-binfmt-P\nflags: PF\noffset 0\n"
	for _, c := range []struct {
		name  string
		setup func(dir string)
		look  func(string) (string, error)
		want  []string // "" means no error
	}{
		{"registered", func(dir string) {
			os.WriteFile(filepath.Join(dir, "status"), []byte("enabled\n"), 0o644)
			os.WriteFile(filepath.Join(dir, q), []byte(registered), 0o644)
		}, found, nil},
		{"binfmt_misc not mounted", func(string) {}, found,
			[]string{"binfmt_misc is not mounted", "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc", "update-binfmts --enable " + q, "apt-get install qemu-user-static binfmt-support"}},
		{"qemu-user-static not installed", func(dir string) {
			os.WriteFile(filepath.Join(dir, "status"), []byte("enabled\n"), 0o644)
		}, found, []string{"no " + q + " entry", "apt-get install qemu-user-static binfmt-support arch-test", "update-binfmts --enable " + q}},
		{"disabled", func(dir string) {
			os.WriteFile(filepath.Join(dir, "status"), []byte("enabled\n"), 0o644)
			os.WriteFile(filepath.Join(dir, q), []byte(strings.Replace(registered, "enabled", "disabled", 1)), 0o644)
		}, found, []string{"entry is disabled", "update-binfmts --enable " + q}},
		{"no F flag", func(dir string) {
			os.WriteFile(filepath.Join(dir, "status"), []byte("enabled\n"), 0o644)
			os.WriteFile(filepath.Join(dir, q), []byte(strings.Replace(registered, "flags: PF", "flags: P", 1)), 0o644)
		}, found, []string{"lacks the F flag", "update-binfmts"}},
		{"no arch-test", func(dir string) {
			os.WriteFile(filepath.Join(dir, "status"), []byte("enabled\n"), 0o644)
			os.WriteFile(filepath.Join(dir, q), []byte(registered), 0o644)
		}, missing, []string{"mmdebstrap needs arch-test", "apt-get install arch-test"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(dir)
			err := emulation(foreign, dir, c.look)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("emulation: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("emulation: no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}
	// This machine's own architecture needs none of it.
	if err := emulation(archs.Host(), t.TempDir(), missing); err != nil {
		t.Errorf("a build for this machine: %v", err)
	}
}
