package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pybox/host/internal/typecheck"
)

// The macOS backend cannot be built here (cgo against the macOS SDK), so
// these tests type-check the darwin build of the host side against vz's
// real API: a wrong call into vz fails here, on Linux, in CI.

const (
	vzPath     = "github.com/Code-Hex/vz/v3"
	moduleRoot = "../.." // errors then name files as host/vm/...
)

// TestDarwinTypeCheck checks the darwin build of everything on the host
// side: Apple silicon, which the vz backend serves, and Intel, where pybox
// must still build (and say the VM is for Apple silicon).
func TestDarwinTypeCheck(t *testing.T) {
	for _, arch := range []string{"arm64", "amd64"} {
		t.Run(arch, func(t *testing.T) {
			pkgs, err := typecheck.Check(typecheck.Config{Dir: moduleRoot, GOOS: "darwin", GOARCH: arch}, "pybox/host/...", "pybox/cmd/pybox")
			if err != nil {
				t.Fatalf("the darwin/%s build does not type-check:\n%v", arch, err)
			}
			for _, p := range pkgs {
				if p.Path == "pybox/host/vm" {
					checkVZBackend(t, p)
					return
				}
			}
			t.Fatalf("pybox/host/vm was not checked")
		})
	}
}

// checkVZBackend makes sure the check saw the backend: a build tag that
// dropped vm_vz_darwin.go would otherwise pass unnoticed.
func checkVZBackend(t *testing.T, p *typecheck.Package) {
	t.Helper()
	found := false
	for _, f := range p.Files {
		found = found || filepath.Base(f) == "vm_vz_darwin.go"
	}
	if !found {
		t.Errorf("the darwin build of host/vm has no vm_vz_darwin.go: files %v", p.Files)
	}
	for _, im := range p.Types.Imports() {
		if im.Path() == vzPath {
			return
		}
	}
	t.Errorf("the darwin build of host/vm does not import %s", vzPath)
}

// TestDarwinTypeCheckCatchesMistakes feeds the check copies of
// vm_vz_darwin.go with one wrong call into vz each, and expects a type
// error that names it.
func TestDarwinTypeCheckCatchesMistakes(t *testing.T) {
	file, err := filepath.Abs("vm_vz_darwin.go")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"method name", "sock.Connect(guestVsockPort)", "sock.Conect(guestVsockPort)",
			"sock.Conect undefined (type *vz.VirtioSocketDevice has no field or method Conect)"},
		{"argument count", "vz.NewVirtioEntropyDeviceConfiguration()", "vz.NewVirtioEntropyDeviceConfiguration(1)",
			"too many arguments in call to vz.NewVirtioEntropyDeviceConfiguration"},
		{"argument type", "uint(cfg.CPUs), uint64(cfg.MemoryMiB)<<20", "cfg.CPUs, uint64(cfg.MemoryMiB)<<20",
			"cannot use cfg.CPUs (variable of type int) as uint value in argument to vz.NewVirtualMachineConfiguration"},
		{"constant", "vz.DiskImageCachingModeCached", "vz.DiskImageCachingModeCache",
			"undefined: vz.DiskImageCachingModeCache"},
		{"result count", "machine, err := vz.NewVirtualMachine(conf)", "machine := vz.NewVirtualMachine(conf)",
			"assignment mismatch: 1 variable but vz.NewVirtualMachine returns 2 values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(src), tc.from) {
				t.Fatalf("vm_vz_darwin.go no longer contains %q: update this test", tc.from)
			}
			bad := strings.Replace(string(src), tc.from, tc.to, 1)
			cfg := typecheck.Config{Dir: moduleRoot, GOOS: "darwin", GOARCH: "arm64", Overlay: map[string][]byte{file: []byte(bad)}}
			_, err := typecheck.Check(cfg, "pybox/host/vm")
			if err == nil {
				t.Fatalf("no type error for %q", tc.to)
			}
			t.Logf("the check says:\n%v", err)
			if msg := err.Error(); !strings.Contains(msg, "host/vm/vm_vz_darwin.go:") || !strings.Contains(msg, tc.want) {
				t.Errorf("the type error does not name the mistake: want %q in vm_vz_darwin.go", tc.want)
			}
		})
	}
}
