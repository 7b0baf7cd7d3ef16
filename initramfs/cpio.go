package initramfs

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// Mode bits of a newc header (the st_mode of the entry).
const (
	ModeDir     = 0o040000
	ModeFile    = 0o100000
	ModeCharDev = 0o020000
	ModeSymlink = 0o120000
)

// Entry is one file of the archive.
type Entry struct {
	Name  string // relative, no leading "/", e.g. "dev/console"
	Mode  uint32 // type bits | permission bits
	Data  []byte // file content or symlink target
	Major uint32 // for device nodes
	Minor uint32
}

// ErrBadName is returned for an entry name that is empty, absolute, or
// climbs out of the archive.
var ErrBadName = errors.New("initramfs: bad entry name")

const trailer = "TRAILER!!!"

// Write writes entries as a newc cpio archive, sorted by name, with fixed
// metadata, followed by the trailer.
func Write(w io.Writer, entries []Entry) error {
	sorted := append([]Entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	cw := &countWriter{w: w}
	for i, e := range sorted {
		if err := checkName(e.Name); err != nil {
			return err
		}
		if i > 0 && sorted[i-1].Name == e.Name {
			return fmt.Errorf("%w: %q twice", ErrBadName, e.Name)
		}
		if err := writeEntry(cw, uint32(i+1), e); err != nil {
			return err
		}
	}
	if err := writeEntry(cw, 0, Entry{Name: trailer}); err != nil {
		return err
	}
	// Pad the archive to a multiple of 512 bytes, as cpio(1) does.
	return cw.pad(512)
}

func checkName(name string) error {
	if name == "" || strings.ContainsRune(name, 0) || strings.HasPrefix(name, "/") || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
		return fmt.Errorf("%w: %q", ErrBadName, name)
	}
	return nil
}

// writeEntry writes one header, the NUL-terminated name and the data, each
// padded to four bytes. mtime, uid and gid are zero; the inode is the
// entry's position, so it does not depend on the build host.
func writeEntry(cw *countWriter, ino uint32, e Entry) error {
	nlink := uint32(1)
	if e.Mode&0o170000 == ModeDir {
		nlink = 2
	}
	fields := []uint32{
		ino, e.Mode, 0, 0, nlink, 0, uint32(len(e.Data)),
		0, 0, // dev major, minor
		e.Major, e.Minor, // rdev major, minor
		uint32(len(e.Name) + 1), 0, // name size, check
	}
	hdr := "070701"
	for _, f := range fields {
		hdr += fmt.Sprintf("%08x", f)
	}
	if _, err := io.WriteString(cw, hdr+e.Name+"\x00"); err != nil {
		return err
	}
	if err := cw.pad(4); err != nil {
		return err
	}
	if _, err := cw.Write(e.Data); err != nil {
		return err
	}
	return cw.pad(4)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countWriter) pad(to int64) error {
	if r := c.n % to; r != 0 {
		_, err := c.Write(make([]byte, to-r))
		return err
	}
	return nil
}
