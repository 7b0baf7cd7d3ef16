package mcptest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// checkData asks for data folder name and expects the box to see it at
// /data/NAME, read-only, and the receipt to name it.
func (r *runner) checkData(name string) func(context.Context) verdict {
	return func(ctx context.Context) verdict {
		want := fmt.Sprintf("the box sees data folder %s at /data/%s, a write there fails with EROFS, and the receipt names the folder", name, name)
		args := r.runArgs(fmt.Sprintf(`import errno, os
d = "/data/%s"
print("entries", len(os.listdir(d)))
try:
    open(d + "/pybox-check-write", "w"); print("write ok")
except OSError as e:
    print("write", errno.errorcode[e.errno])
`, name))
		args["data"] = []string{name}
		res, v := r.run(ctx, want, args)
		if v != nil {
			return *v
		}
		if !res.ok() {
			return fail(want, res.summary(), hintFor(res, r.o)+"; is the VM started with `--data "+name+"=DIR`?")
		}
		out := res.Exec.Capture.Stdout
		if !strings.Contains(out, "write EROFS") || !strings.Contains(out, "entries ") {
			return fail(want, fmt.Sprintf("the box printed %q", cut(out, 200)),
				"a data folder must be read-only: this VM or server is not PyBox's, or is out of step: rebuild (`make`) and restart the VM")
		}
		if len(res.Exec.Data) != 1 || res.Exec.Data[0].Name != name || res.Exec.Data[0].HostPath == "" {
			return fail(want, fmt.Sprintf("the receipt's data is %+v", res.Exec.Data), "rebuild (`make`) and restart the VM")
		}
		d := res.Exec.Data[0]
		return pass("%s: %s (%d files, %d bytes, listing %.12s), read-only in the box", name, d.HostPath, d.Files, d.Bytes, d.Digest)
	}
}

// checkOutputDir has the program write a file larger than a result may
// carry, and expects it whole in the output folder with the sha256 the
// program printed.
func (r *runner) checkOutputDir(ctx context.Context) verdict {
	want := "a 100 KiB file written to /tmp/output lands whole in the output folder (" + r.o.OutputDir + "/RUN_ID/), with the sha256 the program printed"
	args := r.runArgs(`import hashlib, os
b = os.urandom(100 << 10)
open("/tmp/output/pybox-check.bin", "wb").write(b)
print(hashlib.sha256(b).hexdigest())
`)
	res, v := r.runOK(ctx, want, args)
	if v != nil {
		return *v
	}
	printed := strings.TrimSpace(res.Exec.Capture.Stdout)
	od := res.Doc.OutputDir
	if od == nil || len(od.Files) != 1 || od.Files[0].Name != "pybox-check.bin" {
		return fail(want, fmt.Sprintf("output_dir is %+v", od), "the server was not started with --output-dir "+r.o.OutputDir+", or is older than this pybox")
	}
	f := od.Files[0]
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return fail(want, "the saved file: "+err.Error(), "is the output folder on this machine and writable?")
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != printed || f.SHA256 != printed || f.Bytes != 100<<10 {
		return fail(want, fmt.Sprintf("%s: %d bytes, sha256 %s (the result says %s; the program printed %s)", f.Path, len(b), got, f.SHA256, printed),
			"files changed on the way: rebuild (`make`) and restart the VM")
	}
	return pass("%s: %d bytes, sha256 %.12s", f.Path, len(b), printed)
}

// freshProgram prints what a reused interpreter, or boxes forked from one
// template, would repeat from call to call.
var freshProgram = program("fresh", `import os, random, uuid
print(random.getrandbits(64), hash("pybox"), uuid.uuid4(), os.urandom(8).hex())
`)

// checkFresh makes two calls in a row and expects every value a reused
// process would repeat to differ: each call gets a box of its own.
func (r *runner) checkFresh(ctx context.Context) verdict {
	const want = "two calls in a row print different random numbers, string hashes and uuids: each got a fresh box"
	var seen []string
	for range 2 {
		res, v := r.runOK(ctx, want, r.runArgs(freshProgram))
		if v != nil {
			return *v
		}
		seen = append(seen, strings.Fields(res.Exec.Capture.Stdout)...)
	}
	if len(seen) != 8 {
		return fail(want, fmt.Sprintf("the calls printed %q", seen), "this server is not PyBox's")
	}
	for i := range 4 {
		if seen[i] == seen[i+4] {
			return fail(want, fmt.Sprintf("value %d repeated: %s", i+1, seen[i]),
				"the server reuses an interpreter (or forks boxes from one): every call must get a fresh box")
		}
	}
	return pass("random, hash, uuid and urandom all differ between two calls")
}
