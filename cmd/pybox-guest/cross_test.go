package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The macOS backend boots this agent built for linux/arm64; it must keep
// cross-building from here, static and without cgo, like the x86-64 one.
func TestCrossBuildsForArm64(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pybox-guest")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=arm64 go build ./cmd/pybox-guest: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// ELF, 64-bit, little-endian, e_machine EM_AARCH64 (183).
	if len(b) < 20 || string(b[:4]) != "\x7fELF" || b[4] != 2 || b[18] != 183 {
		t.Fatalf("the arm64 build is not an aarch64 ELF binary")
	}
}
