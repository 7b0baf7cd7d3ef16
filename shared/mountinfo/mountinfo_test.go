package mountinfo

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pybox/shared/needs"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:     "/a b",
		`/plain`:      "/plain",
		`/x\134y`:     `/x\y`,
		`/t\011n\012`: "/t\tn\n",
		`/end\04`:     `/end\04`,  // cut short: not an escape
		`/end\`:       `/end\`,    // likewise
		`/big\777`:    `/big\777`, // more than a byte
		`/not\08x`:    `/not\08x`, // 8 is no octal digit
		`\040\040`:    "  ",
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPoints(t *testing.T) {
	table := strings.Join([]string{
		"22 1 0:21 / /proc rw,relatime - proc proc rw",
		"short line",
		`42 30 0:42 / /run/with\040space rw - tmpfs x rw`,
		"",
		"40 30 0:40 / /run/boxes/r1/tmp rw,nosuid,nodev - tmpfs pybox-tmp rw",
	}, "\n")
	got, err := Points(strings.NewReader(table))
	want := []string{"/proc", "/run/with space", "/run/boxes/r1/tmp"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Points = %q, %v; want %q", got, err, want)
	}
}

// A line past the bound is an error, with what came before it.
func TestPointsLineBound(t *testing.T) {
	table := "22 1 0:21 / /proc rw - proc proc rw\n" + "1 2 3 4 /" + strings.Repeat("x", maxLine) + "\n"
	got, err := Points(strings.NewReader(table))
	if !errors.Is(err, bufio.ErrTooLong) || !slices.Equal(got, []string{"/proc"}) {
		t.Errorf("Points = %q, %v; want /proc and %v", got, err, bufio.ErrTooLong)
	}
}

func TestReadAndUnder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	table := "1 0 0:1 / /run/boxes/r1 rw - tmpfs t rw\n" +
		"2 1 0:2 / /run/boxes/r10/tmp rw - tmpfs t rw\n" +
		"3 1 0:3 / /run/boxes/r1/tmp rw - tmpfs t rw\n"
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	points, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	got := Under(points, "/run/boxes/r1")
	if want := []string{"/run/boxes/r1", "/run/boxes/r1/tmp"}; !slices.Equal(got, want) {
		t.Errorf("Under = %q, want %q", got, want)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read of no file: %v, want not exist", err)
	}
}

// The mount table of this process reads, and holds its root.
func TestReadSelf(t *testing.T) {
	points, err := Read("/proc/self/mountinfo")
	if errors.Is(err, os.ErrNotExist) {
		needs.Unavailable(t, "no /proc/self/mountinfo: not Linux, or no /proc mounted (mount proc on /proc)")
	}
	if err != nil || !slices.Contains(points, "/") {
		t.Errorf("Read(/proc/self/mountinfo) = %q, %v; want a table with /", points, err)
	}
}

// What the kernel escapes (a space, a tab, a newline and a backslash, as
// seq_file's mangle_path does) comes back as it was.
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{"/a b", `/x\y`, "/t\tn\n", `\040`, "/plain", `/end\04`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			switch c := s[i]; c {
			case ' ', '\t', '\n', '\\':
				fmt.Fprintf(&b, `\%03o`, c)
			default:
				b.WriteByte(c)
			}
		}
		if got := Unescape(b.String()); got != s {
			t.Errorf("Unescape(%q) = %q, want %q", b.String(), got, s)
		}
	})
}
