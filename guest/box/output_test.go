//go:build linux

package box

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	go func() { files, o = collect(tmp, true); close(done) }()
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
	files, o := collect(tmp, true)
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
	files, o := collect(tmp, false)
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
	files, o := collect(tmp, true)
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
		files, o := collect(tmp, true)
		if len(files) != 0 || len(o.NotReturned) != 1 || !strings.HasPrefix(o.NotReturned[0].Reason, wire.NotReturnedUnreadable) {
			t.Errorf("%s: files %v, output %+v", name, files, o)
		}
	}
}

// collect collects with time to spare and no cancel.
func collect(tmp string, returnFiles bool) ([]wire.OutputFile, wire.Output) {
	files, o, overrun := collectOutput(context.Background(), tmp, returnFiles, time.Now().Add(time.Minute))
	if overrun != "" {
		panic("collecting with a minute to spare overran: " + overrun)
	}
	return files, o
}

// sparse makes a file whose apparent size is far beyond what it stores:
// reading it to the end would take minutes.
func sparse(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// A deadline that passes in the middle of one file stops the hashing
// there: the file is listed with its size, no sha256, and the reason
// "time limit"; what was never reached is listed too.
func TestCollectDeadlineMidFile(t *testing.T) {
	tmp, out := outputDir(t)
	write(t, filepath.Join(out, "a-small"), []byte("small"))
	sparse(t, filepath.Join(out, "b-huge"), 1<<40)
	sparse(t, filepath.Join(out, "c-huge"), 1<<40)
	start := time.Now()
	files, o, overrun := collectOutput(context.Background(), tmp, false, start.Add(300*time.Millisecond))
	took := time.Since(start)
	if took > 5*time.Second {
		t.Errorf("collection with a 300 ms deadline took %v", took)
	}
	if len(files) != 0 {
		t.Errorf("files came back with return_files false: %+v", files)
	}
	r := reasons(o)
	if r["a-small"].SHA256 != sum([]byte("small")) || r["a-small"].Reason != wire.NotReturnedNotAsked {
		t.Errorf("a-small (hashed first, being smallest): %+v", r["a-small"])
	}
	for _, name := range []string{"b-huge", "c-huge"} {
		nr := r[name]
		if nr.SHA256 != "" || nr.Bytes != 1<<40 || !strings.HasPrefix(nr.Reason, wire.NotReturnedTimeLimit) ||
			!strings.Contains(nr.Reason, wire.NotReturnedNotAsked) {
			t.Errorf("%s: %+v; want its size, no sha256, and a time-limit reason keeping the first one", name, nr)
		}
	}
	if !strings.Contains(overrun, "allowance ran out") || !strings.Contains(overrun, "2 files not read or hashed") {
		t.Errorf("overrun %q", overrun)
	}
	t.Logf("stopped after %v: %s", took, overrun)
}

// A cancel stops the collection as the deadline does.
func TestCollectCancelled(t *testing.T) {
	tmp, out := outputDir(t)
	sparse(t, filepath.Join(out, "huge"), 1<<40)
	write(t, filepath.Join(out, "z-small"), []byte("z"))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	files, o, overrun := collectOutput(ctx, tmp, true, start.Add(time.Hour))
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a cancelled collection took %v", took)
	}
	if len(files) != 1 || files[0].Name != "z-small" {
		t.Errorf("returned %+v, want z-small (read in the first pass)", files)
	}
	if nr := reasons(o)["huge"]; nr.SHA256 != "" || !strings.HasPrefix(nr.Reason, wire.NotReturnedTimeLimit) {
		t.Errorf("huge: %+v", nr)
	}
	if !strings.Contains(overrun, "cancelled") {
		t.Errorf("overrun %q", overrun)
	}
}

// Past the deadline, names are not even looked at; each is still listed
// (up to the cap) with the reason.
func TestCollectOutOfTimeBeforeStart(t *testing.T) {
	tmp, out := outputDir(t)
	write(t, filepath.Join(out, "a"), []byte("a"))
	os.Symlink("/etc/shadow", filepath.Join(out, "b-link"))
	files, o, overrun := collectOutput(context.Background(), tmp, true, time.Now())
	if len(files) != 0 || len(o.NotReturned) != 2 {
		t.Errorf("files %+v, output %+v", files, o)
	}
	for _, nr := range o.NotReturned {
		if !strings.HasPrefix(nr.Reason, wire.NotReturnedTimeLimit) {
			t.Errorf("%s: reason %q", nr.Name, nr.Reason)
		}
	}
	if !strings.Contains(overrun, "2 names not looked at") {
		t.Errorf("overrun %q", overrun)
	}
}

// chunks collects what deliverOutput emits, as the host would.
type chunks struct {
	files map[string][]byte
	fail  string // emitting a chunk of this file fails (the host went away)
}

func (c *chunks) emit(name string, off int64, data []byte) error {
	if name == c.fail {
		return fmt.Errorf("gone")
	}
	if c.files == nil {
		c.files = map[string][]byte{}
	}
	if int64(len(c.files[name])) != off {
		panic(fmt.Sprintf("%s: chunk at %d after %d bytes", name, off, len(c.files[name])))
	}
	c.files[name] = append(c.files[name], data...)
	return nil
}

func TestDeliverOutput(t *testing.T) {
	tmp, out := outputDir(t)
	big := bytes.Repeat([]byte("0123456789"), 120000) // 1.2 MB: three chunks
	write(t, filepath.Join(out, "a.txt"), []byte("abc"))
	write(t, filepath.Join(out, "b-big"), big)
	write(t, filepath.Join(out, "c-too-big"), make([]byte, 3<<20))
	write(t, filepath.Join(out, "d-empty"), nil)
	os.Symlink("/etc/shadow", filepath.Join(out, "e-link"))
	var got chunks
	d := deliverOutput(context.Background(), tmp, &wire.Deliver{MaxBytes: 2 << 20}, got.emit, time.Now().Add(time.Minute))
	want := map[string][]byte{"a.txt": []byte("abc"), "b-big": big, "d-empty": nil}
	if len(d.delivered) != len(want) {
		t.Fatalf("delivered %+v", d.delivered)
	}
	for _, f := range d.delivered {
		if !bytes.Equal(got.files[f.Name], want[f.Name]) || f.SHA256 != sum(want[f.Name]) || f.Bytes != int64(len(want[f.Name])) {
			t.Errorf("%s: %d bytes emitted, receipt %+v", f.Name, len(got.files[f.Name]), f)
		}
	}
	if _, ok := got.files["d-empty"]; !ok {
		t.Error("the empty file was never emitted: the host could not make it")
	}
	reasons := map[string]string{}
	for _, n := range d.notDelivered {
		reasons[n.Name] = n.Reason
	}
	if reasons["c-too-big"] != wire.NotDeliveredOverCap || reasons["e-link"] != wire.NotReturnedSymlink || len(reasons) != 2 {
		t.Errorf("not delivered %+v", d.notDelivered)
	}
	if d.overrun != "" {
		t.Errorf("overrun %q", d.overrun)
	}

	// The host going away stops delivery at that file.
	stop := chunks{fail: "b-big"}
	d = deliverOutput(context.Background(), tmp, &wire.Deliver{MaxBytes: 2 << 20}, stop.emit, time.Now().Add(time.Minute))
	if len(d.delivered) != 1 || d.delivered[0].Name != "a.txt" {
		t.Errorf("after the host went: delivered %+v", d.delivered)
	}

	// Past the deadline nothing more is sent, and the receipt says so.
	d = deliverOutput(context.Background(), tmp, &wire.Deliver{MaxBytes: 2 << 20}, (&chunks{}).emit, time.Now())
	if len(d.delivered) != 0 || !strings.Contains(d.overrun, "allowance ran out") {
		t.Errorf("past the deadline: %+v", d)
	}
}

// A run delivers at most wire.MaxDeliveredFiles files, so that their
// digests fit in the receipt; the rest are counted.
func TestDeliverOutputFileCap(t *testing.T) {
	if !strings.Contains(wire.NotDeliveredOverCount, strconv.Itoa(wire.MaxDeliveredFiles)) {
		t.Fatalf("the reason %q does not name the cap %d", wire.NotDeliveredOverCount, wire.MaxDeliveredFiles)
	}
	tmp, out := outputDir(t)
	extra := 10
	for i := range wire.MaxDeliveredFiles + extra {
		write(t, filepath.Join(out, fmt.Sprintf("f%05d", i)), []byte("x"))
	}
	var got chunks
	d := deliverOutput(context.Background(), tmp, &wire.Deliver{MaxBytes: 2 << 20}, got.emit, time.Now().Add(time.Minute))
	if len(d.delivered) != wire.MaxDeliveredFiles || len(got.files) != wire.MaxDeliveredFiles {
		t.Errorf("delivered %d, emitted %d; want %d", len(d.delivered), len(got.files), wire.MaxDeliveredFiles)
	}
	if len(d.notDelivered) != extra || d.notDelivered[0].Reason != wire.NotDeliveredOverCount || d.notDelivered[0].Name != fmt.Sprintf("f%05d", wire.MaxDeliveredFiles) {
		t.Errorf("not delivered %+v", d.notDelivered)
	}
}
