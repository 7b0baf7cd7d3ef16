package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pybox/host/image"
	"pybox/host/paths"
	"pybox/shared/archs"
)

func TestImageHelpAndUsage(t *testing.T) {
	for name, c := range imageCommands {
		out, code := capture(t, func() int { return c.run([]string{"--help"}) })
		if code != exitOK || !strings.Contains(out, "usage: pybox image "+name) {
			t.Errorf("pybox image %s --help: exit %d, output %q", name, code, out)
		}
	}
	if out, code := capture(t, func() int { return imageMain([]string{"--help"}) }); code != exitOK || !strings.Contains(out, "build") {
		t.Errorf("pybox image --help: %d %q", code, out)
	}
	t.Setenv("PYBOX_HOME", t.TempDir())
	t.Setenv("PYBOX_CACHE", t.TempDir())
	foreign := archs.Arm64
	if archs.Host() == archs.Arm64 {
		foreign = archs.X86_64
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"build"}, exitUsage, "one NAME"},
		{[]string{"build", "stdlib", "--apt", "python3-tabulate"}, exitUsage, "built-in image"},
		{[]string{"build", "data", "--from", "stdlib"}, exitUsage, "built-in image"},
		{[]string{"build", "../etc", "--apt", "python3-tabulate"}, exitFailure, "image name"},
		{[]string{"build", "tools", "--apt", "--yes"}, exitFailure, "apt package"},
		{[]string{"build", "tools", "--add", "/etc/hostname:/tmp/x"}, exitFailure, "mounted over"},
		{[]string{"build", "stdlib", "--suite", "sid"}, exitUsage, "use bookworm or trixie"},
		{[]string{"build", "tools", "--suite", "bullseye"}, exitUsage, "use bookworm or trixie"},
		{[]string{"build", "tools", "--mirror", "deb.debian.org/debian"}, exitUsage, "http(s) address"},
		{[]string{"inspect", "data"}, exitFailure, "pybox image build data"},
		{[]string{"build", "stdlib", "--arch", "sparc"}, exitUsage, "use x86_64 or arm64"},
		{[]string{"inspect", "data", "--arch", foreign}, exitFailure, "pybox image build data --arch " + foreign},
		{[]string{"rm", "stdlib", "--arch", foreign}, exitFailure, "not built for " + foreign},
		{[]string{"export", "stdlib", "x.pybox-image", "--arch", foreign}, exitFailure, "pybox image build stdlib --arch " + foreign},
		{[]string{"rm", "nothing"}, exitFailure, "not built"},
		{[]string{"list"}, exitOK, "no images"},
		{[]string{"frobnicate"}, exitUsage, "unknown command"},
	} {
		out, code := capture(t, func() int { return imageMain(c.args) })
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("pybox image %v: exit %d, output %q; want exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
}

// A VM start finds the images of its own architecture: one the store has
// only for another is refused, saying so and how to build it.
func TestStoreImagesArch(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(paths.ImagesDir(home), "stdlib") // an x86_64 image, as built before images had an arch
	os.MkdirAll(dir, 0o755)
	meta, _ := json.Marshal(image.Meta{Name: "stdlib", Digest: strings.Repeat("ab", 32), Size: 8192, Python: "3.13.5", Suite: "trixie"})
	os.WriteFile(filepath.Join(dir, image.MetaFile), meta, 0o644)
	os.WriteFile(filepath.Join(dir, image.ImageFile), make([]byte, 8192), 0o444)

	_, err := storeImages(home, archs.Arm64, []string{"stdlib"})
	want := "image stdlib is built for x86_64, this VM is arm64: build it with `pybox image build stdlib --arch arm64`"
	if archs.Host() == archs.Arm64 {
		want = "image stdlib is built for x86_64, this VM is arm64: build it with `pybox image build stdlib`"
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant %q", err, want)
	}
	// With no names an arm64 VM boots without images, and says so.
	out, _ := capture(t, func() int {
		ims, err := storeImages(home, archs.Arm64, nil)
		if err != nil || len(ims) != 0 {
			t.Errorf("no names: %v, %v", ims, err)
		}
		return 0
	})
	if !strings.Contains(out, "no image is built for arm64") {
		t.Errorf("no names: %q", out)
	}
	// The x86_64 VM gets it (the file is no erofs: refused as damaged,
	// which shows that it was found).
	if _, err := storeImages(home, archs.X86_64, []string{"stdlib"}); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("x86_64: %v", err)
	}
}

// `pybox image list` shows each image's architecture.
func TestImageListArch(t *testing.T) {
	entries := []image.Entry{
		{Meta: image.Meta{Name: "stdlib", Arch: archs.Arm64, Digest: strings.Repeat("ab", 32), Python: "3.13.5", Suite: "trixie", BuiltAt: time.Unix(0, 0)}},
		{Meta: image.Meta{Name: "stdlib", Arch: archs.X86_64, Digest: strings.Repeat("cd", 32), Python: "3.13.5", Suite: "trixie", BuiltAt: time.Unix(0, 0)}},
	}
	var b bytes.Buffer
	printImages(&b, entries)
	lines := strings.Split(b.String(), "\n")
	if f := strings.Fields(lines[0]); len(f) < 2 || f[1] != "ARCH" {
		t.Fatalf("header %q", lines[0])
	}
	for i, want := range []string{"arm64", "x86_64"} {
		if f := strings.Fields(lines[i+1]); len(f) < 2 || f[1] != want {
			t.Errorf("row %d: %q, want arch %s", i, lines[i+1], want)
		}
	}
}
