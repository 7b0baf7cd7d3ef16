package image

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"pybox/shared/archs"
)

// filesUnder lists every file under dir (the store, its work files and
// any temporary file included), with its size.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			fi, _ := d.Info()
			out = append(out, fmt.Sprintf("%s (%d bytes)", p, fi.Size()))
		}
		return nil
	})
	return out
}

// headOfExport is a tar of the format entry and meta.json, without its
// end: what an exported file holds before its image entry.
func headOfExport(t *testing.T, meta []byte) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		b    []byte
	}{{formatEntry, []byte(formatLine(formatVersion))}, {MetaFile, meta}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Size: int64(len(e.b)), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.b)
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// rawHeader is a tar header block written by hand (archive/tar writes no
// sparse entry); patch sets the fields a test needs before the checksum.
func rawHeader(name string, typeflag byte, size int64, gnu bool, patch func(b []byte)) []byte {
	b := make([]byte, 512)
	copy(b, name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], "00000000000\x00")
	b[156] = typeflag
	if gnu {
		copy(b[257:], "ustar  \x00")
	} else {
		copy(b[257:], "ustar\x0000")
	}
	if patch != nil {
		patch(b)
	}
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// paxRecords is the data of a PAX extended header.
func paxRecords(kv ...string) []byte {
	var b []byte
	for i := 0; i < len(kv); i += 2 {
		// A record is "LEN KEY=VALUE\n", LEN counting its own digits.
		rec := " " + kv[i] + "=" + kv[i+1] + "\n"
		n := len(rec) + 1
		for len(rec)+len(strconv.Itoa(n)) != n {
			n = len(rec) + len(strconv.Itoa(n))
		}
		b = append(b, strconv.Itoa(n)+rec...)
	}
	return b
}

// padded is b padded with zeros to a whole number of tar blocks.
func padded(b []byte) []byte {
	return append(b, make([]byte, (512-len(b)%512)%512)...)
}

// sparseMeta is the meta.json of a fake export whose image is claimed
// to be size bytes.
func sparseMeta(t *testing.T, size int64) []byte {
	t.Helper()
	_, m, _ := exportFake(t, "stdlib", 1)
	m.Size = size
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// importRefused imports file into a new home and checks that it is
// refused as damaged, saying want, and that nothing at all was written.
func importRefused(t *testing.T, file []byte, want string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hostile"+ExportExt)
	if err := os.WriteFile(p, file, 0o644); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	start := time.Now()
	_, err := ImportFile(home, p, ImportOptions{})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the refusal took %v: the importer read the image", took)
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want ErrCorrupt saying %q", err, want)
	}
	if strings.ContainsRune(err.Error(), 0x1b) {
		t.Errorf("the error holds a raw ESC: %q", err)
	}
	if fs := filesUnder(t, home); len(fs) != 0 {
		t.Errorf("the refused import left %v", fs)
	}
}

// A sparse image entry makes a few KiB of file claim gigabytes: it is
// refused from its header, before a byte is written.
func TestImportRefusesSparseImage(t *testing.T) {
	const claimed = 15 << 30 // under maxImageSize: only sparseness refuses it
	data := padded(fakeErofs(1)[:2048])
	t.Run("PAX GNU.sparse records", func(t *testing.T) {
		buf := headOfExport(t, sparseMeta(t, claimed))
		recs := paxRecords("GNU.sparse.name", ImageFile, "GNU.sparse.size", fmt.Sprint(claimed),
			"GNU.sparse.numblocks", "1", "GNU.sparse.map", fmt.Sprintf("0,%d", len(data)))
		buf.Write(rawHeader("PaxHeaders/"+ImageFile, tar.TypeXHeader, int64(len(recs)), false, nil))
		buf.Write(padded(recs))
		buf.Write(rawHeader("GNUSparseFile.0/"+ImageFile, tar.TypeReg, int64(len(data)), false, nil))
		buf.Write(data)
		buf.Write(make([]byte, 1024))
		if buf.Len() > 16<<10 {
			t.Fatalf("the hostile file is %d bytes", buf.Len())
		}
		// archive/tar does read it as a regular file of the claimed size.
		tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
		tr.Next()
		tr.Next()
		if h, err := tr.Next(); err != nil || h.Typeflag != tar.TypeReg || h.Size != claimed {
			t.Fatalf("the hand-made entry reads as %+v, %v", h, err)
		}
		importRefused(t, buf.Bytes(), `holds "image.erofs" as a sparse file`)
	})
	t.Run("GNU sparse type", func(t *testing.T) {
		const gnuClaimed = 4 << 30 // what the header's octal field holds
		buf := headOfExport(t, sparseMeta(t, gnuClaimed))
		buf.Write(rawHeader(ImageFile, tar.TypeGNUSparse, int64(len(data)), true, func(b []byte) {
			copy(b[386:], fmt.Sprintf("%011o\x00%011o\x00", 0, len(data))) // the one data region
			copy(b[483:], fmt.Sprintf("%011o\x00", gnuClaimed))            // the size it expands to
		}))
		buf.Write(data)
		buf.Write(make([]byte, 1024))
		tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
		tr.Next()
		tr.Next()
		if h, err := tr.Next(); err != nil || h.Typeflag != tar.TypeGNUSparse || h.Size != gnuClaimed {
			t.Fatalf("the hand-made entry reads as %+v, %v", h, err)
		}
		importRefused(t, buf.Bytes(), `holds "image.erofs" as a sparse file`)
	})
	t.Run("sparse meta.json", func(t *testing.T) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: formatEntry, Size: int64(len(formatLine(formatVersion))), Mode: 0o644})
		tw.Write([]byte(formatLine(formatVersion)))
		tw.Flush()
		recs := paxRecords("GNU.sparse.name", MetaFile, "GNU.sparse.size", "4096", "GNU.sparse.numblocks", "1", "GNU.sparse.map", "0,512")
		buf.Write(rawHeader("PaxHeaders/"+MetaFile, tar.TypeXHeader, int64(len(recs)), false, nil))
		buf.Write(padded(recs))
		buf.Write(rawHeader("GNUSparseFile.0/"+MetaFile, tar.TypeReg, 512, false, nil))
		buf.Write(padded([]byte("{}")))
		buf.Write(make([]byte, 1024))
		importRefused(t, buf.Bytes(), `holds "meta.json" as a sparse file`)
	})
}

// The size meta.json gives is bounded, and the image entry must have it:
// both are known before anything is written.
func TestImportRefusesWrongSizes(t *testing.T) {
	img := fakeErofs(2)
	t.Run("over the ceiling", func(t *testing.T) {
		buf := headOfExport(t, sparseMeta(t, 1<<40))
		buf.Write(rawHeader(ImageFile, tar.TypeReg, int64(len(img)), false, nil))
		buf.Write(img)
		buf.Write(make([]byte, 1024))
		importRefused(t, buf.Bytes(), "gives the image 1099511627776 bytes; pybox imports images of 1 byte to 16 GiB")
	})
	t.Run("entry larger than meta.json says", func(t *testing.T) {
		buf := headOfExport(t, sparseMeta(t, int64(len(img))-4096))
		buf.Write(rawHeader(ImageFile, tar.TypeReg, int64(len(img)), false, nil))
		buf.Write(img)
		buf.Write(make([]byte, 1024))
		importRefused(t, buf.Bytes(), "holds a 8192-byte image, but its meta.json says 4096 bytes")
	})
	t.Run("entry smaller than meta.json says", func(t *testing.T) {
		buf := headOfExport(t, sparseMeta(t, 10<<30))
		buf.Write(rawHeader(ImageFile, tar.TypeReg, int64(len(img)), false, nil))
		buf.Write(img)
		buf.Write(make([]byte, 1024))
		importRefused(t, buf.Bytes(), "holds a 8192-byte image, but its meta.json says 10737418240 bytes")
	})
	t.Run("a link where the image belongs", func(t *testing.T) {
		buf := headOfExport(t, sparseMeta(t, int64(len(img))))
		buf.Write(rawHeader(ImageFile, tar.TypeSymlink, 0, false, func(b []byte) { copy(b[157:], "/dev/zero") }))
		buf.Write(make([]byte, 1024))
		importRefused(t, buf.Bytes(), "holds image.erofs as tar type '2', not as a regular file")
	})
	t.Run("wrong digest", func(t *testing.T) {
		_, m, _ := exportFake(t, "stdlib", 2)
		m.Digest = strings.Repeat("0", 64)
		meta, _ := json.Marshal(m)
		buf := headOfExport(t, meta)
		buf.Write(rawHeader(ImageFile, tar.TypeReg, int64(len(img)), false, nil))
		buf.Write(img)
		buf.Write(make([]byte, 1024))
		importRefused(t, buf.Bytes(), "holds an image with sha256")
	})
}

// metaExport is an export of a fake image whose meta.json is what edit
// makes of a good one's.
func metaExport(t *testing.T, edit func(m *Meta, raw []byte) []byte) []byte {
	t.Helper()
	home, m, _ := exportFake(t, "stdlib", 2)
	img, err := os.ReadFile(Path(home, "stdlib", archs.X86_64))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(m)
	meta := edit(m, raw)
	buf := headOfExport(t, meta)
	buf.Write(rawHeader(ImageFile, tar.TypeReg, int64(len(img)), false, nil))
	buf.Write(padded(img))
	buf.Write(make([]byte, 1024))
	return buf.Bytes()
}

// A meta.json string that breaks the rule it is made by, or holds a
// terminal control anywhere, is refused at import with the field named.
func TestImportRefusesHostileMeta(t *testing.T) {
	const osc52 = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaAo=\x07"
	edit := func(f func(m *Meta)) func(*Meta, []byte) []byte {
		return func(m *Meta, _ []byte) []byte {
			f(m)
			b, _ := json.Marshal(m)
			return b
		}
	}
	for _, c := range []struct {
		name string
		edit func(*Meta, []byte) []byte
		want string
	}{
		{"package name", edit(func(m *Meta) { m.Packages[1].Name = "python3-numpy" + osc52 }), "packages[1].name"},
		{"main package name", edit(func(m *Meta) { m.Main[0].Name = osc52 }), "main_packages[0].name"},
		{"package version", edit(func(m *Meta) { m.Packages[0].Version = "1.0\t" }), "packages[0].version"},
		{"wheel version", edit(func(m *Meta) { m.Main[2].Version = "0.9" + osc52 }), "main_packages[2]"},
		{"python version", edit(func(m *Meta) { m.Python = "3.11.2" + osc52 }), "python: python version"},
		{"suite", edit(func(m *Meta) { m.Suite = "bookworm\u202e" }), "suite"},
		{"arch", edit(func(m *Meta) { m.Arch = "arm64" + osc52 }), "arch: architecture"},
		{"arch as a path", edit(func(m *Meta) { m.Arch = "../../etc" }), "arch: architecture"},
		{"strip per_arch", edit(func(m *Meta) { m.Recipe.Strip.PerArch = map[string][]string{"../x": {"gcc"}} }), "recipe: image: strip list: architecture"},
		{"base name", edit(func(m *Meta) { m.Base = &BaseRef{Name: "stdlib\n", Digest: m.Digest} }), "base.name"},
		{"apt package", edit(func(m *Meta) { m.AptPackages = []string{"--allow-unauthenticated"} }), "apt_packages[0]"},
		{"preload", edit(func(m *Meta) { m.Preload = []string{"os;" + osc52} }), "preload[0]"},
		{"recipe apt", edit(func(m *Meta) { m.Recipe.Apt = []string{"x" + osc52} }), "recipe: image: apt package"},
		{"recipe summary", edit(func(m *Meta) { m.Recipe.Summary = "numpy " + osc52 }), "recipe.summary"},
		{"check", edit(func(m *Meta) { m.Checks = []string{"import os\u0085"} }), "checks[0]"},
		{"recipe hash", edit(func(m *Meta) { m.RecipeHash = "" }), "recipe_hash"},
		{"a field this pybox does not know", func(_ *Meta, raw []byte) []byte {
			q, _ := json.Marshal(osc52)
			return append(raw[:len(raw)-1], `,"notes":["fine",`+string(q)+`]}`...)
		}, "notes[1]"},
		{"a key", func(_ *Meta, raw []byte) []byte {
			return append(raw[:len(raw)-1], `,"x\u001b[2J":1}`...)
		}, "the key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			importRefused(t, metaExport(t, c.edit), "has a meta.json that is not valid: "+c.want)
		})
	}
}

// What real images hold imports: Python code with newlines in the
// recipe, wheels among the main packages, a suite this pybox does not
// build from (a newer pybox's).
func TestImportAcceptsRealMeta(t *testing.T) {
	file := metaExport(t, func(m *Meta, _ []byte) []byte {
		m.Suite, m.Recipe.Suite = "forky", "forky"
		m.Recipe.Warm = "import io\nimport numpy\n\tpass"
		m.Recipe.Summary = "Zahlen für alle — 数値 😀"
		m.Wheels = []Wheel{{File: "tabulate-0.9.0-py3-none-any.whl", SHA256: strings.Repeat("cd", 32)}}
		m.AptPackages = []string{"python3-tabulate=0.9.0-1"}
		m.Preload = []string{"matplotlib.pyplot"}
		b, _ := json.Marshal(m)
		return b
	})
	p := filepath.Join(t.TempDir(), "good"+ExportExt)
	os.WriteFile(p, file, 0o644)
	home := t.TempDir()
	res, err := ImportFile(home, p, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := Inspect(home, "stdlib", archs.X86_64); err != nil || m.Suite != "forky" || m.Recipe.Warm != res.Meta.Recipe.Warm {
		t.Errorf("imported meta %+v %v", m, err)
	}
}
