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

// A folder holding links, a FIFO and a socket: they are counted with
// what the box gets instead, the files and directories are listed, and
// nothing blocks on the FIFO.
func TestListCountsWhatIsNotAFile(t *testing.T) {
	dir := openDir(t)
	write(t, filepath.Join(dir, "data.csv"), "a,b\n1,2\n")
	write(t, filepath.Join(dir, "sub", "deep", "x.txt"), "x")
	os.Symlink("/etc/passwd", filepath.Join(dir, "passwd-link"))
	os.Symlink("..", filepath.Join(dir, "up"))
	unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644)
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	var rep *Report
	go func() { rep, err = List(dir, DefaultLimits); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the walk blocked")
	}
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "private.txt"), "mine")
	os.Chmod(filepath.Join(dir, "private.txt"), 0o600)
	rep, err = List(dir, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 3 || rep.Dirs != 2 || rep.Bytes != 13 || len(rep.Digest) != 64 {
		t.Errorf("report %+v", rep)
	}
	got := strings.Join(rep.LeftOutLines(), "; ")
	for _, want := range []string{"2 symbolic links: shown to the box as links", "2 devices, FIFOs and sockets: none opens anything on the host",
		"1 files others may not read: the box cannot read them either"} {
		if !strings.Contains(got, want) {
			t.Errorf("left out %q lacks %q", got, want)
		}
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
