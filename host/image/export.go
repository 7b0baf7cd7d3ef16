package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// An exported image is one file: an uncompressed tar (the erofs image is
// compressed already) of three regular files, in this order:
//
//	pybox-image   "pybox-image 1\n": what the file is, and its format version
//	meta.json     the image's meta.json
//	image.erofs   the image; its sha256 is meta.json's digest
//
// Every entry has the same mode, owner (0), and time (the Unix epoch), so
// an image always exports to the same bytes, and the file unpacks with
// any tar.
const (
	formatEntry   = "pybox-image"
	formatVersion = 1
	// ExportExt is the usual ending of an exported image's file name.
	ExportExt = ".pybox-image"
)

// maxMeta bounds meta.json in an exported image; a real one is tens of KiB.
const maxMeta = 4 << 20

func formatLine(v int) string { return fmt.Sprintf("%s %d\n", formatEntry, v) }

// ExportFile writes image name built for arch of the store to path as
// one file (see above), replacing path only once the whole file is
// written and the image read for it matched its digest: a damaged image
// is not exported. Its meta.json says its architecture, so an import
// puts it in the store's place for that architecture.
func ExportFile(home, name, arch, path string) (*Meta, error) {
	m, err := Inspect(home, name, arch)
	if err != nil {
		return nil, err
	}
	src := Path(home, name, arch)
	in, err := os.Open(src)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w: rebuild it with `%s`", name, err, buildCommand(name, arch))
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if fi.Size() != m.Size {
		return nil, fmt.Errorf("%w: %s is %d bytes, but its meta.json says %d: rebuild it with `%s`", ErrCorrupt, src, fi.Size(), m.Size, buildCommand(name, arch))
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("image export: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := writeExport(tmp, m, in); err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, fmt.Errorf("image export: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("image export: %w", err)
	}
	// CreateTemp makes the file 0600; an exported image is for others.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return nil, fmt.Errorf("image export: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, fmt.Errorf("image export: %w", err)
	}
	ok = true
	return m, nil
}

// writeExport writes the three entries, hashing the image as it goes: a
// digest that does not match fails the export (the caller removes what
// was written).
func writeExport(w io.Writer, m *Meta, img io.Reader) error {
	meta, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	meta = append(meta, '\n')
	tw := tar.NewWriter(w)
	entry := func(name string, size int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: time.Unix(0, 0)})
	}
	if err := entry(formatEntry, int64(len(formatLine(formatVersion)))); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, formatLine(formatVersion)); err != nil {
		return err
	}
	if err := entry(MetaFile, int64(len(meta))); err != nil {
		return err
	}
	if _, err := tw.Write(meta); err != nil {
		return err
	}
	if err := entry(ImageFile, m.Size); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tw, h), img); err != nil {
		return err
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != m.Digest {
		return fmt.Errorf("%w: its file has sha256 %s, but its digest is %s (changed after it was built): nothing was exported; rebuild it with `%s`",
			ErrCorrupt, sum, m.Digest, buildCommand(m.Name, m.Arch))
	}
	return tw.Close()
}
