package archs

import "testing"

// Go's names become PyBox's: build/x86_64, not build/amd64.
func TestOf(t *testing.T) {
	for goarch, want := range map[string]string{"amd64": X86_64, "arm64": Arm64} {
		if got := Of(goarch); got != want {
			t.Errorf("Of(%q) = %q, want %q", goarch, got, want)
		}
		if Check(want) != nil {
			t.Errorf("Check(%q) refuses it", want)
		}
	}
	for _, bad := range []string{"", "amd64", "aarch64", "ARM64", "riscv64"} {
		if Check(bad) == nil {
			t.Errorf("Check(%q) accepts it", bad)
		}
	}
}
