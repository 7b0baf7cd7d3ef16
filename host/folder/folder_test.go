package folder

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openDir is a temporary folder others may enter, as a data folder must be.
func openDir(t *testing.T) string {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	return dir
}

func write(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A folder holding symbolic links: they are counted with what the box
// gets instead, and the files and directories are listed.
func TestListCountsWhatIsNotAFile(t *testing.T) {
	dir := openDir(t)
	write(t, filepath.Join(dir, "data.csv"), "a,b\n1,2\n")
	write(t, filepath.Join(dir, "sub", "deep", "x.txt"), "x")
	os.Symlink("/etc/passwd", filepath.Join(dir, "passwd-link"))
	os.Symlink("..", filepath.Join(dir, "up"))
	write(t, filepath.Join(dir, "private.txt"), "mine")
	os.Chmod(filepath.Join(dir, "private.txt"), 0o600)
	rep, err := List(dir, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 3 || rep.Dirs != 2 || rep.Bytes != 13 || len(rep.Digest) != 64 {
		t.Errorf("report %+v", rep)
	}
	got := strings.Join(rep.LeftOutLines(), "; ")
	for _, want := range []string{"2 symbolic links: shown to the box as links", "1 files others may not read: the box cannot read them either"} {
		if !strings.Contains(got, want) {
			t.Errorf("left out %q lacks %q", got, want)
		}
	}
}

// A FIFO or a socket in the folder is something a guest that speaks 9p
// itself could ask QEMU to open on the host: the folder is refused,
// naming one, and nothing blocks on the FIFO.
func TestListRefusesSpecialFiles(t *testing.T) {
	for _, kind := range []string{"fifo", "sock"} {
		t.Run(kind, func(t *testing.T) {
			dir := openDir(t)
			write(t, filepath.Join(dir, "data.csv"), "a,b\n")
			if kind == "fifo" {
				unix.Mkfifo(filepath.Join(dir, "sub-fifo"), 0o644)
			} else {
				l, err := net.Listen("unix", filepath.Join(dir, "sub-sock"))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
			}
			done := make(chan error, 1)
			go func() { _, err := List(dir, DefaultLimits); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrSpecial) || !strings.Contains(err.Error(), `such as "sub-`+kind+`"`) || !strings.Contains(err.Error(), "take them out") {
					t.Errorf("err %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the walk blocked")
			}
		})
	}
}

// The walk starts from the directory the VM was given, open: a path
// swapped for another folder changes neither what is listed nor the
// digest, and Same says the path leads elsewhere now.
func TestListDirKeepsTheFolderItWasGiven(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "folder")
	os.Mkdir(dir, 0o755)
	write(t, filepath.Join(dir, "a.txt"), "a")
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	before, err := ListDir(d, DefaultLimits)
	if err != nil || Same(d, dir) != nil {
		t.Fatalf("%v %v", err, Same(d, dir))
	}
	other := filepath.Join(base, "other")
	os.Mkdir(other, 0o755)
	write(t, filepath.Join(other, "b.txt"), "b")
	write(t, filepath.Join(other, "c.txt"), "c")
	os.Rename(dir, dir+".orig")
	os.Symlink(other, dir)
	after, err := ListDir(d, DefaultLimits)
	if err != nil || after.Files != 1 || after.Digest != before.Digest {
		t.Errorf("the walk after the swap: %+v %v (want the folder given, 1 file)", after, err)
	}
	if err := Same(d, dir); !errors.Is(err, ErrMoved) || !strings.Contains(err.Error(), "restart the VM") {
		t.Errorf("Same after the swap: %v", err)
	}
}

// A file with a second name, in the folder or outside it, would give the
// box a file its folder does not hold by path: the folder is refused,
// saying why and what to do.
func TestListRefusesHardLinks(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "folder")
	os.Mkdir(dir, 0o755)
	outside := filepath.Join(base, "outside.txt")
	write(t, outside, "secret outside the folder")
	write(t, filepath.Join(dir, "fine.txt"), "fine")
	if err := os.Link(outside, filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}
	_, err := List(dir, DefaultLimits)
	if !errors.Is(err, ErrHardLinks) || !strings.Contains(err.Error(), `such as "hard"`) || !strings.Contains(err.Error(), "its own copy") {
		t.Fatalf("err %v", err)
	}
}

// The digest changes when a file is added, removed or rewritten, and not
// otherwise.
func TestListDigest(t *testing.T) {
	dir := openDir(t)
	write(t, filepath.Join(dir, "a"), "1")
	first, _ := List(dir, DefaultLimits)
	again, _ := List(dir, DefaultLimits)
	write(t, filepath.Join(dir, "b"), "2")
	added, _ := List(dir, DefaultLimits)
	os.Chtimes(filepath.Join(dir, "a"), time.Now(), time.Now().Add(time.Hour))
	touched, _ := List(dir, DefaultLimits)
	if first.Digest != again.Digest || added.Digest == first.Digest || touched.Digest == added.Digest {
		t.Errorf("digests %s %s %s %s", first.Digest, again.Digest, added.Digest, touched.Digest)
	}
}

// A folder others may not enter is of no use to the box: it is refused,
// saying what to do.
func TestListRefusesAClosedFolder(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	if _, err := List(dir, DefaultLimits); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "chmod o+rx") {
		t.Errorf("err %v", err)
	}
}

func TestListLimits(t *testing.T) {
	dir := openDir(t)
	write(t, filepath.Join(dir, "a"), strings.Repeat("x", 100))
	write(t, filepath.Join(dir, "b"), strings.Repeat("x", 100))
	if _, err := List(dir, Limits{MaxFiles: 10, MaxBytes: 150, MaxDepth: 4}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("bytes: %v", err)
	}
	if _, err := List(dir, Limits{MaxFiles: 1, MaxDepth: 4}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("files: %v", err)
	}
	deep := dir
	for range 6 {
		deep = filepath.Join(deep, "d")
	}
	os.MkdirAll(deep, 0o755)
	if _, err := List(dir, Limits{MaxFiles: 100, MaxDepth: 3}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("depth: %v", err)
	}
}

// A 5 GB folder of sparse files: the walk counts their sizes from a stat
// each, never their bytes (this test would take minutes otherwise).
func TestListDoesNotReadTheFiles(t *testing.T) {
	dir := openDir(t)
	for i := range 5 {
		f, err := os.Create(filepath.Join(dir, "part"+string(rune('0'+i))))
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(1 << 30)
		f.Close()
	}
	rep, err := List(dir, DefaultLimits)
	if err != nil || rep.Bytes != 5<<30 || rep.Files != 5 {
		t.Fatalf("%+v %v", rep, err)
	}
}
