//go:build linux

package box

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
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
	p := filepath.Join(t.TempDir(), "preload")
	os.WriteFile(p, []byte("json\n# a comment\n\nnumpy\n  pandas  \n"), 0o644)
	if got := readPreloadList(p); !slices.Equal(got, []string{"json", "numpy", "pandas"}) {
		t.Errorf("readPreloadList = %q", got)
	}
	if got := readPreloadList(filepath.Join(t.TempDir(), "none")); got != nil {
		t.Errorf("no file: %q", got)
	}
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
