package boot

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

func writeAbout(t *testing.T, dir, content string) {
	t.Helper()
	p := filepath.Join(dir, wire.ImageAboutFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadAbout(t *testing.T) {
	dir := t.TempDir()
	if a, err := readAbout(dir); a != nil || err != nil {
		t.Errorf("an image that says nothing: got %+v, %v; want nil, nil", a, err)
	}
	writeAbout(t, dir, `{"python":"3.13.5","suite":"trixie"}`)
	if a, err := readAbout(dir); err != nil || a == nil || *a != (wire.ImageAbout{Python: "3.13.5", Suite: "trixie"}) {
		t.Errorf("got %+v, %v", a, err)
	}
	writeAbout(t, dir, `{"python":"3.13.5; rm -rf /","suite":"trixie"}`)
	if a, err := readAbout(dir); err == nil {
		t.Errorf("a bad version was accepted: %+v", a)
	}
}

// A link in the image that leads out of it is not followed.
func TestReadAboutStaysInside(t *testing.T) {
	outside := t.TempDir()
	writeAbout(t, outside, `{"python":"3.13.5","suite":"trixie"}`)
	dir := t.TempDir()
	p := filepath.Join(dir, wire.ImageAboutFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, wire.ImageAboutFile), p); err != nil {
		t.Fatal(err)
	}
	if a, err := readAbout(dir); err == nil {
		t.Errorf("followed a link out of the image: %+v", a)
	}
}

// A description that is not a plain file of the image is an error at
// once (MountImages then leaves the image out), never a hang or a read
// of something else.
func TestReadAboutRefusesWhatIsNotAPlainFile(t *testing.T) {
	good := filepath.Join(t.TempDir(), "image.json")
	os.WriteFile(good, []byte(`{"python":"3.13.5","suite":"trixie"}`), 0o644)
	for _, c := range []struct {
		name  string
		plant func(p string) error
		why   string
	}{
		{"an absolute link", func(p string) error { return os.Symlink(good, p) }, "image.json is a symbolic link"},
		{"a relative link out", func(p string) error { return os.Symlink("../../../../image.json", p) }, "image.json is a symbolic link"},
		{"a link to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "image.json is a symbolic link"},
		{"a FIFO", func(p string) error { return unix.Mkfifo(p, 0o644) }, "image.json is not a regular file (a FIFO)"},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o755) }, "image.json is not a regular file (a directory)"},
		{"too large", func(p string) error {
			return os.WriteFile(p, make([]byte, wire.MaxImageAboutBytes+1), 0o644)
		}, "image.json is larger than 4096 bytes"},
		{"under an absolute link", func(p string) error { return swapDir(p, filepath.Dir(good)) }, "image.json is under a symbolic link, /usr/share/pybox"},
		{"under a relative link", func(p string) error { return swapDir(p, "../../..") }, "image.json is under a symbolic link, /usr/share/pybox"},
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, wire.ImageAboutFile)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := c.plant(p); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		done := make(chan error, 1)
		go func() {
			a, err := readAbout(dir)
			if err == nil {
				err = fmt.Errorf("no error, about %+v", a)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if want := "image " + dir + ": /usr/share/pybox/" + c.why; err.Error() != want {
				t.Errorf("%s: %v\nwant %s", c.name, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: readAbout still blocks after 5s", c.name)
		}
	}
}

// swapDir puts a symbolic link to target in place of p's directory.
func swapDir(p, target string) error {
	if err := os.Remove(filepath.Dir(p)); err != nil {
		return err
	}
	return os.Symlink(target, filepath.Dir(p))
}
