package vm

import (
	"strings"
	"testing"
)

func TestVZCmdline(t *testing.T) {
	d1, d2 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	got := vzCmdline(Config{Runs: 3, Images: []Image{{Name: "stdlib", Digest: d1}, {Name: "data", Digest: d2}},
		Data: []DataShare{{Name: "sales"}, {Name: "logs"}}})
	want := "console=hvc0 loglevel=4 panic=-1 pybox.accel=vz pybox.runs=3 pybox.image=data:" + d2 + " pybox.image=stdlib:" + d1 + " pybox.data=sales pybox.data=logs"
	if got != want {
		t.Errorf("vzCmdline =\n%s\nwant\n%s", got, want)
	}
	if strings.Contains(got, "ttyS0") || strings.Count(got, "console=") != 1 {
		t.Errorf("vzCmdline %q: want exactly one console, hvc0", got)
	}
}

func TestVZDiskID(t *testing.T) {
	for name, want := range map[string]string{
		"stdlib":                    "stdlib",
		"a2345678901234567890":      "a2345678901234567890",
		"a23456789012345678901234x": "a2345678901234567890",
	} {
		if got := vzDiskID(name); got != want {
			t.Errorf("vzDiskID(%q) = %q, want %q", name, got, want)
		}
	}
}
