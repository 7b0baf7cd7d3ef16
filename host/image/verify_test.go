package image

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pybox/shared/needs"
)

// fakeErofs is the smallest file VerifyFile accepts: a superblock with the
// erofs magic, 4 KiB blocks, and as many blocks as the file holds.
func fakeErofs(blocks int) []byte {
	b := make([]byte, blocks*4096)
	binary.LittleEndian.PutUint32(b[erofsSuperOffset:], erofsMagic)
	b[erofsBlkSzBits] = 12
	binary.LittleEndian.PutUint32(b[erofsBlocks:], uint32(blocks))
	for i := 2048; i < len(b); i++ {
		b[i] = byte(i * 7)
	}
	return b
}

func writeImage(t *testing.T, b []byte) (path, digest string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), ImageFile)
	if err := os.WriteFile(p, b, 0o444); err != nil {
		t.Fatal(err)
	}
	d, err := fileSHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, d
}

func TestVerifyFile(t *testing.T) {
	good := fakeErofs(3)
	p, digest := writeImage(t, good)
	if err := VerifyFile(p, digest); err != nil {
		t.Fatalf("a whole image was refused: %v", err)
	}
	cases := []struct {
		name  string
		bytes func() []byte
		want  string
	}{
		{"truncated", func() []byte { return good[:4096+100] }, "truncated"},
		{"too short", func() []byte { return good[:900] }, "too short"},
		{"empty", func() []byte { return nil }, "too short"},
		{"not erofs", func() []byte {
			b := append([]byte(nil), good...)
			b[erofsSuperOffset] ^= 1
			return b
		}, "not an erofs image"},
		{"one byte changed", func() []byte {
			b := append([]byte(nil), good...)
			b[len(b)-1] ^= 1
			return b
		}, "changed after it was built"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), ImageFile)
			if err := os.WriteFile(p, c.bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			err := VerifyFile(p, digest)
			if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want ErrCorrupt containing %q", err, c.want)
			}
		})
	}
	if err := VerifyFile(filepath.Join(t.TempDir(), "missing"), digest); err == nil {
		t.Error("a missing file was accepted")
	}
	if err := VerifyFile(t.TempDir(), digest); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}

// TestVerifyRealErofs checks the superblock reading against an image
// made by mkfs.erofs, so the offsets are the real ones.
func TestVerifyRealErofs(t *testing.T) {
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		needs.Unavailable(t, "mkfs.erofs is not installed (try: apt-get install erofs-utils, or make deps)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(src, "usr/bin/hello"), []byte(strings.Repeat("hello erofs\n", 5000)), 0o755)
	img := filepath.Join(dir, ImageFile)
	out, err := exec.Command("mkfs.erofs", "-zlz4hc", "-T0", "--all-root", "--quiet", img, src).CombinedOutput()
	if err != nil {
		t.Fatalf("mkfs.erofs: %v\n%s", err, out)
	}
	digest, _ := fileSHA256(img)
	if err := VerifyFile(img, digest); err != nil {
		t.Fatalf("mkfs.erofs's image was refused: %v", err)
	}
	b, _ := os.ReadFile(img)
	os.WriteFile(img, b[:len(b)-1], 0o644)
	if err := VerifyFile(img, digest); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("a truncated mkfs.erofs image: %v, want truncated", err)
	}
}
