package e2e

// The packages part of `make bench`: a binary package installed from a
// package index (pybox image build --pip) beside one from Debian's
// packages. It times `import pbxc` (the C extension of the end-to-end
// test's index, packages_e2e_test.go, served on loopback) in a box of an
// image built with it, and `import numpy` in the data image, on a VM
// with warm boxes (the default) and on one without (--warm 0), the two
// taking turns call by call. The image preloads pbxc in its warm boxes,
// as data preloads numpy, so that warm is compared with warm.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pybox/host/image"
	"pybox/shared/archs"
)

// pkgImports are the imports the part times: the image and the module.
var pkgImports = []struct{ name, image, module string }{
	{"import pbxc (a pip wheel from an index, C extension, pkgs image)", "pkgs", "pbxc"},
	{"import numpy (Debian's python3-numpy, data image)", "data", "numpy"},
}

// pkgImportCode imports module and prints how long the import took, in ms.
func pkgImportCode(module string) string {
	return "import time\nt0 = time.perf_counter()\nimport " + module + "\nprint((time.perf_counter() - t0) * 1000)\n"
}

func benchPackages(b *testing.B, r *benchReport, k benchKnobs) {
	if guestArch != archs.X86_64 {
		r.Skipped["packages"] = "the test package's C extension and its wheel's tag are x86-64's"
		return
	}
	so, missing := pbxcExtension(b)
	if missing != "" {
		r.Skipped["packages"] = missing
		return
	}
	ix := newPackageIndex(b, so)
	vms := []*warmVM{{name: "warm"}, {name: "cold", args: []string{"--warm", "0"}}}
	for _, v := range vms {
		v.e = benchEnv(b)
	}
	warm := vms[0]

	// The image, built once without the cache (its build is a figure too),
	// and linked into the other VM's home.
	preload := strings.Join(append(slices.Clone(inspectImage(b, warm.e, "stdlib").Preload), "pbxc"), ",")
	t0 := time.Now()
	if out, errOut, code := warm.e.pybox("image", "build", "pkgs", "--from", "stdlib", "--pip", "pbxa", "--index-url", ix.URL, "--preload", preload, "--no-cache"); code != 0 {
		b.Fatalf("image build --pip: exit %d\n%s%s\nindex requests:\n%s", code, out, errOut, ix.log())
	}
	r.add(newFigure("packages", "image build --pip pbxa: 3 wheels from a loopback index, no cache", "s", []float64{math.Round(time.Since(t0).Seconds()*10) / 10},
		"pybox image build pkgs --from stdlib --pip pbxa --index-url … --preload …,pbxc --no-cache: pip's resolution and downloads, the install, the import checks, the erofs image"))
	m := inspectImage(b, warm.e, "pkgs")
	if fi, err := os.Stat(image.Path(warm.e.home, "pkgs", guestArch)); err == nil {
		r.Images["pkgs"] = map[string]any{"sha256": m.Digest, "bytes": fi.Size()}
	}
	if err := os.Symlink(image.Dir(warm.e.home, "pkgs", guestArch), image.Dir(vms[1].e.home, "pkgs", guestArch)); err != nil {
		b.Fatal(err)
	}
	for _, v := range vms {
		if out, errOut, code := v.e.pybox(append([]string{"vm", "start", "--images", "pkgs,data"}, v.args...)...); code != 0 {
			b.Fatalf("vm start: %s%s", out, errOut)
		}
		v.m = &mcpSession{b: b, e: v.e, images: "pkgs,data"}
		defer v.stop()
	}
	defer func() {
		for _, v := range vms {
			if len(v.m.failed) > 0 {
				r.Notes = append(r.Notes, fmt.Sprintf("packages, %s VM: %d calls did not end ok and are left out of the figures: %s", v.name, len(v.m.failed), strings.Join(v.m.failed, "; ")))
			}
		}
	}()

	// One call of each import on each VM in turn, every call with the warm
	// VM's boxes ready, so that its background warming falls on neither.
	rtt, imp := map[string][]float64{}, map[string][]float64{}
	for range k.Runs {
		for _, v := range vms {
			for _, p := range pkgImports {
				waitWarmReady(b, warm.e.home, "pkgs")
				waitWarmReady(b, warm.e.home, "data")
				d, rc := v.m.call(map[string]any{"code": pkgImportCode(p.module), "image": p.image, "timeout_s": 30})
				if rc.Execution.Status != "ok" {
					continue
				}
				var wr warmReceipt
				json.Unmarshal([]byte(v.m.lastText), &wr)
				if (v == warm) != wr.Execution.Box.Warm {
					r.Notes = append(r.Notes, fmt.Sprintf("packages: a %s call of %s ran in a %v box", v.name, p.module, map[bool]string{true: "warm", false: "cold"}[wr.Execution.Box.Warm]))
				}
				ms, err := strconv.ParseFloat(strings.TrimSpace(rc.Execution.Capture.Stdout), 64)
				if err != nil {
					b.Fatalf("%s printed %q, not the import's time (stderr %q)", p.name, rc.Execution.Capture.Stdout, rc.Execution.Capture.Stderr)
				}
				key := p.module + " " + v.name
				rtt[key], imp[key] = append(rtt[key], d), append(imp[key], ms)
			}
		}
	}
	figures := map[string]*figure{}
	for _, p := range pkgImports {
		for _, v := range vms {
			key := p.module + " " + v.name
			figures[key+" rtt"] = r.add(newFigure("packages", fmt.Sprintf("%s, %s: tools/call round trip", p.name, v.name), "ms", rtt[key],
				"the whole call: the box, the program, the receipt"))
			note := "time.perf_counter around it: the import itself, in a box made for the call"
			if v == warm {
				note = "time.perf_counter around it: near 0, the warm box's preload imported the module already"
			}
			figures[key+" import"] = r.add(newFigure("packages", fmt.Sprintf("%s, %s: the import statement in the program", p.name, v.name), "ms", imp[key], note))
		}
	}
	ratio := func(name, top, bottom string) {
		fa, fb := figures[top], figures[bottom]
		if fa == nil || fb == nil || fa.N == 0 || fb.Median <= 0 {
			return
		}
		f := r.add(newFigure("packages", name, "×", []float64{fa.Median / fb.Median}, fmt.Sprintf("medians %s vs %s ms", num(fa.Median), num(fb.Median))))
		f.Ratio = math.Round(fa.Median/fb.Median*100) / 100
	}
	ratio("pbxc ÷ numpy, warm, round trip", "pbxc warm rtt", "numpy warm rtt")
	ratio("pbxc ÷ numpy, cold, round trip", "pbxc cold rtt", "numpy cold rtt")
	ratio("pbxc ÷ numpy, cold, the import statement", "pbxc cold import", "numpy cold import")
	ratio("warm ÷ cold, pbxc, round trip", "pbxc warm rtt", "pbxc cold rtt")
	ratio("warm ÷ cold, numpy, round trip", "numpy warm rtt", "numpy cold rtt")
}
