//go:build linux

package box

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// outputDir makes tmp/output and returns tmp and output. Like the box's
// /tmp it is on a tmpfs where there is one (/dev/shm): creating 10,000
// files on a disk takes long enough to slow the suite down.
func outputDir(t *testing.T) (string, string) {
	tmp := t.TempDir()
	if shm, err := os.MkdirTemp("/dev/shm", "pybox-box-test-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		tmp = shm
	}
	out := filepath.Join(tmp, "output")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return tmp, out
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func reasons(o wire.Output) map[string]wire.NotReturned {
	m := map[string]wire.NotReturned{}
	for _, n := range o.NotReturned {
		m[n.Name] = n
	}
	return m
}

func TestCollectHostileEntries(t *testing.T) {
	tmp, out := outputDir(t)
	write(t, filepath.Join(out, "a.txt"), []byte("hello"))
	os.Symlink("/etc/shadow", filepath.Join(out, "shadow"))
	os.Symlink("/proc/1/environ", filepath.Join(out, "environ"))
	os.Symlink("/nonexistent", filepath.Join(out, "dangling"))
	write(t, filepath.Join(tmp, "orig"), []byte("x"))
	os.Link(filepath.Join(tmp, "orig"), filepath.Join(out, "hardlink"))
	if err := unix.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(out, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Mkdir(filepath.Join(out, "subdir"), 0o755)
	write(t, filepath.Join(out, "line\nbreak"), []byte("n"))

	done := make(chan struct{})
	var files []wire.OutputFile
	var o wire.Output
	go func() { files, o = collectOutput(tmp, true); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("collecting output blocked (on the FIFO?)")
	}
	if len(files) != 1 || files[0].Name != "a.txt" || string(files[0].Content) != "hello" {
		t.Errorf("returned files %+v, want a.txt only", files)
	}
	if len(o.Returned) != 1 || o.Returned[0].SHA256 != sum([]byte("hello")) || o.Returned[0].Bytes != 5 {
		t.Errorf("returned %+v", o.Returned)
	}
	want := map[string]string{
		"shadow": wire.NotReturnedSymlink, "environ": wire.NotReturnedSymlink, "dangling": wire.NotReturnedSymlink,
		"hardlink": wire.NotReturnedHardLink, "fifo": wire.NotReturnedNotFile, "sock": wire.NotReturnedNotFile,
		"subdir": wire.NotReturnedNotFile, `line\u{a}break`: wire.NotReturnedName,
	}
	got := reasons(o)
	for name, reason := range want {
		if got[name].Reason != reason {
			t.Errorf("%s: reason %q, want %q", name, got[name].Reason, reason)
		}
	}
	if len(o.NotReturned) != len(want) || o.NotListed != 0 {
		t.Errorf("not returned %+v, not listed %d", o.NotReturned, o.NotListed)
	}
}

func TestCollectContentCap(t *testing.T) {
	tmp, out := outputDir(t)
	big := bytes.Repeat([]byte("b"), 100<<10)
	write(t, filepath.Join(out, "0big"), big)
	for i := 0; i < 10; i++ {
		write(t, filepath.Join(out, fmt.Sprintf("small%d", i)), bytes.Repeat([]byte("s"), 10<<10))
	}
	files, o := collectOutput(tmp, true)
	total := 0
	for _, f := range files {
		total += len(f.Content)
	}
	if total > wire.MaxReturnedFileBytes || len(files) != 4 {
		t.Errorf("%d files, %d bytes returned; want 4 files within %d", len(files), total, wire.MaxReturnedFileBytes)
	}
	r := reasons(o)
	if r["0big"].Reason != wire.NotReturnedOverCap || r["0big"].Bytes != 100<<10 || r["0big"].SHA256 != sum(big) {
		t.Errorf("the big file: %+v", r["0big"])
	}
	if r["small9"].Reason != wire.NotReturnedOverCap {
		t.Errorf("small9: %+v", r["small9"])
	}
}

func TestCollectNotAsked(t *testing.T) {
	tmp, out := outputDir(t)
	write(t, filepath.Join(out, "a"), []byte("abc"))
	files, o := collectOutput(tmp, false)
	if len(files) != 0 || len(o.NotReturned) != 1 || o.NotReturned[0].Reason != wire.NotReturnedNotAsked || o.NotReturned[0].SHA256 != sum([]byte("abc")) {
		t.Errorf("files %v, output %+v", files, o)
	}
}

func TestCollectTenThousandFiles(t *testing.T) {
	tmp, out := outputDir(t)
	for i := 0; i < 10000; i++ {
		write(t, filepath.Join(out, fmt.Sprintf("f%05d", i)), []byte("x"))
	}
	start := time.Now()
	files, o := collectOutput(tmp, true)
	took := time.Since(start)
	if len(files) != wire.MaxReturnedFiles || len(o.NotReturned) != wire.MaxListedNotReturned {
		t.Errorf("%d returned, %d listed; want %d and %d", len(files), len(o.NotReturned), wire.MaxReturnedFiles, wire.MaxListedNotReturned)
	}
	if n := len(files) + len(o.NotReturned) + o.NotListed; n != 10000 {
		t.Errorf("accounted for %d files, want 10000", n)
	}
	if o.NotReturned[0].Reason != wire.NotReturnedOverCount {
		t.Errorf("reason %q", o.NotReturned[0].Reason)
	}
	t.Logf("collected in %v", took)
	if took > 3*time.Second {
		t.Errorf("collecting 10,000 files took %v", took)
	}
}

func TestCollectOutputReplaced(t *testing.T) {
	for name, make := range map[string]func(out string) error{
		"symlink": func(out string) error { return os.Symlink("/etc", out) },
		"file":    func(out string) error { return os.WriteFile(out, nil, 0o644) },
		"missing": func(string) error { return nil },
	} {
		tmp := t.TempDir()
		if err := make(filepath.Join(tmp, "output")); err != nil {
			t.Fatal(err)
		}
		files, o := collectOutput(tmp, true)
		if len(files) != 0 || len(o.NotReturned) != 1 || !strings.HasPrefix(o.NotReturned[0].Reason, wire.NotReturnedUnreadble) {
			t.Errorf("%s: files %v, output %+v", name, files, o)
		}
	}
}

// Hashing the files left behind may run out of time (sha256 is slow
// under TCG); everything is still listed with its reason and size.
func TestCollectHashingOutOfTime(t *testing.T) {
	tmp, out := outputDir(t)
	write(t, filepath.Join(out, "a-big"), bytes.Repeat([]byte("b"), 100<<10))
	os.Symlink("/etc/shadow", filepath.Join(out, "b-link"))
	write(t, filepath.Join(out, "c-ok"), []byte("ok"))
	files, o := collectBy(tmp, true, time.Now().Add(time.Minute), time.Now())
	if len(files) != 1 || files[0].Name != "c-ok" {
		t.Errorf("returned %+v", files)
	}
	r := reasons(o)
	if r["a-big"].Reason != wire.NotReturnedOverCap || r["a-big"].Bytes != 100<<10 || r["a-big"].SHA256 != "" {
		t.Errorf("a-big: %+v", r["a-big"])
	}
	if r["b-link"].Reason != wire.NotReturnedSymlink {
		t.Errorf("b-link: %+v", r["b-link"])
	}
}
