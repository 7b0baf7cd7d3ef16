package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// The erofs superblock sits 1024 bytes into the image (fs/erofs/erofs_fs.h):
// magic (le32) at +0, log2 of the block size (u8) at +12, the number of
// blocks (le32) at +36.
const (
	erofsSuperOffset = 1024
	erofsMagic       = 0xE0F5E1E2
	erofsBlkSzBits   = erofsSuperOffset + 12
	erofsBlocks      = erofsSuperOffset + 36
	erofsSuperEnd    = erofsSuperOffset + 128
)

// ErrCorrupt is wrapped by every VerifyFile failure about the content.
var ErrCorrupt = errors.New("the image is damaged")

// VerifyFile checks that path is a whole erofs image whose sha256 is
// digest (hex): a regular file, with the erofs magic, as long as its
// superblock says, and with the right digest. The cheap checks come
// first so a truncated file is named as such.
func VerifyFile(path, digest string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrCorrupt, path)
	}
	if err := checkSuperblock(f, fi.Size()); err != nil {
		return fmt.Errorf("%w: %s %v", ErrCorrupt, path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	sum, err := readerSHA256(f)
	if err != nil {
		return fmt.Errorf("image: reading %s: %w", path, err)
	}
	if sum != digest {
		return fmt.Errorf("%w: %s has sha256 %s, but its digest is %s (changed after it was built)", ErrCorrupt, path, sum, digest)
	}
	return nil
}

// checkSuperblock reads the superblock's magic and size.
func checkSuperblock(r io.ReaderAt, size int64) error {
	if size < erofsSuperEnd {
		return fmt.Errorf("is %d bytes, too short for an erofs image (truncated)", size)
	}
	sb := make([]byte, erofsSuperEnd)
	if _, err := r.ReadAt(sb, 0); err != nil {
		return fmt.Errorf("cannot be read: %v", err)
	}
	if m := binary.LittleEndian.Uint32(sb[erofsSuperOffset:]); m != erofsMagic {
		return fmt.Errorf("is not an erofs image (magic %#08x at offset 1024, want %#08x)", m, uint32(erofsMagic))
	}
	bits := sb[erofsBlkSzBits]
	if bits < 9 || bits > 16 {
		return fmt.Errorf("has a bad block size (2^%d) in its superblock", bits)
	}
	if want := int64(binary.LittleEndian.Uint32(sb[erofsBlocks:])) << bits; size < want {
		return fmt.Errorf("is truncated: %d bytes, but its superblock says %d", size, want)
	}
	return nil
}
