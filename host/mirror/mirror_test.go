package mirror

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listing is what dst holds: every path, with "/" after directories.
func listing(t *testing.T, dst string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dst {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		if d.IsDir() {
			rel += "/"
		} else if !d.Type().IsRegular() {
			rel += " (not regular!)"
		}
		out = append(out, rel)
		return nil
	})
	return out
}

func write(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A folder holding every kind of entry that could lead out of it: the
// copy holds its directories and its files with one name, and nothing
// else; nothing blocks on the FIFO.
func TestSyncLeavesOutWhatLeadsOutside(t *testing.T) {
	base := t.TempDir()
	src, dst := filepath.Join(base, "folder"), filepath.Join(base, "copy")
	outside := filepath.Join(base, "outside.txt")
	write(t, outside, "secret outside the folder")
	write(t, filepath.Join(src, "data.csv"), "a,b\n1,2\n")
	write(t, filepath.Join(src, "sub", "deep", "x.txt"), "x")
	os.Symlink("/etc/passwd", filepath.Join(src, "passwd-link"))
	os.Symlink("..", filepath.Join(src, "up"))
	os.Symlink(outside, filepath.Join(src, "outside-link"))
	if err := os.Link(outside, filepath.Join(src, "hard")); err != nil {
		t.Fatal(err)
	}
	unix.Mkfifo(filepath.Join(src, "fifo"), 0o644)
	l, err := net.Listen("unix", filepath.Join(src, "sock"))
	if err == nil {
		defer l.Close()
	}
	if os.Geteuid() == 0 {
		if err := unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	var rep *Report
	go func() { rep, err = Sync(src, dst, DefaultLimits); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the sync blocked")
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"data.csv", "sub/", "sub/deep/", "sub/deep/x.txt"}
	if got := listing(t, dst); !slices.Equal(got, want) {
		t.Errorf("the copy holds %q, want %q", got, want)
	}
	if rep.Files != 2 || rep.Dirs != 2 || rep.Bytes != int64(len("a,b\n1,2\n")+1) {
		t.Errorf("report %+v", rep)
	}
	left := strings.Join(rep.LeftOutLines(), "; ")
	for _, w := range []string{"3 symbolic links", "1 files with more than one name", "devices, FIFOs and sockets"} {
		if !strings.Contains(left, w) {
			t.Errorf("left out %q: no %q", left, w)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "data.csv")); string(b) != "a,b\n1,2\n" {
		t.Errorf("data.csv copied as %q", b)
	}
}

// A second sync copies only what changed, removes what went, and its
// digest tells a changed folder from an unchanged one.
func TestSyncFollowsChanges(t *testing.T) {
	base := t.TempDir()
	src, dst := filepath.Join(base, "folder"), filepath.Join(base, "copy")
	write(t, filepath.Join(src, "a.txt"), "one")
	write(t, filepath.Join(src, "b.txt"), "two")
	first, err := Sync(src, dst, DefaultLimits)
	if err != nil || first.Copied != 2 {
		t.Fatalf("first sync: %+v, %v", first, err)
	}
	same, err := Sync(src, dst, DefaultLimits)
	if err != nil || same.Copied != 0 || same.Removed != 0 || same.Digest != first.Digest {
		t.Fatalf("an unchanged folder: %+v (first %+v), %v", same, first, err)
	}
	write(t, filepath.Join(src, "a.txt"), "ONE, longer")
	os.Remove(filepath.Join(src, "b.txt"))
	write(t, filepath.Join(src, "c", "new.txt"), "new")
	next, err := Sync(src, dst, DefaultLimits)
	if err != nil || next.Copied != 2 || next.Removed != 1 || next.Digest == first.Digest {
		t.Fatalf("after changes: %+v, %v", next, err)
	}
	if got := listing(t, dst); !slices.Equal(got, []string{"a.txt", "c/", "c/new.txt"}) {
		t.Errorf("the copy holds %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(b) != "ONE, longer" {
		t.Errorf("a.txt is %q", b)
	}
	// A file that became a directory, and a directory that became a file.
	os.Remove(filepath.Join(src, "a.txt"))
	write(t, filepath.Join(src, "a.txt", "inner"), "i")
	os.RemoveAll(filepath.Join(src, "c"))
	write(t, filepath.Join(src, "c"), "now a file")
	if _, err := Sync(src, dst, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	if got := listing(t, dst); !slices.Equal(got, []string{"a.txt/", "a.txt/inner", "c"}) {
		t.Errorf("the copy holds %q", got)
	}
}

func TestSyncLimits(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "folder")
	write(t, filepath.Join(src, "big"), strings.Repeat("x", 1000))
	if _, err := Sync(src, filepath.Join(base, "c1"), Limits{MaxFiles: 10, MaxBytes: 999, MaxDepth: 4}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over MaxBytes: %v", err)
	}
	for i := range 5 {
		write(t, filepath.Join(src, "many", strings.Repeat("f", i+1)), "")
	}
	if _, err := Sync(src, filepath.Join(base, "c2"), Limits{MaxFiles: 4, MaxDepth: 4}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over MaxFiles: %v", err)
	}
	deep := src
	for range 6 {
		deep = filepath.Join(deep, "d")
	}
	write(t, filepath.Join(deep, "f"), "")
	if _, err := Sync(src, filepath.Join(base, "c3"), Limits{MaxFiles: 100, MaxDepth: 4}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over MaxDepth: %v", err)
	}
}

// The copy is readable by others whatever the umask: the box reads it as
// another user than the supervisor that made it.
func TestSyncReadableByOthers(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	base := t.TempDir()
	src, dst := filepath.Join(base, "folder"), filepath.Join(base, "copy")
	write(t, filepath.Join(src, "sub", "f.txt"), "x")
	if _, err := Sync(src, dst, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dst: 0o755, filepath.Join(dst, "sub"): 0o755, filepath.Join(dst, "sub", "f.txt"): 0o644} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", p, fi.Mode().Perm(), err, want)
		}
	}
}
