package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"pybox/host/paths"
	"pybox/shared/archs"
	"pybox/shared/wire"
)

// ImportOptions say how to import an exported image.
type ImportOptions struct {
	// Name stores the image under this name instead of the file's.
	Name string
	// Force replaces a different image of the same name in the store.
	Force bool
}

// Imported says what an import did.
type Imported struct {
	Meta *Meta
	// Already is set when the store held this very image (same name and
	// digest): nothing was changed.
	Already bool
	// Replaced is the digest of the image it replaced, "" when none.
	Replaced string
	// InUse is set when the running VM still has the replaced image
	// attached: it uses the new one from its next start.
	InUse bool
	// Notes are things worth saying, such as an image built by a newer pybox.
	Notes []string
}

// ImportFile reads an exported image (see ExportFile) and puts it in the
// store. The file is untrusted: images are passed between people.
// Everything in it is checked before the store changes: the format,
// meta.json (every string, see checkMeta), the image's size (a plain
// entry as long as meta.json says, at most maxImageSize, known before a
// byte is written), its erofs superblock and its sha256 against
// meta.json's digest; a refused import leaves nothing behind. A
// different image of the same name is replaced only with Force.
// Importing needs no root and no mmdebstrap: it writes only under home.
// An image of any architecture imports, into the store's place for its
// architecture (an exported image from before images recorded theirs is
// x86_64's).
func ImportFile(home, path string, o ImportOptions) (*Imported, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("image import: %w", err)
	}
	defer f.Close()
	in := &importer{home: home, file: path, tr: tar.NewReader(f), o: o}
	return in.run()
}

type importer struct {
	home string
	file string
	tr   *tar.Reader
	o    ImportOptions
}

// damaged is the error for a file that is not what it claims.
func (in *importer) damaged(format string, a ...any) error {
	return fmt.Errorf("%w: %s %s: nothing was imported; get a new copy of it, or export the image again (`pybox image export NAME FILE`)",
		ErrCorrupt, in.file, fmt.Sprintf(format, a...))
}

func (in *importer) run() (*Imported, error) {
	if err := in.readFormat(); err != nil {
		return nil, err
	}
	m, err := in.readMeta()
	if err != nil {
		return nil, err
	}
	res := &Imported{Meta: m}
	if m.Arch != archs.Host() {
		res.Notes = append(res.Notes, fmt.Sprintf("image %s is built for %s, not for this %s machine: a VM started with `pybox vm start --arch %s` can use it",
			m.Name, m.Arch, archs.Host(), m.Arch))
	}
	if m.Builder > BuilderVersion {
		res.Notes = append(res.Notes, fmt.Sprintf("image %s was built by a newer pybox (image builder %d; this pybox's is %d): if it misbehaves, upgrade pybox",
			m.Name, m.Builder, BuilderVersion))
	}
	if in.o.Name != "" {
		if err := wire.CheckImageName(in.o.Name); err != nil {
			return nil, fmt.Errorf("image import: %w", err)
		}
		m.Name = in.o.Name
	}
	old, err := in.existing(m)
	if err != nil {
		return nil, err
	}
	// The same image again: read it all the same, so a damaged file is
	// named as such, but write nothing.
	same := old != nil && old.Digest == m.Digest
	tmp, err := in.readImage(m, !same)
	if tmp != "" {
		defer os.Remove(tmp)
	}
	if err != nil {
		return nil, err
	}
	if err := in.end(); err != nil {
		return nil, err
	}
	if same {
		res.Already = true
		return res, nil
	}
	if old != nil {
		res.Replaced = old.Digest
	}
	used, err := InUse(in.home, m.Arch)
	if err != nil {
		return nil, err
	}
	res.InUse = used[m.Name] && old != nil
	if err := install(in.home, m, tmp); err != nil {
		return nil, err
	}
	return res, nil
}

// maxImageSize bounds the image an import accepts. Its digest can only be
// checked once every byte is written, so the size a file claims is what a
// hostile file can make an import write; the data image is about 250 MiB
// and an image with many more packages a few GiB, so this refuses only
// files that no pybox build made.
const maxImageSize = 16 << 30

// next reads the next entry's header, which must be the regular file name
// stored plainly. archive/tar expands a sparse entry (GNU type 'S', or
// GNU.sparse.* records in a PAX header) to the size it claims from a few
// bytes of file; ExportFile never writes one, so none is read.
func (in *importer) next(name string) (*tar.Header, error) {
	h, err := in.tr.Next()
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, in.damaged("ends before its %s (cut short?)", name)
	case err != nil:
		return nil, fmt.Errorf("%w: %s is not an exported pybox image (%v): make one with `pybox image export NAME FILE`", ErrCorrupt, in.file, err)
	case isSparse(h):
		return nil, in.damaged("holds %q as a sparse file, which pybox never writes", h.Name)
	case h.Name != name:
		return nil, fmt.Errorf("%w: %s is not an exported pybox image (it holds %q where %q belongs): make one with `pybox image export NAME FILE`",
			ErrCorrupt, in.file, h.Name, name)
	case h.Typeflag != tar.TypeReg:
		return nil, in.damaged("holds %s as tar type %q, not as a regular file", name, h.Typeflag)
	}
	return h, nil
}

// isSparse says whether h is a sparse entry of either kind.
func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// readFormat checks the first entry: what the file is, and a format this
// pybox reads.
func (in *importer) readFormat() error {
	h, err := in.next(formatEntry)
	if err != nil {
		return err
	}
	if h.Size > 64 {
		return in.damaged("has a %d-byte %s entry", h.Size, formatEntry)
	}
	b, err := io.ReadAll(in.tr)
	if err != nil {
		return in.damaged("cannot be read: %v", err)
	}
	v, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(string(b), formatEntry+" "), "\n"))
	switch {
	case err != nil || !strings.HasPrefix(string(b), formatEntry+" "):
		return in.damaged("does not say its format (%q)", b)
	case v > formatVersion:
		return fmt.Errorf("image import: %s was exported by a newer pybox (format %d; this pybox reads format %d): upgrade pybox, then import it", in.file, v, formatVersion)
	case v != formatVersion:
		return in.damaged("says format %d, which no pybox writes", v)
	}
	return nil
}

func (in *importer) readMeta() (*Meta, error) {
	h, err := in.next(MetaFile)
	if err != nil {
		return nil, err
	}
	if h.Size > maxMeta {
		return nil, in.damaged("has a %d-byte %s (at most %d)", h.Size, MetaFile, maxMeta)
	}
	b, err := io.ReadAll(in.tr)
	if err != nil {
		return nil, in.damaged("cannot be read: %v", err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, in.damaged("has a %s that is not valid: %v", MetaFile, err)
	}
	if err := checkMeta(&m, b); err != nil {
		return nil, in.damaged("has a %s that is not valid: %v", MetaFile, err)
	}
	m.defaults()
	if m.Size <= 0 || m.Size > maxImageSize {
		return nil, in.damaged("has a %s that gives the image %d bytes; pybox imports images of 1 byte to %d GiB", MetaFile, m.Size, maxImageSize>>30)
	}
	return &m, nil
}

// existing returns the store's image of m's name (nil when none), and
// refuses to go on when it is a different one and Force is not set.
func (in *importer) existing(m *Meta) (*Meta, error) {
	old, err := Inspect(in.home, m.Name, m.Arch)
	switch {
	case errors.Is(err, ErrNotBuilt):
		return nil, nil
	case err != nil && !in.o.Force:
		return nil, fmt.Errorf("image import: the store's image %s cannot be read (%v): replace it with `pybox image import %s --force`", m.Name, err, in.file)
	case err != nil:
		return &Meta{Name: m.Name}, nil
	case old.Digest != m.Digest && !in.o.Force:
		return nil, fmt.Errorf("image import: the store already has a different image %s (sha256 %.12s, built %s) than %s (sha256 %.12s, built %s): nothing was imported; "+
			"to replace it: `pybox image import %s --force`; to keep both: `pybox image import %s --name OTHER`",
			m.Name, old.Digest, old.BuiltAt.Format("2006-01-02"), in.file, m.Digest, m.BuiltAt.Format("2006-01-02"), in.file, in.file)
	}
	return old, nil
}

// readImage reads the image entry, checking its size, erofs superblock
// and sha256 on the way. With keep it copies the image to a new file
// beside the store and returns that file's path; nothing reaches the
// store here, and on any error nothing is left. The file is read once.
func (in *importer) readImage(m *Meta, keep bool) (string, error) {
	h, err := in.next(ImageFile)
	if err != nil {
		return "", err
	}
	// The entry is as long as meta.json says, which is at most
	// maxImageSize: that bounds what is written before the digest is known.
	if h.Size != m.Size {
		return "", in.damaged("holds a %d-byte image, but its %s says %d bytes", h.Size, MetaFile, m.Size)
	}
	if !keep {
		return "", in.copyImage(io.Discard, m)
	}
	dir := paths.ImagesDir(in.home)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("image import: %w", err)
	}
	tmp := filepath.Join(dir, ".import-"+dirName(m.Name, m.Arch)+"-"+randomSuffix())
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", fmt.Errorf("image import: %w", err)
	}
	err = in.copyImage(out, m)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("image import: %w", cerr)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// copyImage copies the image entry to w, hashing it on the way. The
// superblock is checked before the first byte is written, so a file
// that holds no erofs image writes nothing; the sha256 can only be
// checked at the end, and the caller removes what was written when it
// does not match.
func (in *importer) copyImage(w io.Writer, m *Meta) error {
	head := make([]byte, min(erofsSuperEnd, m.Size))
	if _, err := io.ReadFull(in.tr, head); err != nil {
		return in.readFailed(err)
	}
	if err := checkSuperblock(bytes.NewReader(head), m.Size); err != nil {
		return in.damaged("holds an image that %v", err)
	}
	h := sha256.New()
	src := &errReader{r: io.MultiReader(bytes.NewReader(head), in.tr)}
	if _, err := io.Copy(io.MultiWriter(w, h), src); err != nil {
		if src.err != nil {
			return in.readFailed(src.err)
		}
		return fmt.Errorf("image import: writing the image: %w: nothing was imported; make room for its %s in %s and import it again",
			err, mib(m.Size), paths.ImagesDir(in.home))
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != m.Digest {
		return in.damaged("holds an image with sha256 %s, but its %s says %s", sum, MetaFile, m.Digest)
	}
	return nil
}

// readFailed is the error for an image entry that could not be read whole.
func (in *importer) readFailed(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return in.damaged("is cut short inside its image")
	}
	return in.damaged("cannot be read inside its image: %v", err)
}

// errReader keeps the error its reader returned, so that a failed copy
// can tell a damaged file from a full disk.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// end checks that nothing follows the image.
func (in *importer) end() error {
	h, err := in.tr.Next()
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return in.damaged("is damaged after its image: %v", err)
	}
	return in.damaged("holds more than an image (%q follows it)", h.Name)
}
