// Package folder reads a data folder the user named (`pybox vm start
// --data NAME=DIR`) before each run that asks for it: what it holds, for
// the run's receipt, and whether the VM may be given it.
//
// The VM is given the folder itself, read-only (QEMU's 9p "local" driver,
// which opens every path component without following links on the host;
// virtio-fs on a Mac): nothing is copied, so a folder of many gigabytes is
// ready for its first call at once, and a run reads the folder as it is
// when it reads it. What the box sees that is not a plain file or
// directory: a symbolic link is shown as a link and resolved inside the
// box, never on the host; a device cannot be opened (the guest mounts the
// share nodev), and a FIFO or socket there is the box's own, with nothing
// on the host behind it. A file with more than one name (a hard link) is
// the one thing a share would give away: its other names may be outside
// the folder, and the box would read it like any file. The walk refuses a
// folder that holds one, so that nothing outside the folder is reachable.
// The box reads the folder as a user of this machine other than its owner
// would: a file only its owner may read stays unread, and the receipt
// counts such files.
//
// The walk opens every name relative to its directory without following
// links, so a folder changed during the walk cannot make it step outside.
package folder

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound one walk.
type Limits struct {
	MaxFiles int   // files and directories together
	MaxBytes int64 // the files' sizes together; 0: no bound
	MaxDepth int
}

// DefaultLimits bound a folder to what a walk before every run can
// afford (a stat per file).
var DefaultLimits = Limits{MaxFiles: 200000, MaxDepth: 64}

// Report is what a walk found.
type Report struct {
	Files, Dirs int
	Bytes       int64
	// LeftOut counts what the box does not get as a plain file or
	// directory, by kind, with what it gets instead.
	LeftOut map[string]int
	// Digest is the sha256 of the listing: each directory's path, and
	// each file's path, size and modification time.
	Digest string
	Took   time.Duration
}

// LeftOutLines renders LeftOut as short sentences, in a stable order.
func (r *Report) LeftOutLines() []string {
	var out []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range r.LeftOut {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, fmt.Sprintf("%d %s", r.LeftOut[k], k))
	}
	return out
}

// Kinds of what the box does not get as a plain file or directory.
const (
	leftSymlink = "symbolic links: shown to the box as links, resolved inside it, never on the host"
	leftSpecial = "devices, FIFOs and sockets: none opens anything on the host"
	leftUnread  = "entries that could not be read"
	// The box reads the share as a user of this machine other than its
	// owner would: only what others may read.
	leftPrivate    = "files others may not read: the box cannot read them either (chmod o+r shares one)"
	leftPrivateDir = "directories others may not enter: the box cannot either (chmod o+rx shares one)"
)

// Errors of a folder that cannot be given to a run.
var (
	ErrTooLarge  = errors.New("folder: the folder is larger than allowed")
	ErrHardLinks = errors.New("folder: the folder holds files with more than one name")
	ErrClosed    = errors.New("folder: others may not enter the folder")
)

// CheckOpen says whether the box can enter the folder at dir: it reads
// the share as a user of this machine other than its owner would.
func CheckOpen(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("folder: %s: %w", dir, err)
	}
	if st.Mode&0o005 != 0o005 {
		return fmt.Errorf("%w %s (mode %04o): the box reads a data folder as another user of this machine would; chmod o+rx %s (and o+r its files), or name another folder",
			ErrClosed, dir, st.Mode&0o7777, dir)
	}
	return nil
}

// List walks dir and reports what it holds. It refuses (ErrHardLinks) a
// folder holding a regular file with more than one name, and (ErrTooLarge)
// one past lim.
func List(dir string, lim Limits) (*Report, error) {
	t0 := time.Now()
	if err := CheckOpen(dir); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("folder: the data folder %s: %w", dir, err)
	}
	defer unix.Close(fd)
	sum := sha256.New()
	w := &walker{lim: lim, rep: &Report{LeftOut: map[string]int{}}, sum: sum}
	if err := w.dir(fd, "", 0); err != nil {
		return nil, err
	}
	if w.linked > 0 {
		return nil, fmt.Errorf("%w (hard links): %d, such as %s. Their other names may be outside the folder, and the box would read them: "+
			"give each its own copy (cp without --link or --preserve=links), or take them out of the folder", ErrHardLinks, w.linked, show(w.firstLinked))
	}
	w.rep.Digest = hex.EncodeToString(sum.Sum(nil))
	w.rep.Took = time.Since(t0)
	return w.rep, nil
}

type walker struct {
	lim         Limits
	rep         *Report
	sum         io.Writer
	linked      int
	firstLinked string
}

// dir walks the directory open as fd; rel is its path inside the folder.
func (w *walker) dir(fd int, rel string, depth int) error {
	if depth > w.lim.MaxDepth {
		return fmt.Errorf("%w: %s is nested deeper than %d directories", ErrTooLarge, show(rel), w.lim.MaxDepth)
	}
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("folder: reading %s: %w", show(rel), err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := w.entry(fd, name, join(rel, name), depth); err != nil {
			return err
		}
	}
	return nil
}

// entry looks at one name of a directory.
func (w *walker) entry(fd int, name, rel string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		w.rep.LeftOut[leftUnread]++
		return nil
	}
	if w.rep.Files+w.rep.Dirs >= w.lim.MaxFiles {
		return fmt.Errorf("%w: more than %d files and directories", ErrTooLarge, w.lim.MaxFiles)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			w.rep.LeftOut[leftUnread]++
			return nil
		}
		defer unix.Close(sub)
		if st.Mode&0o005 != 0o005 {
			w.rep.LeftOut[leftPrivateDir]++
		}
		w.rep.Dirs++
		fmt.Fprintf(w.sum, "d %s\n", rel)
		return w.dir(sub, rel, depth+1)
	case unix.S_IFREG:
		if st.Nlink > 1 {
			if w.linked == 0 {
				w.firstLinked = rel
			}
			w.linked++
			return nil
		}
		if w.lim.MaxBytes > 0 && w.rep.Bytes+st.Size > w.lim.MaxBytes {
			return fmt.Errorf("%w: it holds more than %d bytes", ErrTooLarge, w.lim.MaxBytes)
		}
		if st.Mode&0o004 == 0 {
			w.rep.LeftOut[leftPrivate]++
		}
		w.rep.Files++
		w.rep.Bytes += st.Size
		fmt.Fprintf(w.sum, "f %s %d %d.%09d\n", rel, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
	case unix.S_IFLNK:
		w.rep.LeftOut[leftSymlink]++
	default:
		w.rep.LeftOut[leftSpecial]++
	}
	return nil
}

func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(dup), "dir")
	defer d.Close()
	return d.Readdirnames(-1)
}

// show makes a path from the folder safe to put in a message.
func show(rel string) string {
	if rel == "" {
		return "the folder"
	}
	return fmt.Sprintf("%q", strings.ToValidUTF8(rel, "?"))
}
