package imagefs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/needs"
)

// limit is the bound the tests read with.
const limit = 64

// within fails the test if f has not returned after a few seconds: a
// hostile file that blocks the read must fail, not hang the suite.
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the read still blocks after 5s")
	}
}

// hostileImage makes an image directory beside a directory outside it
// (standing for a data folder) and fills it with a good file and one of
// each thing an image's maker could put in its place.
func hostileImage(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "image"), filepath.Join(base, "outside")
	mkdir(t, filepath.Join(root, "usr/share/pybox/dir"))
	mkdir(t, outside)
	write(t, filepath.Join(outside, "secret"), "a data folder's file")
	write(t, filepath.Join(root, "usr/share/pybox/good"), "good")
	write(t, filepath.Join(root, "usr/share/pybox/big"), strings.Repeat("x", limit+1))
	links := map[string]string{
		"usr/share/pybox/abs-link": filepath.Join(outside, "secret"),
		"usr/share/pybox/rel-link": "../../../../outside/secret",
		"usr/share/pybox/in-link":  "good", // stays inside, and is still a link
		"usr/share/pybox/zero":     "/dev/zero",
		"abs-dir":                  outside,
		"rel-dir":                  "../outside",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(root, "usr/share/pybox/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p, content string) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, root string) *Root {
	t.Helper()
	r, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// Every hostile file is refused at once, with an error that names the
// image, the path and what was wrong; the good file still reads.
func TestReadFileRefusesWhatIsNotAPlainFile(t *testing.T) {
	root, _ := hostileImage(t)
	r := open(t, root)
	for _, c := range []struct {
		name string
		want error
		why  string
	}{
		{"usr/share/pybox/abs-link", ErrSymlink, "is a symbolic link"},
		{"/usr/share/pybox/rel-link", ErrSymlink, "is a symbolic link"},
		{"usr/share/pybox/in-link", ErrSymlink, "is a symbolic link"},
		{"usr/share/pybox/zero", ErrSymlink, "is a symbolic link"},
		{"abs-dir/secret", ErrSymlink, "is under a symbolic link, /abs-dir"},
		{"rel-dir/secret", ErrSymlink, "is under a symbolic link, /rel-dir"},
		{"usr/share/pybox/fifo", ErrNotRegular, "is not a regular file (a FIFO)"},
		{"usr/share/pybox/dir", ErrNotRegular, "is not a regular file (a directory)"},
		{"usr/share/pybox/big", ErrTooLarge, "is larger than 64 bytes"},
		{"../outside/secret", ErrName, "is not a path inside the image"},
		{"usr/share/../../../outside/secret", ErrName, "is not a path inside the image"},
		{"usr/share/pybox/missing", fs.ErrNotExist, "cannot be opened"},
	} {
		within(t, func() {
			b, err := r.ReadFile(c.name, limit)
			if !errors.Is(err, c.want) {
				t.Errorf("%s: got %q, %v; want %v", c.name, b, err, c.want)
				return
			}
			wantMsg := "image " + root + ": /" + strings.TrimPrefix(c.name, "/") + " " + c.why
			if !strings.HasPrefix(err.Error(), wantMsg) {
				t.Errorf("%s: error %q, want it to start %q", c.name, err, wantMsg)
			}
		})
	}
	within(t, func() {
		if b, err := r.ReadFile("/usr/share/pybox/good", limit); err != nil || string(b) != "good" {
			t.Errorf("the good file: %q, %v", b, err)
		}
	})
}

// A file of exactly the limit reads; Copy goes through the caller's
// buffer and counts what it wrote.
func TestCopyBounds(t *testing.T) {
	root, _ := hostileImage(t)
	r := open(t, root)
	if b, err := r.ReadFile("usr/share/pybox/big", limit+1); err != nil || len(b) != limit+1 {
		t.Errorf("a file of exactly the limit: %d bytes, %v", len(b), err)
	}
	if n, err := r.Copy(io.Discard, "usr/share/pybox/good", limit, make([]byte, 1)); err != nil || n != 4 {
		t.Errorf("Copy = %d, %v; want 4 bytes", n, err)
	}
	if n, err := r.Copy(io.Discard, "usr/share/pybox/good", 3, nil); !errors.Is(err, ErrTooLarge) || n != 0 {
		t.Errorf("Copy over the limit = %d, %v; want nothing read, ErrTooLarge", n, err)
	}
}

// Nothing mounted inside the image's directory is reached through it.
func TestReadFileStaysOnTheImage(t *testing.T) {
	needs.Root(t, "mounting a tmpfs")
	root, _ := hostileImage(t)
	mnt := filepath.Join(root, "mnt")
	mkdir(t, mnt)
	if err := unix.Mount("imagefs-test", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatalf("mount a tmpfs in the image: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	write(t, filepath.Join(mnt, "secret"), "mounted")
	r := open(t, root)
	within(t, func() {
		if b, err := r.ReadFile("mnt/secret", limit); !errors.Is(err, ErrMount) {
			t.Errorf("read across a mount: %q, %v", b, err)
		}
	})
}

// A directory's regular files read in order; links, FIFOs and
// directories in it are left out.
func TestReadDirKeepsRegularFiles(t *testing.T) {
	root, _ := hostileImage(t)
	r := open(t, root)
	within(t, func() {
		files, err := r.ReadDir("usr/share/pybox", 20, 1<<10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range files {
			got = append(got, f.Name+"="+string(f.Data))
		}
		want := "big=" + strings.Repeat("x", limit+1) + " good=good"
		if strings.Join(got, " ") != want {
			t.Errorf("ReadDir = %q, want %q", got, want)
		}
	})
}

// A directory that is a link, a FIFO or too full is refused at once, as
// is one whose files hold more than the bound; a missing one is missing.
func TestReadDirRefuses(t *testing.T) {
	root, _ := hostileImage(t)
	if err := os.Rename(filepath.Join(root, "usr/share/pybox/fifo"), filepath.Join(root, "fifo")); err != nil {
		t.Fatal(err)
	}
	r := open(t, root)
	for _, c := range []struct {
		name    string
		entries int
		bytes   int64
		want    error
		why     string
	}{
		{"rel-dir", 20, 1 << 10, ErrSymlink, "is a symbolic link"},
		{"abs-dir", 20, 1 << 10, ErrSymlink, "is a symbolic link"},
		{"fifo", 20, 1 << 10, unix.ENOTDIR, "cannot be opened: not a directory"},
		{"usr/share/pybox", 3, 1 << 10, ErrTooLarge, "holds more than 3 entries"},
		{"usr/share/pybox", 20, limit, ErrTooLarge, "/usr/share/pybox/big is larger than 64 bytes"},
		{"missing", 20, 1 << 10, fs.ErrNotExist, "cannot be opened"},
	} {
		within(t, func() {
			files, err := r.ReadDir(c.name, c.entries, c.bytes)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.why) {
				t.Errorf("ReadDir(%s, %d, %d) = %d files, %v; want %v, %q", c.name, c.entries, c.bytes, len(files), err, c.want, c.why)
			}
		})
	}
}
