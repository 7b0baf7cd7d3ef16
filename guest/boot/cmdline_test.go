package boot

import (
	"strings"
	"testing"

	"pybox/shared/wire"
)

func TestParseImages(t *testing.T) {
	d1 := strings.Repeat("ab", 32)
	d2 := strings.Repeat("0f", 32)
	cmdline := "console=ttyS0 panic=-1 pybox.image=stdlib:" + d1 + " reboot=t pybox.image=data:" + d2 + "\n"
	got, errs := ParseImages(cmdline)
	want := []wire.ImageInfo{{Name: "stdlib", Digest: d1}, {Name: "data", Digest: d2}}
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestParseImagesRefuses(t *testing.T) {
	d := strings.Repeat("ab", 32)
	for _, bad := range []string{
		"pybox.image=stdlib",                            // no digest
		"pybox.image=stdlib:" + d[:63],                  // short digest
		"pybox.image=stdlib:" + strings.ToUpper(d),      // upper-case hex
		"pybox.image=Stdlib:" + d,                       // bad name
		"pybox.image=../x:" + d,                         // path in the name
		"pybox.image=:" + d,                             // empty name
		"pybox.image=stdlib:" + d + "00",                // long digest
		"pybox.image=std lib:" + d,                      // split by the space: two bad fields
		"pybox.image=stdlib:" + strings.Repeat("g", 64), // not hex
	} {
		got, errs := ParseImages(bad)
		if len(got) != 0 || len(errs) == 0 {
			t.Errorf("%q: got %v, errors %v; want it refused", bad, got, errs)
		}
	}
}

func TestParseImagesDuplicate(t *testing.T) {
	d1 := strings.Repeat("ab", 32)
	d2 := strings.Repeat("cd", 32)
	got, errs := ParseImages("pybox.image=stdlib:" + d1 + " pybox.image=stdlib:" + d2)
	if len(got) != 1 || got[0].Digest != d1 || len(errs) != 1 {
		t.Fatalf("got %v, errors %v; want the first kept and one error", got, errs)
	}
}

func TestParseImagesNone(t *testing.T) {
	got, errs := ParseImages("console=ttyS0 pybox.imagex=a:b")
	if len(got) != 0 || len(errs) != 0 {
		t.Fatalf("got %v, %v", got, errs)
	}
}

func FuzzParseImages(f *testing.F) {
	f.Add("console=ttyS0 pybox.image=stdlib:" + strings.Repeat("ab", 32))
	f.Add("pybox.image=a:b:c pybox.image= pybox.image=x:")
	f.Fuzz(func(t *testing.T, cmdline string) {
		images, _ := ParseImages(cmdline)
		seen := map[string]bool{}
		for _, img := range images {
			if wire.CheckImageName(img.Name) != nil || !isSHA256Hex(img.Digest) || seen[img.Name] {
				t.Fatalf("accepted %+v from %q", img, cmdline)
			}
			seen[img.Name] = true
		}
	})
}

func TestParseAccel(t *testing.T) {
	for cmdline, want := range map[string]string{
		"console=ttyS0 pybox.accel=tcg":                  "tcg",
		"pybox.accel=kvm panic=-1":                       "kvm",
		"pybox.accel=vz":                                 "vz",
		"console=ttyS0":                                  "", // an older host
		"pybox.accel=TCG":                                "",
		"pybox.accel=":                                   "",
		"pybox.accel=tcg pybox.accel=kvm":                "kvm", // the last one counts
		"pybox.accel=kvm pybox.accel=hvf":                "",    // an unknown last one counts too
		"pybox.accelx=tcg":                               "",
		"pybox.image=stdlib:" + strings.Repeat("ab", 32): "",
	} {
		if got := ParseAccel(cmdline); got != want {
			t.Errorf("ParseAccel(%q) = %q, want %q", cmdline, got, want)
		}
	}
}

func TestParseReportOrder(t *testing.T) {
	for _, c := range []struct {
		cmdline string
		order   int
		ok, err bool
	}{
		{"console=ttyS0 pybox.report_order=5 panic=-1", 5, true, false},
		{"pybox.report_order=0", 0, true, false},
		{"pybox.report_order=10\n", 10, true, false},
		{"console=ttyS0 panic=-1", 0, false, false}, // the host asked for nothing: keep memory
		{"pybox.report_order=11", 0, false, true},
		{"pybox.report_order=-1", 0, false, true},
		{"pybox.report_order=", 0, false, true},
		{"pybox.report_order=5k", 0, false, true},
	} {
		order, ok, err := ParseReportOrder(c.cmdline)
		if order != c.order || ok != c.ok || (err != nil) != c.err {
			t.Errorf("%q: got %d, %v, %v; want %d, %v, error %v", c.cmdline, order, ok, err, c.order, c.ok, c.err)
		}
	}
}
