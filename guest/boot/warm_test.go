package boot

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWarmUsesTheImagesList(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"usr/bin/python3.11":   "interp",
		"usr/lib/big/numpy.so": "0123456789",
		WarmList:               "/usr/lib/big/numpy.so\n../../../etc/passwd\n\n/missing\n",
	})
	r := Warm(root, 1<<20, time.Now().Add(time.Minute))
	if !r.Listed || !r.Complete || r.Files != 1 || r.Bytes != 10 {
		t.Errorf("Warm = %+v, want the one listed file (10 bytes) read, the escape and the missing file not", r)
	}
}

func TestWarmFallbackAndBudgets(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"usr/bin/python3.11":                            "interp",
		"usr/lib/python3.11/__pycache__/os.cpython.pyc": "pyc",
		"usr/lib/python3.11/json/__init__.py":           "not warmed by the fallback",
	})
	r := Warm(root, 1<<20, time.Now().Add(time.Minute))
	if r.Listed || !r.Complete || r.Files != 2 || r.Bytes != int64(len("interp")+len("pyc")) {
		t.Errorf("fallback Warm = %+v, want the interpreter and the start-up modules", r)
	}
	if r := Warm(root, 1, time.Now().Add(time.Minute)); r.Complete || r.Files != 1 {
		t.Errorf("Warm with a 1-byte budget = %+v, want it to stop after the first file", r)
	}
	if r := Warm(root, 1<<20, time.Now().Add(-time.Second)); r.Complete || r.Files != 0 {
		t.Errorf("Warm past its deadline = %+v, want nothing read", r)
	}
}
