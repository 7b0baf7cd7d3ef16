package boot

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	// A file larger than what is left of the budget is not read at all.
	if r := Warm(root, int64(len("interp"))+1, time.Now().Add(time.Minute)); r.Complete || r.Files != 1 || r.Bytes != int64(len("interp")) {
		t.Errorf("Warm with room for the first file only = %+v, want it read and the second not", r)
	}
	if r := Warm(root, 1<<20, time.Now().Add(-time.Second)); r.Complete || r.Files != 0 {
		t.Errorf("Warm past its deadline = %+v, want nothing read", r)
	}
}

// What a warm list names that is not a plain file of the image (a link
// out of it, a link to /dev/zero, a FIFO, a directory, a file larger than
// the budget) is skipped at once; the good files are still read.
func TestWarmSkipsWhatIsNotAPlainFile(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	writeTree(t, root, map[string]string{
		"usr/lib/good.so": "0123456789",
		"usr/lib/huge.so": string(make([]byte, 1<<10)),
		WarmList:          "/usr/lib/good.so\n/usr/lib/abs\n/usr/lib/rel\n/usr/lib/zero\n/usr/lib/fifo\n/usr/lib\n/usr/lib/huge.so\n/linked/secret\n",
	})
	writeTree(t, outside, map[string]string{"secret": "a data folder's file"})
	for name, target := range map[string]string{
		"usr/lib/abs":  filepath.Join(outside, "secret"),
		"usr/lib/rel":  "../../../" + filepath.Base(outside) + "/secret",
		"usr/lib/zero": "/dev/zero",
		"linked":       outside,
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(root, "usr/lib/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := warmWithin(t, root, 100)
	if !r.Listed || r.ListErr != nil || r.Complete || r.Files != 1 || r.Bytes != 10 {
		t.Errorf("Warm = %+v, want the good file (10 bytes) read, the rest skipped, and the huge file over the budget", r)
	}
}

// A warm list that is itself a FIFO, a link or too large is not used,
// and the result says why; the interpreter is still warmed.
func TestWarmRefusesABadList(t *testing.T) {
	for _, c := range []struct {
		name  string
		plant func(p string) error
		why   string
	}{
		{"a FIFO", func(p string) error { return unix.Mkfifo(p, 0o644) }, "warm.list is not a regular file (a FIFO)"},
		{"a link to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "warm.list is a symbolic link"},
		{"a relative link", func(p string) error { return os.Symlink("../../../../etc/passwd", p) }, "warm.list is a symbolic link"},
		{"too large", func(p string) error { return os.WriteFile(p, make([]byte, warmListBytes+1), 0o644) }, "warm.list is larger than 4194304 bytes"},
	} {
		root := t.TempDir()
		writeTree(t, root, map[string]string{"usr/bin/python3.11": "interp"})
		p := filepath.Join(root, WarmList)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := c.plant(p); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := warmWithin(t, root, 1<<20)
		want := "image " + root + ": /usr/share/pybox/" + c.why
		if r.Listed || r.ListErr == nil || r.ListErr.Error() != want || r.Files != 1 {
			t.Errorf("%s: Warm = %+v, want the interpreter warmed and the list refused: %s", c.name, r, want)
		}
	}
}

// warmWithin runs Warm, failing the test if it still reads after a few
// seconds.
func warmWithin(t *testing.T, root string, maxBytes int64) WarmResult {
	t.Helper()
	done := make(chan WarmResult, 1)
	go func() { done <- Warm(root, maxBytes, time.Now().Add(time.Minute)) }()
	select {
	case r := <-done:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Warm still reads after 5s")
		return WarmResult{}
	}
}
