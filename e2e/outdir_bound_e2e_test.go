package e2e

// The output folder's total bound, end to end: runs of many empty files,
// which a measure of the files' sizes counts as nothing, fill a folder
// with a small --max-output-dir-total through the real pybox mcp and VM,
// and the next call is refused with what du says the folder holds.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"pybox/host/outdir"
	"pybox/shared/wire"
)

func TestOutputDirBoundCountsEntries(t *testing.T) {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	e.mustStart("--images", "stdlib")
	outDir := t.TempDir()
	// Room for two runs of 1,000 empty files (4 MB each, as counted)
	// and part of a third.
	const total = 10_000_000
	c := e.rawClient(t, true, "--max-timeout", "30", "--output-dir", outDir, "--max-output-dir-total", strconv.Itoa(total))
	c.initialize()
	call := func(id int) (*mcpResult, int) {
		t.Helper()
		c.send(callLine(id, pyArgs(`import os
for i in range(1000):
    open("/tmp/output/e%04d" % i, "w").close()
print(len(os.listdir("/tmp/output")))
`, `,"timeout_s":30`)))
		res := rawResult(t, c.reply(fmt.Sprint(id), 3*time.Minute))
		var doc struct {
			OutputDir struct {
				Files []json.RawMessage `json:"files"`
				More  int               `json:"more_files"`
			} `json:"output_dir"`
		}
		json.Unmarshal([]byte(res.Text), &doc)
		return res, len(doc.OutputDir.Files) + doc.OutputDir.More
	}

	var kept []int
	for id := 1; id <= 3; id++ {
		res, n := call(id)
		if res.IsError || res.Execution.Status != wire.StatusOK || res.Execution.Capture.Stdout != "1000\n" {
			t.Fatalf("run %d: isError %v: %.2000s", id, res.IsError, res.Text)
		}
		kept = append(kept, n)
	}
	if kept[0] != 1000 || kept[1] != 1000 || kept[2] == 0 || kept[2] >= 1000 {
		t.Errorf("the runs kept %v files: want the first two whole, and part of the third, which filled what was left", kept)
	}

	// The bound holds by its own measure, give or take what the last
	// run's directory grew beyond its first block.
	refusedAsDu(t, call, 4, outDir, total, 64<<10)

	// pybox run --out has no bound, so it runs into the full folder; it
	// records its run in the ledger, which stays as du sees the folder.
	script := filepath.Join(t.TempDir(), "ten.py")
	os.WriteFile(script, []byte("for i in range(10):\n    open('/tmp/output/cli%d' % i, 'w').close()\n"), 0o644)
	if out, errOut, code := e.pybox("run", "--out", outDir, "--timeout", "30", script); code != 0 || strings.Count(errOut, "wrote ") != 10 {
		t.Fatalf("pybox run --out: exit %d\n%s%s", code, out, errOut)
	}
	refusedAsDu(t, call, 5, outDir, total, 64<<10+2*outdir.BlockSize+11*outdir.EntryCost)
}

// refusedAsDu makes call id, which must be refused as the folder is
// full, and checks that the refusal says what du and find say of it,
// and that the folder holds no more than over above its bound.
func refusedAsDu(t *testing.T, call func(int) (*mcpResult, int), id int, outDir string, total, over int64) {
	t.Helper()
	res, _ := call(id)
	if !res.IsError || res.Doc.Error == nil || res.Doc.Error.Code != "output_dir_full" || res.Execution.Cleanup.Status != wire.CleanupNotAttempted {
		t.Fatalf("call %d, the folder full: isError %v: %.2000s", id, res.IsError, res.Text)
	}
	msg := res.Doc.Error.Message
	m := regexp.MustCompile(`it holds (\d+) bytes \(as du counts them\) in (\d+) entries, which count as (\d+) bytes`).FindStringSubmatch(msg)
	if m == nil || !strings.Contains(msg, fmt.Sprintf("--max-output-dir-total is %d; move or delete folders of earlier runs", total)) {
		t.Fatalf("the refusal: %s", msg)
	}
	held, _ := strconv.ParseInt(m[1], 10, 64)
	entries, _ := strconv.ParseInt(m[2], 10, 64)
	cost, _ := strconv.ParseInt(m[3], 10, 64)

	// What du and find say of the folder now.
	out, err := exec.Command("du", "-sk", outDir).Output()
	if err != nil {
		t.Fatal(err)
	}
	duKiB, _ := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	var found, sizes int64
	filepath.WalkDir(outDir, func(p string, d fs.DirEntry, err error) error {
		found++
		if fi, err := d.Info(); err == nil && d.Type().IsRegular() {
			sizes += fi.Size()
		}
		return nil
	})
	t.Logf("refused: %s", msg)
	t.Logf("du -sk: %d KiB; %d entries; the files' sizes add up to %d bytes (what the old measure counted)", duKiB, found, sizes)
	if held > duKiB*1024 || duKiB*1024-held >= 1024 || entries != found || cost != held+entries*outdir.EntryCost {
		t.Errorf("the refusal says %d bytes in %d entries; du says %d KiB, find %d entries", held, entries, duKiB, found)
	}
	if cost > total+over || cost < total-2*outdir.EntryCost-outdir.BlockSize || duKiB*1024 > total {
		t.Errorf("the folder costs %d as counted (du: %d KiB) against a bound of %d", cost, duKiB, total)
	}
}
