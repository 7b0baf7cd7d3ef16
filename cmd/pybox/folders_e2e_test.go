package main

// End-to-end tests of data folders (host folders the user named, read
// only in the box at /data/NAME) and the output folder (everything a
// program writes to /tmp/output, saved whole on the host), through the
// real pybox mcp and a real VM started with --data.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// foldersVM starts a VM with the stdlib and data images and data folder
// "sales" (a 100 MB CSV and a small one) and "hostile" (every kind of
// entry that could lead out of a folder).
func foldersVM(t *testing.T) (e *vmEnv, sales, hostile string, sums map[string]int64) {
	e = newVMEnv(t)
	linkImages(t, e, "stdlib", "data")
	sales, hostile = t.TempDir(), t.TempDir()
	sums = salesCSV(t, filepath.Join(sales, "big.csv"), 100<<20)
	os.WriteFile(filepath.Join(sales, "small.csv"), []byte("region,units\nnorth,3\nsouth,4\n"), 0o644)
	outside := filepath.Join(t.TempDir(), "outside-secret.txt")
	os.WriteFile(outside, []byte("a secret outside every data folder\n"), 0o644)
	os.WriteFile(filepath.Join(hostile, "fine.txt"), []byte("fine\n"), 0o644)
	for name, target := range map[string]string{"passwd": "/etc/passwd", "up": "..", "outside": outside} {
		os.Symlink(target, filepath.Join(hostile, name))
	}
	if err := os.Link(outside, filepath.Join(hostile, "hardlink")); err != nil {
		t.Fatal(err)
	}
	unix.Mkfifo(filepath.Join(hostile, "fifo"), 0o644)
	if err := unix.Mknod(filepath.Join(hostile, "null-device"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		unavailable(t, "making a device node needs root: "+err.Error())
	}
	e.mustStart("--images", "stdlib,data", "--memory", "1024", "--data", "sales="+sales, "--data", "hostile="+hostile)
	return e, sales, hostile, sums
}

func TestDataAndOutputFolders(t *testing.T) {
	e, sales, _, sums := foldersVM(t)
	outDir := t.TempDir()
	os.WriteFile(filepath.Join(outDir, "keep.txt"), []byte("the user's own\n"), 0o644)
	c := e.rawClient(t, true, "--images", "stdlib,data", "--max-timeout", "30", "--data", "sales,hostile", "--output-dir", outDir)
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
		if !strings.Contains(string(m.Result), `"enum":["sales","hostile"]`) {
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

	t.Run("nothing outside the folder shows, and nothing hangs", func(t *testing.T) {
		res := call(pyArgs(`import os
for root, dirs, files in os.walk("/data/hostile"):
    for n in sorted(dirs + files):
        p = os.path.join(root, n)
        print(p, "link" if os.path.islink(p) else "dir" if os.path.isdir(p) else "file" if os.path.isfile(p) else "other")
print("fine:", open("/data/hostile/fine.txt").read().strip())
`, `,"timeout_s":20,"data":["hostile"]`))
		if res.IsError || res.Execution.Status != wire.StatusOK {
			t.Fatalf("%s", res.Text)
		}
		if got, want := res.Execution.Capture.Stdout, "/data/hostile/fine.txt file\nfine: fine\n"; got != want {
			t.Errorf("the box saw %q, want %q", got, want)
		}
		var doc struct {
			Execution struct {
				Data []wire.DataFolder `json:"data"`
			} `json:"execution"`
		}
		json.Unmarshal([]byte(res.Text), &doc)
		left := strings.Join(doc.Execution.Data[0].LeftOut, "; ")
		for _, w := range []string{"3 symbolic links", "1 files with more than one name", "2 devices, FIFOs and sockets"} {
			if !strings.Contains(left, w) {
				t.Errorf("left out %q lacks %q", left, w)
			}
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
