//go:build linux

package box

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

func TestProgramImports(t *testing.T) {
	code := `import pandas as pd, json
from matplotlib import pyplot as plt, cm
from numpy.linalg import (norm,
    inv)
from . import local
def f():
    import statistics  # inside a function
x = "import nothing"
# import commented
`
	want := []string{"pandas", "json", "matplotlib", "matplotlib.pyplot", "matplotlib.cm", "numpy.linalg", "numpy.linalg.norm", "statistics"}
	if got := programImports(code); !slices.Equal(got, want) {
		t.Errorf("programImports = %q\nwant %q", got, want)
	}
}

func TestNeedsModule(t *testing.T) {
	wanted := []string{"json", "re", "numpy", "pandas", "matplotlib", "matplotlib.pyplot"}
	for _, c := range []struct {
		imports []string
		current string
		need    bool
	}{
		{nil, "numpy", false},                          // print(1)
		{[]string{"json"}, "numpy", false},             // json is imported already
		{[]string{"pandas"}, "numpy", true},            // pandas imports numpy
		{[]string{"pandas"}, "pandas", true},           // the module itself
		{[]string{"numpy.linalg"}, "numpy", true},      // a submodule of it
		{[]string{"pandas"}, "matplotlib", false},      // listed after what it needs
		{[]string{"matplotlib.pyplot"}, "numpy", true}, // matplotlib needs numpy
		{[]string{"matplotlib"}, "matplotlib.pyplot", false},
		{[]string{"pandas"}, "unlisted", false},
	} {
		if got := needsModule(c.imports, wanted, c.current); got != c.need {
			t.Errorf("needsModule(%q, at %s) = %v, want %v", c.imports, c.current, got, c.need)
		}
	}
}

func TestReadPreloadList(t *testing.T) {
	image := t.TempDir()
	p := filepath.Join(image, wire.ImagePreloadFile)
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte("json\n# a comment\n\nnumpy\n  pandas  \n"), 0o644)
	if got, err := readPreloadList(image); err != nil || !slices.Equal(got, []string{"json", "numpy", "pandas"}) {
		t.Errorf("readPreloadList = %q, %v", got, err)
	}
	if got, err := readPreloadList(t.TempDir()); got != nil || err != nil {
		t.Errorf("no file: %q, %v", got, err)
	}
}

// A preload list that is not a plain file of the image fails the warm
// box at once, and says why.
func TestReadPreloadListRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		plant func(p string) error
		why   string
	}{
		{"a FIFO", func(p string) error { return unix.Mkfifo(p, 0o644) }, "preload is not a regular file (a FIFO)"},
		{"a link to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "preload is a symbolic link"},
		{"an absolute link", func(p string) error { return os.Symlink("/etc/hostname", p) }, "preload is a symbolic link"},
		{"a relative link out", func(p string) error { return os.Symlink("../../../../outside", p) }, "preload is a symbolic link"},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o755) }, "preload is not a regular file (a directory)"},
		{"too large", func(p string) error { return os.WriteFile(p, make([]byte, maxPreloadBytes+1), 0o644) }, "preload is larger than 65536 bytes"},
		{"under an absolute link", func(p string) error { return swapDir(p, t.TempDir()) }, "preload is under a symbolic link, /usr/share/pybox"},
		{"under a relative link", func(p string) error { return swapDir(p, "../../..") }, "preload is under a symbolic link, /usr/share/pybox"},
	} {
		image := t.TempDir()
		p := filepath.Join(image, wire.ImagePreloadFile)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := c.plant(p); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		done := make(chan error, 1)
		go func() {
			got, err := readPreloadList(image)
			if err == nil {
				err = fmt.Errorf("no error, list %q", got)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if want := "the preload list: image " + image + ": /usr/share/pybox/" + c.why; err.Error() != want {
				t.Errorf("%s: %v\nwant %s", c.name, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: readPreloadList still blocks after 5s", c.name)
		}
	}
}

// swapDir puts a symbolic link to target in place of p's directory.
func swapDir(p, target string) error {
	if err := os.Remove(filepath.Dir(p)); err != nil {
		return err
	}
	return os.Symlink(target, filepath.Dir(p))
}

func TestKeeps(t *testing.T) {
	preloaded := []string{"json", "re", "numpy", "pandas", "matplotlib", "matplotlib.pyplot"}
	for _, c := range []struct {
		imports []string
		keep    int
	}{
		{nil, 0},                        // print(1): nothing of the preload stays
		{[]string{"os", "sys"}, 0},      // imported at start anyway
		{[]string{"json"}, 1},           // json's own
		{[]string{"numpy.linalg"}, 3},   // numpy's, and what it needs before it
		{[]string{"pandas", "json"}, 4}, // the last one counts
		{[]string{"matplotlib.pyplot"}, 6},
		{[]string{"matplotlib"}, 5},
		{[]string{"numpyx"}, 0}, // not numpy
	} {
		if got := keeps(c.imports, preloaded); got != c.keep {
			t.Errorf("keeps(%q) = %d, want %d", c.imports, got, c.keep)
		}
	}
	// A box taken during its preload keeps only what it imported.
	if got := keeps([]string{"pandas"}, preloaded[:3]); got != 0 {
		t.Errorf("keeps(pandas) of a partial preload = %d, want 0", got)
	}
}
