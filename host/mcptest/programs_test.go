package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pybox/host/picture"
)

// The stdlib chart program, run by the host's python3 with its output
// folder moved: it writes a PNG that passes the server's picture check,
// and prints its sha256. (The data one runs in the VM's check test.)
func TestChartProgramStdlib(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("no python3 on PATH: install it (make deps does)")
	}
	dir := t.TempDir()
	code := strings.ReplaceAll(chartProgramStdlib, "/tmp/output/", dir+"/")
	out, err := exec.Command(python, "-I", "-c", code).Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	png, err := os.ReadFile(filepath.Join(dir, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := picture.Check(png, 2000); err != nil || info.Format != picture.PNG || info.Width != 48 || info.Height != 32 {
		t.Fatalf("%+v %v", info, err)
	}
	if got := strings.TrimSpace(string(out)); got != sha256Hex(png) {
		t.Fatalf("printed %q; the file's sha256 is %s", got, sha256Hex(png))
	}
}
