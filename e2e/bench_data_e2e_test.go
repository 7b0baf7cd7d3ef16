package e2e

// The data part of `make bench`: how soon a VM given a large data folder
// serves its first call on it, and how fast a box reads a large file from
// a data folder against the same file from an image.

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchDataFile writes a file of size random bytes (random, so that the
// image's compression does not flatter it).
func benchDataFile(b *testing.B, path string, size int64) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		b.Fatal(err)
	}
}

// benchReadCode reads path whole and prints its size and the seconds it took.
const benchReadCode = `import json, time
t0, n = time.perf_counter(), 0
with open(%q, "rb", buffering=0) as f:
    while True:
        b = f.read(4 << 20)
        if not b:
            break
        n += len(b)
print(json.dumps({"bytes": n, "s": time.perf_counter() - t0}))
`

func benchData(b *testing.B, r *benchReport, k benchKnobs) {
	dir := openTempDir(b)
	oneGiB := filepath.Join(dir, "gib.bin")
	benchDataFile(b, oneGiB, 1<<30)
	// The 5 GB folder: the real 1 GiB file and 4 GiB of sparse files.
	big := openTempDir(b)
	benchDataFile(b, filepath.Join(big, "gib.bin"), 1<<30)
	for i := range 4 {
		f, err := os.Create(filepath.Join(big, fmt.Sprintf("sparse-%d.bin", i)))
		if err != nil {
			b.Fatal(err)
		}
		f.Truncate(1 << 30)
		f.Close()
	}

	// The first call on a VM just started with the folder: what a user
	// waits for after `pybox vm start --data`.
	for _, folder := range []struct{ name, dir string }{{"1 GB", dir}, {"5 GB", big}} {
		var firsts []float64
		for range max(1, k.Boots) {
			e := benchEnv(b)
			if out, errOut, code := e.pybox("vm", "start", "--images", "stdlib", "--data", "f="+folder.dir); code != 0 {
				b.Fatalf("vm start: %s%s", out, errOut)
			}
			t0 := time.Now()
			rc := runPy(b, e, "import os\nprint(sorted(os.listdir('/data/f')))\n", "--data", "f", "--timeout", "30").receipt(b)
			if rc.Status != "ok" {
				b.Fatalf("the first call on the %s folder: %s (%s)", folder.name, rc.Status, rc.Reason)
			}
			firsts = append(firsts, float64(time.Since(t0).Milliseconds()))
			e.pybox("vm", "stop")
		}
		r.add(newFigure("data", "first call on a "+folder.name+" data folder, after vm start", "ms", firsts, "pybox run round trip: the folder's walk (a stat per entry) and the run; nothing is copied"))
	}

	// Read throughput: the same 1 GiB, from the data folder and from an
	// image built with it.
	e := benchEnv(b)
	if out, errOut, code := e.pybox("image", "build", "benchgib", "--from", "stdlib", "--add", oneGiB+":/opt/gib.bin"); code != 0 {
		b.Fatalf("image build: %s%s", out, errOut)
	}
	if out, errOut, code := e.pybox("vm", "start", "--images", "stdlib,benchgib", "--data", "f="+dir); code != 0 {
		b.Fatalf("vm start: %s%s", out, errOut)
	}
	defer e.pybox("vm", "stop")
	for _, src := range []struct{ name, path, image string }{{"a data folder", "/data/f/gib.bin", "stdlib"}, {"an image", "/opt/gib.bin", "benchgib"}} {
		var rates []float64
		for range max(1, k.Runs/2) {
			rc := runPy(b, e, fmt.Sprintf(benchReadCode, src.path), "--image", src.image, "--data", "f", "--timeout", "30").receipt(b)
			var got struct {
				Bytes int64
				S     float64
			}
			if rc.Status != "ok" || json.Unmarshal([]byte(strings.TrimSpace(rc.Capture.Stdout)), &got) != nil || got.Bytes != 1<<30 {
				b.Fatalf("reading from %s: %s (%s) %q", src.name, rc.Status, rc.Reason, rc.Capture.Stdout)
			}
			rates = append(rates, float64(got.Bytes>>20)/got.S)
		}
		r.add(newFigure("data", "reading 1 GiB from "+src.name+" in a box", "MB/s", rates, "4 MiB reads, unbuffered; the image's pages may be cached in the guest after the first read, the data folder's never are (cache=none)"))
	}
}
