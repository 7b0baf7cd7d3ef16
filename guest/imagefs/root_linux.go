package imagefs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// resolve keeps a path inside the image's own file system: never above
// its root, no symbolic link followed anywhere on the path (magic links
// of /proc included), and no mount crossed, so nothing mounted inside the
// image's directory in the agent is reached through it.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openFlags open without blocking: O_NONBLOCK makes the open of a FIFO
// or device return at once (the type is checked after; the guest mounts
// images nodev, so a device node there does not open at all), and
// O_NOCTTY keeps a terminal from becoming the agent's. Reads of a
// regular file ignore O_NONBLOCK.
const openFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// What was wrong with a file, for errors.Is; an [*Error] says it in words.
var (
	ErrName       = errors.New("imagefs: not a path inside the image")
	ErrSymlink    = errors.New("imagefs: symbolic link")
	ErrMount      = errors.New("imagefs: crosses a mount point")
	ErrNotRegular = errors.New("imagefs: not a regular file")
	ErrTooLarge   = errors.New("imagefs: larger than allowed")
)

// Error is a file of an image that was not read, and why.
type Error struct {
	Root string // the image's root directory, as the agent sees it
	Name string // the path inside the image, from its root
	Why  string // what was wrong, said of the file: "is a symbolic link"
	Err  error  // one of the Err values, or the system call's error
}

func (e *Error) Error() string { return "image " + e.Root + ": /" + e.Name + " " + e.Why }

func (e *Error) Unwrap() error { return e.Err }

// Root is the root directory of a mounted image, held open: every path
// is resolved from it.
type Root struct {
	dir string
	fd  int
}

// Open opens the root of the image mounted at dir. dir itself is the
// agent's own path and is trusted; nothing below it is.
func Open(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("image %s: open its root: %w", dir, &os.SyscallError{Syscall: "open", Err: err})
	}
	return &Root{dir: dir, fd: fd}, nil
}

// Close closes the root.
func (r *Root) Close() error { return unix.Close(r.fd) }

// ReadFile reads the regular file name (a path inside the image, with or
// without a leading slash), refusing one larger than limit bytes.
func (r *Root) ReadFile(name string, limit int64) ([]byte, error) {
	var b bytes.Buffer
	if _, err := r.Copy(&b, name, limit, nil); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Copy writes the regular file name to w through buf (nil: one of its
// own) and says how many bytes it wrote. A file larger than limit is
// refused before a byte is read; one that grew past it since is read no
// further than limit+1 bytes, and refused as well.
func (r *Root) Copy(w io.Writer, name string, limit int64, buf []byte) (int64, error) {
	f, rel, err := r.openFile(name, limit)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// Neither side offers a shortcut (LimitReader has no WriteTo,
	// onlyWriter hides ReadFrom), so the copy goes through buf and stops
	// at the limit.
	n, err := io.CopyBuffer(onlyWriter{w}, io.LimitReader(f, limit+1), buf)
	if err != nil {
		return n, &Error{Root: r.dir, Name: rel, Why: "cannot be read: " + err.Error(), Err: err}
	}
	if n > limit {
		return n, r.tooLarge(rel, limit)
	}
	return n, nil
}

// File is a regular file read from a directory of an image.
type File struct {
	Name string // its name in the directory
	Data []byte
}

// ReadDir reads the regular files directly in the directory name, in
// the order of their names: at most maxEntries entries of any kind, and
// maxBytes in all. Entries that are symbolic links, directories or
// anything else but a regular file are left out; a file that does not
// fit in what is left of maxBytes is refused.
func (r *Root) ReadDir(name string, maxEntries int, maxBytes int64) ([]File, error) {
	fd, rel, err := r.open(name, unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	dir := os.NewFile(uintptr(fd), r.dir+"/"+rel)
	defer dir.Close()
	entries, err := dir.ReadDir(maxEntries + 1)
	if err != nil && err != io.EOF {
		return nil, &Error{Root: r.dir, Name: rel, Why: "cannot be listed: " + err.Error(), Err: err}
	}
	if len(entries) > maxEntries {
		return nil, &Error{Root: r.dir, Name: rel, Why: fmt.Sprintf("holds more than %d entries", maxEntries), Err: ErrTooLarge}
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	var files []File
	left := maxBytes
	for _, e := range entries {
		b, err := r.ReadFile(path.Join(rel, e.Name()), left)
		if errors.Is(err, ErrSymlink) || errors.Is(err, ErrNotRegular) {
			continue
		}
		if err != nil {
			return nil, err
		}
		left -= int64(len(b))
		files = append(files, File{Name: e.Name(), Data: b})
	}
	return files, nil
}

// openFile opens name as a regular file of at most limit bytes, and
// says the path it opened, relative to the root.
func (r *Root) openFile(name string, limit int64) (*os.File, string, error) {
	fd, rel, err := r.open(name, 0)
	if err != nil {
		return nil, rel, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, rel, &Error{Root: r.dir, Name: rel, Why: "cannot be examined: " + err.Error(), Err: &os.SyscallError{Syscall: "fstat", Err: err}}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		unix.Close(fd)
		return nil, rel, &Error{Root: r.dir, Name: rel, Why: "is not a regular file (" + kind(st.Mode) + ")", Err: ErrNotRegular}
	case st.Size > limit:
		unix.Close(fd)
		return nil, rel, r.tooLarge(rel, limit)
	}
	return os.NewFile(uintptr(fd), r.dir+"/"+rel), rel, nil
}

// open opens name below the root with flags besides openFlags.
func (r *Root) open(name string, flags int) (int, string, error) {
	rel := strings.TrimPrefix(name, "/")
	if !local(rel) {
		return -1, rel, &Error{Root: r.dir, Name: rel, Why: "is not a path inside the image", Err: ErrName}
	}
	fd, err := unix.Openat2(r.fd, rel, &unix.OpenHow{Flags: uint64(openFlags | flags), Resolve: resolve})
	if err != nil {
		return -1, rel, r.openError(rel, err)
	}
	return fd, rel, nil
}

// local says whether rel is a clean path below the root: no "..", no
// empty or doubled parts, so that an error names the file as it was read.
func local(rel string) bool {
	return filepath.IsLocal(rel) && path.Clean(rel) == rel
}

// openError says why openat2 refused rel.
func (r *Root) openError(rel string, err error) error {
	e := &Error{Root: r.dir, Name: rel, Why: "cannot be opened: " + err.Error(), Err: &os.SyscallError{Syscall: "openat2", Err: err}}
	switch {
	case errors.Is(err, unix.ELOOP):
		e.Why, e.Err = "is a symbolic link", ErrSymlink
		if link := r.linkOn(rel); link != "" && link != rel {
			e.Why = "is under a symbolic link, /" + link
		}
	case errors.Is(err, unix.EXDEV):
		e.Why, e.Err = "crosses a mount point", ErrMount
	}
	return e
}

// linkOn names the first symbolic link on rel's path, for an error that
// says which one it is (openat2 says only ELOOP). Each part before it was
// found not to be a link, so fstatat follows none.
func (r *Root) linkOn(rel string) string {
	for i := 1; i <= len(rel); i++ {
		if i < len(rel) && rel[i] != '/' {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(r.fd, rel[:i], &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return ""
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return rel[:i]
		}
	}
	return ""
}

func (r *Root) tooLarge(rel string, limit int64) error {
	return &Error{Root: r.dir, Name: rel, Why: fmt.Sprintf("is larger than %d bytes", limit), Err: ErrTooLarge}
}

// kind names a file type that is not a regular file.
func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	}
	return fmt.Sprintf("mode %#o", mode&unix.S_IFMT)
}

// onlyWriter hides a writer's ReadFrom, so that io.CopyBuffer reads
// through the caller's buffer and its limit.
type onlyWriter struct{ io.Writer }
