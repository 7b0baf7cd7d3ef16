package typecheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var darwin = Config{Dir: ".", GOOS: "darwin", GOARCH: "arm64"}

const vzPath = "github.com/Code-Hex/vz/v3"

// TestCgoPackageInFull checks all of vz, function bodies included, for
// darwin/arm64: the leniency towards C must be enough for a package that
// is mostly calls into Objective-C.
func TestCgoPackageInFull(t *testing.T) {
	pkgs, err := Check(darwin, vzPath)
	if err != nil {
		t.Fatalf("vz does not type-check for darwin/arm64:\n%v", err)
	}
	if len(pkgs) != 1 || pkgs[0].Types == nil || pkgs[0].Types.Scope().Lookup("NewVirtualMachine") == nil {
		t.Fatalf("vz was not checked: %+v", pkgs)
	}
}

// TestCgoFileGoErrors makes sure the leniency towards C hides no Go
// mistake in a file that imports "C".
func TestCgoFileGoErrors(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/cgo\n\ngo 1.22\n",
		"c.go": `package cgo

// #include <stdlib.h>
// char *name(void);
import "C"

import "unsafe"

type char C.char

func cname() *C.char { return C.name() }

// Fine here: every C.name is accepted, and a *C.char (a pointer to an
// invalid type, as vz's objc.GetUUID returns) converts to a Go type.
func Name() string {
	p := (*char)(cname())
	defer C.free(unsafe.Pointer(p))
	return C.GoString((*C.char)(p))
}

// Wrong in Go, C or not.
func Count() int { return "three" }
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Check(Config{Dir: dir, GOOS: "darwin", GOARCH: "arm64"}, ".")
	if err == nil {
		t.Fatal("no error for a Go mistake in a cgo file")
	}
	if want := `c.go:22:27: cannot use "three" (untyped string constant) as int value in return statement`; err.Error() != want {
		t.Errorf("errors:\n%v\nwant only\n%s", err, want)
	}
}

// TestLoadErrors reports a package that does not exist instead of
// checking nothing.
func TestLoadErrors(t *testing.T) {
	_, err := Check(darwin, "pybox/host/nosuchpackage")
	if err == nil || !strings.Contains(err.Error(), "nosuchpackage") {
		t.Fatalf("Check of a missing package: err = %v", err)
	}
}
