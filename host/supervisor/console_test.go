package supervisor

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestRotatingLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	os.WriteFile(path, []byte("previous boot\n"), 0o600)
	l, err := openRotatingLog(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path + ".1"); string(b) != "previous boot\n" {
		t.Errorf("the previous boot's log is %q", b)
	}
	line := bytes.Repeat([]byte("x"), 39)
	line = append(line, '\n')
	for i := 0; i < 10; i++ {
		if _, err := l.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	for _, p := range []string{path, path + ".1"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 100 {
			t.Errorf("%s is %d bytes, over the 100 allowed", p, fi.Size())
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %04o", p, fi.Mode().Perm())
		}
	}
}
