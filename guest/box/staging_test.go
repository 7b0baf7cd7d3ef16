//go:build linux

package box

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/needs"
)

// stage runs makeStaging for image, failing the test if it blocks, and
// removes what it made.
func stage(t *testing.T, image string) (*staging, error) {
	t.Helper()
	needs.Root(t, "mounting the staging tmpfs")
	type made struct {
		st  *staging
		err error
	}
	done := make(chan made, 1)
	go func() {
		st, err := makeStaging(t.TempDir(), "seed", image, nil, slotIDs(0))
		done <- made{st, err}
	}()
	select {
	case m := <-done:
		if m.st != nil {
			t.Cleanup(func() { m.st.remove() })
		}
		return m.st, m.err
	case <-time.After(5 * time.Second):
		t.Fatal("makeStaging still blocks after 5s")
		return nil, nil
	}
}

// The image's matplotlib cache is copied into MPLCONFIGDIR, its regular
// files only, owned by the program; an image without one gets an empty
// MPLCONFIGDIR.
func TestSeedMPLCopiesTheImagesCache(t *testing.T) {
	image := t.TempDir()
	seed := filepath.Join(image, mplSeed)
	os.MkdirAll(filepath.Join(seed, "subdir"), 0o755)
	os.WriteFile(filepath.Join(seed, "fontlist-v390.json"), []byte(`{"fonts":[]}`), 0o644)
	os.Symlink("/etc/hostname", filepath.Join(seed, "link"))
	unix.Mkfifo(filepath.Join(seed, "fifo"), 0o644)
	st, err := stage(t, image)
	if err != nil {
		t.Fatal(err)
	}
	mpl := filepath.Join(st.tmp, mplConfig)
	entries, _ := os.ReadDir(mpl)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"fontlist-v390.json"}) {
		t.Errorf("MPLCONFIGDIR holds %q, want the one regular file", names)
	}
	var fi unix.Stat_t
	if err := unix.Stat(filepath.Join(mpl, "fontlist-v390.json"), &fi); err != nil || int(fi.Uid) != slotIDs(0).program {
		t.Errorf("the copied file: uid %d, %v; want the program's %d", fi.Uid, err, slotIDs(0).program)
	}
	if _, err := stage(t, t.TempDir()); err != nil {
		t.Errorf("an image without matplotlib: %v", err)
	}
}

// A seed that is a link (to a data folder's mount, say), lies under one,
// or is not a directory refuses the box at once, and says why.
func TestSeedMPLRefusesWhatIsNotAPlainDirectory(t *testing.T) {
	data := t.TempDir() // stands for /run/data/NAME
	os.WriteFile(filepath.Join(data, "private.csv"), []byte("not for this box"), 0o644)
	for _, c := range []struct {
		name  string
		plant func(seed string) error
		why   string
	}{
		{"an absolute link", func(seed string) error { return os.Symlink(data, seed) }, "mplconfig is a symbolic link"},
		{"a relative link out", func(seed string) error { return os.Symlink("../../../..", seed) }, "mplconfig is a symbolic link"},
		{"under an absolute link", func(seed string) error { return swapDir(seed, data) }, "mplconfig is under a symbolic link, /usr/share/pybox"},
		{"under a relative link", func(seed string) error { return swapDir(seed, "../../..") }, "mplconfig is under a symbolic link, /usr/share/pybox"},
		{"a FIFO", func(seed string) error { return unix.Mkfifo(seed, 0o644) }, "mplconfig cannot be opened: not a directory"},
		{"a file too large", func(seed string) error {
			os.Mkdir(seed, 0o755)
			return os.WriteFile(filepath.Join(seed, "big"), make([]byte, mplSeedBytes+1), 0o644)
		}, "mplconfig/big is larger than 4194304 bytes"},
	} {
		image := t.TempDir()
		seed := filepath.Join(image, mplSeed)
		os.MkdirAll(filepath.Dir(seed), 0o755)
		if err := c.plant(seed); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		st, err := stage(t, image)
		if err == nil || !strings.HasSuffix(err.Error(), "image "+image+": /usr/share/pybox/"+c.why) {
			t.Errorf("%s: %v, want it to end %q", c.name, err, c.why)
			continue
		}
		if entries, _ := os.ReadDir(filepath.Join(st.tmp, mplConfig)); len(entries) > 0 {
			t.Errorf("%s: MPLCONFIGDIR holds %d files", c.name, len(entries))
		}
	}
}
