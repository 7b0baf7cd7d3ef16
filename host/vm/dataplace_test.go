package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A data folder may neither hold PyBox's home or image store nor lie
// inside them, however the path reaches there; folders beside them pass.
func TestCheckDataPlaces(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(top, "u", ".local", "share", "pybox")
	store := filepath.Join(top, "store") // the image store, linked from home
	for _, dir := range []string{home, store, filepath.Join(store, "stdlib"), filepath.Join(top, "u", "sales")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(store, filepath.Join(home, "images")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(top, "u"), filepath.Join(top, "link-to-u"))
	for _, c := range []struct {
		folder string
		want   string // "" when the folder is fine
	}{
		{filepath.Join(top, "u", "sales"), ""},
		{filepath.Join(top, "u"), "it contains PyBox's home " + home + ", which the VM would then read into itself; name a folder outside it"},
		{filepath.Join(top, "link-to-u"), "it contains PyBox's home " + home},
		{top, "it contains PyBox's home"},
		{home, "it contains PyBox's home"},
		{filepath.Join(home, "vm"), "it lies inside PyBox's home " + home},
		{store, "it contains PyBox's image store " + store},
		{filepath.Join(store, "stdlib"), "it lies inside PyBox's image store " + store},
		{filepath.Join(home, "images", "stdlib"), "it lies inside PyBox's image store " + store},
		{filepath.Join(top, "u", "sales", "..", ".local"), "it contains PyBox's home"},
	} {
		err := CheckDataPlaces([]DataShare{{Name: "sales", Folder: c.folder}}, home)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.folder, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--data sales="+c.folder+":")):
			t.Errorf("%s: got %v, want an error with %q", c.folder, err, c.want)
		}
	}
}

// A home not made yet is compared where it will be.
func TestCheckDataPlacesHomeNotMade(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	err = CheckDataPlaces([]DataShare{{Name: "all", Folder: top}}, filepath.Join(top, "not", "yet"))
	if err == nil || !strings.Contains(err.Error(), "it contains PyBox's home "+filepath.Join(top, "not", "yet")) {
		t.Errorf("got %v", err)
	}
}
