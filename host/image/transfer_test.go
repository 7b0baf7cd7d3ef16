package image

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pybox/host/paths"
	"pybox/shared/archs"
)

// exportFake stores a fake image called name in a new home and exports
// it; it returns the home, the image's meta and the exported file.
func exportFake(t testing.TB, name string, blocks int) (string, *Meta, string) {
	t.Helper()
	home := t.TempDir()
	p := filepath.Join(t.TempDir(), ImageFile)
	b := fakeErofs(blocks)
	if err := os.WriteFile(p, b, 0o444); err != nil {
		t.Fatal(err)
	}
	digest, err := fileSHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	m := &Meta{Name: name, Digest: digest, Size: int64(len(b)), Python: "3.11.2", Suite: "bookworm", Builder: BuilderVersion,
		RecipeHash: strings.Repeat("ab", 32), Recipe: Recipe{Name: name, Suite: "bookworm"},
		Main:     []Package{{Name: "python3", Version: "3.11.2-1+b1"}, {Name: "python3-numpy", Version: "1:1.24.2-1"}, {Name: "wheel:tabulate", Version: "0.9.0"}},
		Packages: []Package{{Name: "python3", Version: "3.11.2-1+b1"}, {Name: "python3-numpy", Version: "1:1.24.2-1"}},
		BuiltAt:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := install(home, m, p); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), name+ExportExt)
	if _, err := ExportFile(home, name, m.Arch, file); err != nil {
		t.Fatal(err)
	}
	return home, m, file
}

// storeEntries lists what is in a store's directory, work files included.
func storeEntries(t *testing.T, home string) []string {
	t.Helper()
	des, _ := os.ReadDir(paths.ImagesDir(home))
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func TestExportImportRoundTrip(t *testing.T) {
	home, m, file := exportFake(t, "stdlib", 3)
	first, _ := os.ReadFile(file)

	// The same image exports to the same bytes.
	again := filepath.Join(t.TempDir(), "again"+ExportExt)
	if _, err := ExportFile(home, "stdlib", archs.X86_64, again); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(again); !bytes.Equal(b, first) {
		t.Error("two exports of one image differ")
	}
	// It is a plain tar: format, meta.json, image.erofs.
	tr := tar.NewReader(bytes.NewReader(first))
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if h.ModTime.Unix() != 0 || h.Uid != 0 || h.Uname != "" {
			t.Errorf("entry %s: time %v, uid %d %q", h.Name, h.ModTime, h.Uid, h.Uname)
		}
	}
	if strings.Join(names, ",") != "pybox-image,meta.json,image.erofs" {
		t.Errorf("entries %v", names)
	}

	other := t.TempDir()
	res, err := ImportFile(other, file, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Already || res.Replaced != "" || res.Meta.Digest != m.Digest {
		t.Errorf("import %+v", res)
	}
	got, err := Inspect(other, "stdlib", archs.X86_64)
	if err != nil || got.Digest != m.Digest || got.Size != m.Size || !got.BuiltAt.Equal(m.BuiltAt) || got.Python != m.Python {
		t.Fatalf("imported meta %+v %v", got, err)
	}
	if err := VerifyFile(Path(other, "stdlib", archs.X86_64), m.Digest); err != nil {
		t.Error(err)
	}
	if es := storeEntries(t, other); len(es) != 1 {
		t.Errorf("work files left in the store: %v", es)
	}
	// Exported again from the importing store: the same file.
	back := filepath.Join(t.TempDir(), "back"+ExportExt)
	if _, err := ExportFile(other, "stdlib", archs.X86_64, back); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(back); !bytes.Equal(b, first) {
		t.Error("the round trip changed the exported file")
	}

	// The same image again changes nothing and says so.
	res, err = ImportFile(other, file, ImportOptions{})
	if err != nil || !res.Already {
		t.Errorf("second import: %+v %v", res, err)
	}

	// Under another name.
	res, err = ImportFile(other, file, ImportOptions{Name: "mine"})
	if err != nil || res.Already {
		t.Fatalf("import --name: %+v %v", res, err)
	}
	if got, err := Inspect(other, "mine", archs.X86_64); err != nil || got.Name != "mine" || got.Digest != m.Digest {
		t.Errorf("imported as mine: %+v %v", got, err)
	}
	if _, err := ImportFile(other, file, ImportOptions{Name: "../x"}); err == nil {
		t.Error("an invalid --name was accepted")
	}
}

func TestImportReplacesOnlyWithForce(t *testing.T) {
	_, _, oldFile := exportFake(t, "data", 2)
	_, newer, newFile := exportFake(t, "data", 3)
	home := t.TempDir()
	old, err := ImportFile(home, oldFile, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ImportFile(home, newFile, ImportOptions{})
	for _, want := range []string{"already has a different image data", "--force", "--name OTHER"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("import over another image: %v, want it to say %q", err, want)
		}
	}
	if m, _ := Inspect(home, "data", archs.X86_64); m.Digest != old.Meta.Digest {
		t.Error("the refused import changed the store")
	}
	// The running VM has the old one attached: it is replaced all the
	// same (the VM keeps its open file), and the caller is told.
	writeState(t, home, os.Getpid(), "data")
	res, err := ImportFile(home, newFile, ImportOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replaced != old.Meta.Digest || !res.InUse {
		t.Errorf("forced import %+v", res)
	}
	if m, _ := Inspect(home, "data", archs.X86_64); m.Digest != newer.Digest {
		t.Error("the forced import did not replace the image")
	}
	if es := storeEntries(t, home); len(es) != 1 {
		t.Errorf("work files left in the store: %v", es)
	}
}

// Every kind of damage is refused before the store changes, and the error
// names the file and what to do.
func TestImportRefusesDamage(t *testing.T) {
	_, m, file := exportFake(t, "stdlib", 3)
	good, _ := os.ReadFile(file)
	imageAt := bytes.Index(good, fakeErofs(3)[:2048+64])
	metaAt := bytes.Index(good, []byte(`"digest"`))
	if imageAt < 0 || metaAt < 0 {
		t.Fatal("cannot find the image or meta.json in the export")
	}
	flip := func(at int) func() []byte {
		return func() []byte {
			b := bytes.Clone(good)
			b[at] ^= 0x20
			return b
		}
	}
	for _, c := range []struct {
		name  string
		bytes func() []byte
		want  string
	}{
		{"a byte of the image", flip(imageAt + 3000), "holds an image with sha256"},
		{"a byte of the superblock", flip(imageAt + erofsSuperOffset), "not an erofs image"},
		{"a digit of meta.json's digest", func() []byte {
			b := bytes.Clone(good)
			at := metaAt + len(`"digest": "`) + 4
			b[at] = map[bool]byte{true: 'a', false: 'b'}[b[at] != 'a']
			return b
		}, "holds an image with sha256"},
		{"cut inside the image", func() []byte { return good[:imageAt+5000] }, "cut short"},
		{"cut before the image", func() []byte { return good[:imageAt-512] }, "ends before its image.erofs"},
		{"not a tar", func() []byte { return bytes.Repeat([]byte("x"), 2048) }, "not an exported pybox image"},
		{"something after the image", func() []byte {
			var buf bytes.Buffer
			buf.Write(good[:len(good)-1024]) // without the end-of-archive blocks
			tw := tar.NewWriter(&buf)
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "extra", Size: 1, Mode: 0o644})
			tw.Write([]byte("x"))
			tw.Close()
			return buf.Bytes()
		}, `holds more than an image ("extra" follows it)`},
		{"another file first", func() []byte {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "meta.json", Size: 2, Mode: 0o644})
			tw.Write([]byte("{}"))
			tw.Close()
			return buf.Bytes()
		}, `holds "meta.json" where "pybox-image" belongs`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad"+ExportExt)
			os.WriteFile(p, c.bytes(), 0o644)
			home := t.TempDir()
			_, err := ImportFile(home, p, ImportOptions{})
			if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("got %v, want ErrCorrupt naming %s and saying %q", err, p, c.want)
			}
			if es := storeEntries(t, home); len(es) != 0 {
				t.Errorf("the refused import left %v in the store", es)
			}
			if fs := filesUnder(t, home); len(fs) != 0 {
				t.Errorf("the refused import left %v", fs)
			}
		})
	}
	// The same image already in the store: a damaged file is still named.
	home := t.TempDir()
	if _, err := ImportFile(home, file, ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "bad"+ExportExt)
	os.WriteFile(p, flip(imageAt+3000)(), 0o644)
	if _, err := ImportFile(home, p, ImportOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a damaged copy of a stored image: %v", err)
	}
	if err := VerifyFile(Path(home, "stdlib", archs.X86_64), m.Digest); err != nil {
		t.Error(err)
	}
}

func TestImportNewerFormat(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	line := formatLine(formatVersion + 1)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: formatEntry, Size: int64(len(line)), Mode: 0o644})
	tw.Write([]byte(line))
	tw.Close()
	p := filepath.Join(t.TempDir(), "new"+ExportExt)
	os.WriteFile(p, buf.Bytes(), 0o644)
	_, err := ImportFile(t.TempDir(), p, ImportOptions{})
	if err == nil || !strings.Contains(err.Error(), "exported by a newer pybox") || !strings.Contains(err.Error(), "upgrade pybox") {
		t.Errorf("got %v", err)
	}
}

// A damaged image in the store is not exported, and nothing is left
// where the file would have gone.
func TestExportRefusesDamagedImage(t *testing.T) {
	home, _, _ := exportFake(t, "stdlib", 3)
	img := Path(home, "stdlib", archs.X86_64)
	os.Chmod(img, 0o644)
	f, _ := os.OpenFile(img, os.O_RDWR, 0)
	f.WriteAt([]byte{'X'}, 5000)
	f.Close()
	dir := t.TempDir()
	_, err := ExportFile(home, "stdlib", archs.X86_64, filepath.Join(dir, "out"+ExportExt))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "pybox image build stdlib") {
		t.Errorf("got %v", err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Errorf("left behind: %v", des)
	}
	if _, err := ExportFile(home, "nothere", archs.X86_64, filepath.Join(dir, "x")); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("exporting a missing image: %v", err)
	}
}

// FuzzImport feeds arbitrary bytes to the importer: it must not panic,
// and whatever it puts in the store is a whole image with its digest.
func FuzzImport(f *testing.F) {
	_, _, file := exportFake(f, "stdlib", 2)
	good, err := os.ReadFile(file)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:1536])
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "in"+ExportExt)
		os.WriteFile(p, data, 0o644)
		home := t.TempDir()
		res, err := ImportFile(home, p, ImportOptions{})
		if err != nil {
			return
		}
		if err := VerifyFile(Path(home, res.Meta.Name, archs.X86_64), res.Meta.Digest); err != nil {
			t.Fatalf("the import stored a bad image: %v", err)
		}
	})
}

// An image of another architecture than this machine's imports, into
// that architecture's place beside the image of the same name, and says
// what it is for; export keeps its architecture.
func TestImportKeepsArch(t *testing.T) {
	home := t.TempDir()
	arm := storeFakeArch(t, home, "stdlib", archs.Arm64)
	file := filepath.Join(t.TempDir(), "stdlib"+ExportExt)
	if _, err := ExportFile(home, "stdlib", archs.Arm64, file); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(mustRead(t, file)))
	var meta []byte
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		if h.Name == MetaFile {
			meta, _ = io.ReadAll(tr)
		}
	}
	if !strings.Contains(string(meta), `"arch": "arm64"`) {
		t.Errorf("the exported meta.json does not say arm64:\n%s", meta)
	}

	other := t.TempDir()
	x86 := storeFakeArch(t, other, "stdlib", archs.X86_64)
	res, err := ImportFile(other, file, ImportOptions{})
	if err != nil {
		t.Fatalf("importing an arm64 stdlib beside an x86_64 one: %v", err)
	}
	if res.Replaced != "" || res.Meta.Arch != archs.Arm64 {
		t.Errorf("import %+v", res)
	}
	if archs.Host() != archs.Arm64 && (len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "pybox vm start --arch arm64")) {
		t.Errorf("notes %q", res.Notes)
	}
	for _, m := range []*Meta{x86, arm} {
		if got, err := Inspect(other, "stdlib", m.Arch); err != nil || got.Digest != m.Digest {
			t.Errorf("%s after the import: %+v, %v", m.Arch, got, err)
		}
	}
	back := filepath.Join(t.TempDir(), "back"+ExportExt)
	if _, err := ExportFile(other, "stdlib", archs.Arm64, back); err != nil {
		t.Fatal(err)
	}
	if a, b := mustRead(t, file), mustRead(t, back); !bytes.Equal(a, b) {
		t.Error("import and export changed the arm64 image's file")
	}
}

// An image exported before images recorded their architecture (no arch
// in its meta.json) is x86_64's.
func TestImportOldExportIsX86(t *testing.T) {
	file := metaExport(t, func(_ *Meta, raw []byte) []byte {
		var fields map[string]any
		json.Unmarshal(raw, &fields)
		delete(fields, "arch")
		b, _ := json.Marshal(fields)
		return b
	})
	p := filepath.Join(t.TempDir(), "old"+ExportExt)
	os.WriteFile(p, file, 0o644)
	home := t.TempDir()
	res, err := ImportFile(home, p, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Meta.Arch != archs.X86_64 {
		t.Errorf("imported as %q", res.Meta.Arch)
	}
	if m, err := Inspect(home, "stdlib", archs.X86_64); err != nil || m.Arch != archs.X86_64 {
		t.Errorf("the store's: %+v, %v", m, err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
