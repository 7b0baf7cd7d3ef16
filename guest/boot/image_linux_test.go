package boot

import (
	"os"
	"path/filepath"
	"testing"

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
