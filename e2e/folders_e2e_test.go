package e2e

// End-to-end tests of data folders (host folders the user named, read
// only in the box at /data/NAME) and the output folder (everything a
// program writes to /tmp/output, saved whole on the host), through the
// real pybox mcp and a real VM started with --data.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/needs"
	"pybox/shared/wire"
)

// salesCSV writes a CSV of about size bytes: region,units,price rows,
// and returns the sum of units per region, as pandas would print it.
func salesCSV(t *testing.T, path string, size int) map[string]int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("region,units,price\n")
	regions := []string{"north", "south", "east", "west"}
	sums := map[string]int64{}
	n := 19
	for i := 0; n < size; i++ {
		r := regions[i%4]
		units := int64(i % 97)
		sums[r] += units
		line := fmt.Sprintf("%s,%d,%d.%02d\n", r, units, i%1000, i%100)
		w.WriteString(line)
		n += len(line)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return sums
}

// countLines counts a file's lines.
func countLines(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return int64(bytes.Count(b, []byte("\n")))
}

// openTempDir is a temporary folder others may enter: the box reads a
// data folder as a user of the host other than its owner would.
func openTempDir(t testing.TB) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// folders are the data folders of foldersVM, by name.
type folders struct {
	sales, hostile, linked, big, year string
	outside                           string           // a file outside every data folder
	sums                              map[string]int64 // sales/big.csv's units by region
	yearSums                          map[string]int64 // year/sales.csv's
	yearRows                          int64
}

// foldersVM starts a VM with the stdlib and data images and data folders
// "sales" (a 100 MB CSV and a small one), "hostile" (symbolic links that
// try to lead out of it), "linked" (a plain file, into which a test puts
// a hard link to a file outside it once the VM runs: vm start would
// refuse it), "big" (5 GB of sparse files and a real CSV) and "year" (a
// 1 GB CSV).
func foldersVM(t *testing.T) (*vmEnv, *folders) {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib", "data")
	f := &folders{sales: openTempDir(t), hostile: openTempDir(t), linked: openTempDir(t), big: openTempDir(t), year: openTempDir(t)}
	f.sums = salesCSV(t, filepath.Join(f.sales, "big.csv"), 100<<20)
	os.WriteFile(filepath.Join(f.sales, "small.csv"), []byte("region,units\nnorth,3\nsouth,4\n"), 0o644)
	f.outside = filepath.Join(t.TempDir(), "outside-secret.txt")
	os.WriteFile(f.outside, []byte("a secret outside every data folder\n"), 0o644)
	os.WriteFile(filepath.Join(f.hostile, "fine.txt"), []byte("fine\n"), 0o644)
	for name, target := range map[string]string{"passwd": "/etc/passwd", "up": "..", "outside": f.outside} {
		os.Symlink(target, filepath.Join(f.hostile, name))
	}
	os.WriteFile(filepath.Join(f.linked, "fine.txt"), []byte("fine\n"), 0o644)
	for i := range 5 {
		part, err := os.Create(filepath.Join(f.big, fmt.Sprintf("part-%d.bin", i)))
		if err != nil {
			t.Fatal(err)
		}
		part.Truncate(1 << 30) // sparse: the content does not matter here
		part.Close()
	}
	os.WriteFile(filepath.Join(f.big, "index.csv"), []byte("part,rows\npart-0.bin,10\npart-1.bin,20\n"), 0o644)
	f.yearSums = salesCSV(t, filepath.Join(f.year, "sales.csv"), 1<<30)
	f.yearRows = countLines(t, filepath.Join(f.year, "sales.csv")) - 1
	e.mustStart("--images", "stdlib,data", "--memory", "1024", "--data", "sales="+f.sales, "--data", "hostile="+f.hostile,
		"--data", "linked="+f.linked, "--data", "big="+f.big, "--data", "year="+f.year)
	return e, f
}

func TestDataAndOutputFolders(t *testing.T) {
	e, f := foldersVM(t)
	sales, sums := f.sales, f.sums
	outDir := t.TempDir()
	os.WriteFile(filepath.Join(outDir, "keep.txt"), []byte("the user's own\n"), 0o644)
	c := e.rawClient(t, true, "--images", "stdlib,data", "--max-timeout", "30", "--data", "sales,hostile,linked,big,year", "--output-dir", outDir)
	c.initialize()
	id := 0
	call := func(args string) *mcpResult {
		t.Helper()
		id++
		c.send(callLine(id, args))
		return rawResult(t, c.reply(fmt.Sprint(id), 3*time.Minute))
	}

	t.Run("the schema offers exactly the server's data folders", func(t *testing.T) {
		c.send(`{"jsonrpc":"2.0","id":"tools","method":"tools/list"}`)
		m := c.reply("tools", 30*time.Second)
		if !strings.Contains(string(m.Result), `"enum":["sales","hostile","linked","big","year"]`) {
			t.Errorf("tools/list: %.2000s", m.Result)
		}
	})

	t.Run("a folder the server does not allow is refused before anything runs", func(t *testing.T) {
		res := call(pyArgs(`print("ran")`, `,"data":["secrets"]`))
		if !res.IsError || res.Doc.Error == nil || res.Doc.Error.Code != "invalid_arguments" || res.Execution.Cleanup.Status != wire.CleanupNotAttempted {
			t.Errorf("%s", res.Text)
		}
	})

	t.Run("a 100 MB CSV summed by pandas, read-only, with the receipt naming the folder", func(t *testing.T) {
		// The same kind of CSV also comes as an input file, as big as
		// files allow, to compare the two ways per MB.
		small := filepath.Join(t.TempDir(), "in.csv")
		salesCSV(t, small, 240<<10)
		content, _ := os.ReadFile(small)
		files, _ := json.Marshal([]map[string]string{{"name": "in.csv", "content": string(content)}})
		code := `import errno, os, time, pandas as pd
def load(p):
    t0 = time.perf_counter()
    df = pd.read_csv(p, usecols=["region", "units"], dtype={"region": "category", "units": "int32"})
    return df, time.perf_counter() - t0
df, big_s = load("/data/sales/big.csv")
print({k: int(v) for k, v in df.groupby("region", observed=True)["units"].sum().items()})
_, small_s = load("/tmp/input/in.csv")
mb = lambda p: os.path.getsize(p) / 1e6
print("data folder %.1f MB in %.2f s (%.1f MB/s); input file %.2f MB in %.3f s (%.1f MB/s)" % (
    mb("/data/sales/big.csv"), big_s, mb("/data/sales/big.csv") / big_s, mb("/tmp/input/in.csv"), small_s, mb("/tmp/input/in.csv") / small_s))
try:
    open("/data/sales/new.txt", "w")
except OSError as e:
    print("write", errno.errorcode[e.errno])
`
		t0 := time.Now()
		res := call(pyArgs(code, `,"image":"data","timeout_s":30,"data":["sales"],"files":`+string(files)))
		took := time.Since(t0)
		if res.IsError || res.Execution.Status != wire.StatusOK || res.Execution.Cleanup.Status != wire.CleanupRemoved {
			t.Fatalf("%s", res.Text)
		}
		out := res.Execution.Capture.Stdout
		for region, sum := range sums {
			if !strings.Contains(out, fmt.Sprintf("'%s': %d", region, sum)) {
				t.Errorf("stdout %q lacks %s's sum %d", out, region, sum)
			}
		}
		if !strings.Contains(out, "write EROFS") {
			t.Errorf("a write into the data folder: %q", out)
		}
		var doc struct {
			Execution struct {
				Data []wire.DataFolder `json:"data"`
			} `json:"execution"`
		}
		json.Unmarshal([]byte(res.Text), &doc)
		if len(doc.Execution.Data) != 1 || doc.Execution.Data[0].HostPath != sales || doc.Execution.Data[0].Files != 2 ||
			doc.Execution.Data[0].Bytes < 100<<20 || len(doc.Execution.Data[0].Digest) != 64 {
			t.Errorf("the receipt's data: %+v", doc.Execution.Data)
		}
		if i := strings.Index(out, "data folder "); i >= 0 {
			t.Logf("pandas read_csv: %s; the call took %v", strings.TrimSpace(strings.Split(out[i:], "\n")[0]), took.Round(time.Millisecond))
		}
	})

	t.Run("reading the share is about as fast as reading the image", func(t *testing.T) {
		// The same bytes, 100 MB of them, read once from the data folder
		// and once from files of the image (read twice, so that the
		// image's reads come from the page cache as the share's do not).
		res := call(pyArgs(`import os, time
def read(paths, limit):
    n, t0 = 0, time.perf_counter()
    for p in paths:
        with open(p, "rb") as f:
            while n < limit:
                b = f.read(1 << 20)
                if not b: break
                n += len(b)
    return n, time.perf_counter() - t0
share = read(["/data/sales/big.csv"], 100 << 20)
image_files = [os.path.join(d, f) for d, _, fs in os.walk("/usr/lib") for f in fs if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f))]
read(image_files, 100 << 20)
image = read(image_files, 100 << 20)
print("share %d MB in %.2f s; image %d MB in %.2f s" % (share[0] >> 20, share[1], image[0] >> 20, image[1]))
`, `,"image":"data","timeout_s":30,"data":["sales"]`))
		if res.IsError {
			t.Fatalf("%s", res.Text)
		}
		t.Logf("%s", strings.TrimSpace(res.Execution.Capture.Stdout))
	})

	t.Run("nothing outside the folder shows", func(t *testing.T) {
		// The box sees the folder itself: a link is a link, resolved
		// inside the box (never on the host).
		res := call(pyArgs(`import os
for root, dirs, files in os.walk("/data/hostile"):
    for n in sorted(dirs + files):
        p = os.path.join(root, n)
        print(p, "link" if os.path.islink(p) else "dir" if os.path.isdir(p) else "file" if os.path.isfile(p) else "other")
print("fine:", open("/data/hostile/fine.txt").read().strip())
print("passwd is the box's own:", open("/data/hostile/passwd").read() == open("/etc/passwd").read())
print("up leads to:", sorted(os.listdir("/data/hostile/up")))
try:
    print("outside opened:", open("/data/hostile/outside").read())
except OSError as e:
    print("outside", type(e).__name__)
`, `,"timeout_s":20,"data":["hostile"]`))
		if res.IsError || res.Execution.Status != wire.StatusOK {
			t.Fatalf("%s", res.Text)
		}
		want := `/data/hostile/fine.txt file
/data/hostile/outside link
/data/hostile/passwd link
/data/hostile/up link
fine: fine
passwd is the box's own: True
up leads to: ['hostile']
outside FileNotFoundError
`
		if got := res.Execution.Capture.Stdout; got != want {
			t.Errorf("the box saw\n%s\nwant\n%s", got, want)
		}
		var doc struct {
			Execution struct {
				Data []wire.DataFolder `json:"data"`
			} `json:"execution"`
		}
		json.Unmarshal([]byte(res.Text), &doc)
		if left := strings.Join(doc.Execution.Data[0].LeftOut, "; "); !strings.Contains(left, "3 symbolic links: shown to the box as links") {
			t.Errorf("left out %q lacks the 3 symbolic links", left)
		}
	})

	t.Run("a device, FIFO or socket put in a folder while the VM runs is refused at the next call, and nothing hangs", func(t *testing.T) {
		// vm start refuses a folder holding one; one that appears later
		// is refused by the call's own walk, before the box can reach it.
		for _, c := range []struct{ name, kind string }{{"fifo", "FIFO"}, {"null-device", "device"}} {
			p := filepath.Join(f.hostile, c.name)
			var err error
			if c.name == "fifo" {
				err = unix.Mkfifo(p, 0o644)
			} else if err = unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); errors.Is(err, unix.EPERM) {
				needs.Unavailable(t, "making a device node needs root: "+err.Error())
			}
			if err != nil {
				t.Fatal(err)
			}
			res := call(pyArgs(`print(open("/data/hostile/`+c.name+`", "rb").read())`, `,"timeout_s":20,"data":["hostile"]`))
			os.Remove(p)
			if !res.IsError || res.Doc.Error == nil || !strings.Contains(res.Doc.Error.Message, "devices, FIFOs or sockets") ||
				!strings.Contains(res.Doc.Error.Message, `"`+c.name+`"`) || res.Execution.Cleanup.Status != wire.CleanupNotAttempted {
				t.Errorf("a %s in the folder: %.2000s", c.kind, res.Text)
			}
		}
	})

	t.Run("a folder holding a file with another name elsewhere is refused, and nothing runs", func(t *testing.T) {
		// Made while the VM runs: vm start would have refused the folder.
		if err := os.Link(f.outside, filepath.Join(f.linked, "hardlink")); err != nil {
			t.Fatal(err)
		}
		res := call(pyArgs(`print(open("/data/linked/hardlink").read())`, `,"timeout_s":20,"data":["linked"]`))
		if !res.IsError || res.Doc.Error == nil || !strings.Contains(res.Doc.Error.Message, "more than one name") ||
			!strings.Contains(res.Doc.Error.Message, "its own copy") || res.Execution.Cleanup.Status != wire.CleanupNotAttempted ||
			strings.Contains(res.Text, "a secret outside") {
			t.Errorf("%.2000s", res.Text)
		}
	})

	t.Run("a 5 GB folder: the first call on it starts at once", func(t *testing.T) {
		t0 := time.Now()
		res := call(pyArgs(`import os, csv
parts = sorted(n for n in os.listdir("/data/big") if n.endswith(".bin"))
print(len(parts), sum(os.path.getsize("/data/big/" + n) for n in parts) >> 30, "GiB")
with open("/data/big/part-3.bin", "rb") as f:
    f.seek(700 << 20)
    print("zeros:", f.read(1 << 20) == bytes(1 << 20))
print(list(csv.reader(open("/data/big/index.csv")))[1:])
`, `,"timeout_s":20,"data":["big"]`))
		took := time.Since(t0)
		if res.IsError || res.Execution.Capture.Stdout != "5 5 GiB\nzeros: True\n[['part-0.bin', '10'], ['part-1.bin', '20']]\n" {
			t.Fatalf("%.2000s", res.Text)
		}
		var doc struct {
			Execution struct {
				Data []wire.DataFolder `json:"data"`
			} `json:"execution"`
		}
		json.Unmarshal([]byte(res.Text), &doc)
		if len(doc.Execution.Data) != 1 || doc.Execution.Data[0].Bytes < 5<<30 || doc.Execution.Data[0].Files != 6 {
			t.Errorf("the receipt's data: %+v", doc.Execution.Data)
		}
		// Nothing of the 5 GB is copied: the call takes what a small one
		// does (a copy would take minutes).
		t.Logf("the first call on a 5 GB folder took %v", took.Round(time.Millisecond))
		if took > 2*time.Minute {
			t.Errorf("the first call on a 5 GB folder took %v", took)
		}
	})

	t.Run("a 1 GB CSV summed by pandas in chunks, a slice of it per call", func(t *testing.T) {
		// Under emulation pandas parses 6–15 MB/s, so the 30 s a call
		// may take holds a slice of the file, not all of it: sixteen
		// calls each sum the lines that start in their sixteenth, as an
		// agent would split the work (5–12 s each here).
		const slices = 16
		code := `import io, json, os, sys
import pandas as pd
i, k = %d, %d
path = "/data/year/sales.csv"
size = os.path.getsize(path)
with open(path, "rb") as f:
    header = f.readline()
    def line_start(at):
        # The first line that starts at or after byte at.
        if at <= len(header):
            return len(header)
        f.seek(at - 1)
        if f.read(1) != b"\n":
            f.readline()
        return f.tell()
    lo, hi = line_start(size * i // k), line_start(size * (i + 1) // k) if i + 1 < k else size
    f.seek(lo)
    part = io.BytesIO(f.read(hi - lo))
units = rows = 0
for chunk in pd.read_csv(part, names=["region", "units", "price"], usecols=["units"], dtype={"units": "int64"}, chunksize=4 << 20):
    units += int(chunk["units"].sum())
    rows += len(chunk)
print(json.dumps({"units": units, "rows": rows}))
`
		var units, rows int64
		for i := range slices {
			res := call(pyArgs(fmt.Sprintf(code, i, slices), `,"image":"data","timeout_s":30,"data":["year"]`))
			if res.IsError {
				t.Fatalf("slice %d: %.2000s", i, res.Text)
			}
			var part struct{ Units, Rows int64 }
			if err := json.Unmarshal([]byte(res.Execution.Capture.Stdout), &part); err != nil {
				t.Fatalf("slice %d printed %q", i, res.Execution.Capture.Stdout)
			}
			units, rows = units+part.Units, rows+part.Rows
			t.Logf("slice %d: %d rows, wall %d ms", i, part.Rows, res.Execution.WallMS)
		}
		var want int64
		for _, u := range f.yearSums {
			want += u
		}
		if units != want || rows != f.yearRows {
			t.Errorf("pandas summed %d units in %d rows, want %d in %d", units, rows, want, f.yearRows)
		}
	})

	t.Run("2,000 files in /tmp/output: the result keeps stdout and says what was left", func(t *testing.T) {
		res := call(pyArgs(`import os
for i in range(2000):
    open("/tmp/output/part-%04d.txt" % i, "w").write(str(i))
print("wrote 2000 files")
`, `,"timeout_s":30`))
		if res.IsError || res.Execution.Status != wire.StatusOK || res.Execution.Cleanup.Status != wire.CleanupRemoved {
			t.Fatalf("isError %v: %.3000s", res.IsError, res.Text)
		}
		if res.Execution.Capture.Stdout != "wrote 2000 files\n" {
			t.Errorf("stdout %q", res.Execution.Capture.Stdout)
		}
		var doc struct {
			Execution struct {
				Output wire.Output `json:"output_files"`
			} `json:"execution"`
			OutputDir struct {
				Files []json.RawMessage `json:"files"`
				More  int               `json:"more_files"`
			} `json:"output_dir"`
		}
		json.Unmarshal([]byte(res.Text), &doc)
		o := doc.Execution.Output
		if o.DeliveredAll == nil || o.DeliveredAll.Files != wire.MaxDeliveredFiles || len(o.NotDelivered)+o.NotDeliveredUnlisted != 2000-wire.MaxDeliveredFiles {
			t.Errorf("delivered_all %+v, not delivered %d listed + %d", o.DeliveredAll, len(o.NotDelivered), o.NotDeliveredUnlisted)
		}
		if len(o.NotDelivered) > 0 && o.NotDelivered[0].Reason != wire.NotDeliveredOverCount {
			t.Errorf("not delivered because %q", o.NotDelivered[0].Reason)
		}
		if len(doc.OutputDir.Files)+doc.OutputDir.More != wire.MaxDeliveredFiles {
			t.Errorf("output_dir lists %d and counts %d more", len(doc.OutputDir.Files), doc.OutputDir.More)
		}
		var d struct {
			Delivery struct {
				ReceiptBytes int `json:"receipt_bytes"`
			} `json:"delivery"`
		}
		json.Unmarshal([]byte(res.Text), &d)
		if d.Delivery.ReceiptBytes == 0 || d.Delivery.ReceiptBytes > 64<<10 || len(res.Text) > 256<<10 {
			t.Errorf("the receipt is %d bytes, the result's text %d", d.Delivery.ReceiptBytes, len(res.Text))
		}
	})

	t.Run("20 MB of output lands whole in the output folder; the result stays small", func(t *testing.T) {
		res := call(pyArgs(`import hashlib, os
b = os.urandom(20 << 20)
open("/tmp/output/big.bin", "wb").write(b)
open("/tmp/output/keep.txt", "w").write("the program's, not the user's\n")
print(hashlib.sha256(b).hexdigest())
`, `,"timeout_s":30,"return_files":true`))
		if res.IsError || res.Execution.Status != wire.StatusOK {
			t.Fatalf("%.3000s", res.Text)
		}
		var doc struct {
			OutputDir struct {
				Dir   string `json:"dir"`
				Files []struct {
					Name, Path, SHA256 string
					Bytes              int64
				} `json:"files"`
			} `json:"output_dir"`
		}
		json.Unmarshal([]byte(res.Text), &doc)
		printed := strings.TrimSpace(res.Execution.Capture.Stdout)
		if len(doc.OutputDir.Files) != 2 || doc.OutputDir.Files[0].Name != "big.bin" || doc.OutputDir.Files[0].SHA256 != printed {
			t.Fatalf("output_dir %+v (printed %s)", doc.OutputDir, printed)
		}
		b, err := os.ReadFile(doc.OutputDir.Files[0].Path)
		sum := sha256.Sum256(b)
		if err != nil || len(b) != 20<<20 || hex.EncodeToString(sum[:]) != printed {
			t.Errorf("the saved file: %d bytes, %v", len(b), err)
		}
		if got, _ := os.ReadFile(filepath.Join(outDir, "keep.txt")); string(got) != "the user's own\n" {
			t.Errorf("the user's keep.txt became %q", got)
		}
		if filepath.Dir(doc.OutputDir.Files[0].Path) != filepath.Join(outDir, res.Execution.RunID) {
			t.Errorf("saved at %s, not in the run's own directory", doc.OutputDir.Files[0].Path)
		}
		if len(res.Text) > 64<<10 {
			t.Errorf("the result's text is %d bytes", len(res.Text))
		}
	})
}
