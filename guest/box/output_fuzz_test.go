//go:build linux

package box

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"pybox/shared/wire"
)

// FuzzCollectOutputNames puts a file of any name the kernel allows into
// /tmp/output and checks what collection makes of it: a name that comes
// back is a plain name the host can write as it is; one that does not is
// listed escaped, printable and bounded; nothing is lost from the count.
func FuzzCollectOutputNames(f *testing.F) {
	for _, s := range []string{"result.csv", "a\nb", "\xff\xfe", "..x", " lead", "bidi\u202etxt", strings.Repeat("n", 255), "\x1b[31m"} {
		f.Add(s, []byte("data"))
	}
	f.Fuzz(func(t *testing.T, name string, content []byte) {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
			return // the kernel refuses these names itself
		}
		tmp := t.TempDir()
		out := filepath.Join(tmp, "output")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, name), content, 0o644); err != nil {
			t.Skip(err) // e.g. a name over the filesystem's limit
		}
		files, o := collect(tmp, true)
		if n := len(o.Returned) + len(o.NotReturned) + o.NotListed; n != 1 {
			t.Fatalf("one file became %d entries: %+v", n, o)
		}
		for _, fl := range files {
			if !plainName(fl.Name) || fl.Name != name || string(fl.Content) != string(content) {
				t.Fatalf("returned %q (%d bytes) for %q", fl.Name, len(fl.Content), name)
			}
		}
		for _, nr := range o.NotReturned {
			if !utf8.ValidString(nr.Name) || strings.IndexFunc(nr.Name, unicode.IsControl) >= 0 {
				t.Fatalf("not-returned name %q is not safe to show", nr.Name)
			}
			if nr.Name != wire.EscapeName(name) {
				t.Fatalf("not-returned name %q, want %q escaped", nr.Name, name)
			}
		}
	})
}
