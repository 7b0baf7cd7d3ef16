// Package folder reads a data folder the user named (`pybox vm start
// --data NAME=DIR`): when the VM is given it, and before each run that
// asks for it: what it holds, for the run's receipt, and whether the VM
// may be given it.
//
// The VM is given the folder itself, read-only (QEMU's 9p "local" driver
// in a jail that binds the folder read-only, so the host kernel refuses
// every write; virtio-fs on a Mac): nothing is copied, so a folder of
// many gigabytes is ready for its first call at once, and a run reads
// the folder as it is when it reads it. The supervisor opens the folder
// once, walks it, and keeps it open: the jail binds that very directory
// (checked by device and inode), and every later walk starts from the
// open directory, never from the path resolved again, so a path swapped
// after the start cannot make a receipt describe another folder.
//
// What the folder may hold: plain files, directories and symbolic links
// (a link is shown to the box as a link and resolved inside the box,
// never on the host). A file with more than one name (a hard link) would
// give away what its other names hold, outside the folder; a device,
// FIFO or socket is something a guest that speaks 9p itself could ask
// QEMU to open on the host. A folder holding either is refused. The box
// reads the folder as a user of this machine other than its owner would:
// a file only its owner (or its group) may read stays unread, and the
// receipt counts such files.
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
	ErrSpecial   = errors.New("folder: the folder holds devices, FIFOs or sockets")
	ErrClosed    = errors.New("folder: others may not enter the folder")
	ErrMoved     = errors.New("folder: the path no longer leads to the folder the VM was given")
)

// CheckOpen says whether the box can enter the folder at dir: it reads
// the share as a user of this machine other than its owner would.
func CheckOpen(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("folder: %s: %w", dir, err)
	}
	return checkMode(dir, &st)
}

func checkMode(dir string, st *unix.Stat_t) error {
	if st.Mode&0o005 != 0o005 {
		return fmt.Errorf("%w %s (mode %04o): the box reads a data folder as another user of this machine would; chmod o+rx %s (and o+r its files), or name another folder",
			ErrClosed, dir, st.Mode&0o7777, dir)
	}
	return nil
}

// Open opens the folder at dir (following links, as the user named it),
// once others may enter it. The caller keeps it: the VM is given this
// directory, and ListDir walks it.
func Open(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("folder: the data folder %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("folder: the data folder %s: %w", dir, err)
	}
	if err := checkMode(dir, &st); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Same checks that the path dir still leads to the directory open as d:
// a folder moved away, or replaced by another (a link put in its place),
// is ErrMoved, since a receipt naming dir would then describe a folder
// the VM was not given.
func Same(d *os.File, dir string) error {
	var held, now unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &held); err != nil {
		return fmt.Errorf("folder: the data folder %s: %w", dir, err)
	}
	if err := unix.Stat(dir, &now); err != nil || now.Dev != held.Dev || now.Ino != held.Ino {
		return fmt.Errorf("%w: %s was moved or replaced since the VM started, and the VM still has the folder it was given then; "+
			"restart the VM (pybox vm stop, then pybox vm start) to give it what %s holds now", ErrMoved, dir, dir)
	}
	return nil
}

// List walks the folder at dir and reports what it holds (see ListDir).
func List(dir string, lim Limits) (*Report, error) {
	d, err := Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return ListDir(d, lim)
}

// ListDir walks the folder open as d and reports what it holds. It
// refuses (ErrHardLinks) a folder holding a regular file with more than
// one name, (ErrSpecial) one holding a device, FIFO or socket, and
// (ErrTooLarge) one past lim.
func ListDir(d *os.File, lim Limits) (*Report, error) {
	t0 := time.Now()
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return nil, fmt.Errorf("folder: the data folder %s: %w", d.Name(), err)
	}
	if err := checkMode(d.Name(), &st); err != nil {
		return nil, err
	}
	// A description of its own: d's offset is shared by every walk.
	root, err := unix.Openat(int(d.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("folder: the data folder %s: %w", d.Name(), err)
	}
	defer unix.Close(root)
	sum := sha256.New()
	w := &walker{lim: lim, rep: &Report{LeftOut: map[string]int{}}, sum: sum}
	if err := w.dir(root, "", 0); err != nil {
		return nil, err
	}
	if err := w.refusal(); err != nil {
		return nil, err
	}
	w.rep.Digest = hex.EncodeToString(sum.Sum(nil))
	w.rep.Took = time.Since(t0)
	return w.rep, nil
}

type walker struct {
	lim Limits
	rep *Report
	sum io.Writer
	// linked and special count what refuses the folder, with the
	// first of each, to name.
	linked, special           int
	firstLinked, firstSpecial string
}

// refusal is why the folder may not be given to the VM, if it may not.
func (w *walker) refusal() error {
	switch {
	case w.linked > 0:
		return fmt.Errorf("%w (hard links): %d, such as %s. Their other names may be outside the folder, and the box would read them: "+
			"give each its own copy (cp without --link or --preserve=links), or take them out of the folder", ErrHardLinks, w.linked, show(w.firstLinked))
	case w.special > 0:
		return fmt.Errorf("%w: %d, such as %s. A guest taken over could ask the VM to open them on this machine: "+
			"take them out of the folder, or name a folder without them", ErrSpecial, w.special, show(w.firstSpecial))
	}
	return nil
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
		if w.special == 0 {
			w.firstSpecial = rel
		}
		w.special++
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
