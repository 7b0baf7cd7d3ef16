// Package mirror keeps the VM's read-only copy of a data folder that the
// user named (`pybox vm start --data NAME=DIR`), brought up to date
// before each run that asks for it.
//
// The VM is given the copy, never the folder itself: the copy holds only
// directories and regular files that have one name, so nothing the guest
// reads through the share can lead out of the folder. Symbolic links (to
// anywhere), hard links (whose other names may be outside the folder),
// devices, FIFOs and sockets are left out and counted; the walk opens
// every name relative to its directory without following links, so a
// folder changed during the walk cannot make it step outside either.
//
// Copying is by size and modification time, as rsync does by default: a
// file whose size and time match the copy's is not read again. A run
// therefore sees the folder as it was when its run started.
package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound one sync.
type Limits struct {
	MaxFiles int   // files and directories together
	MaxBytes int64 // the files' sizes together; 0: no bound
	MaxDepth int
}

// DefaultLimits bound a folder to what a VM share can sensibly carry.
var DefaultLimits = Limits{MaxFiles: 200000, MaxDepth: 64}

// Report is what a sync found and did.
type Report struct {
	Files, Dirs     int
	Bytes           int64
	Copied, Removed int
	// LeftOut counts what the box does not see, by kind.
	LeftOut map[string]int
	// Digest is the sha256 of the listing: each kept file's path, size
	// and modification time.
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

// Kinds of what is left out.
const (
	leftSymlink  = "symbolic links"
	leftHardLink = "files with more than one name (hard links)"
	leftSpecial  = "devices, FIFOs and sockets"
	leftUnread   = "entries that could not be read"
)

// ErrTooLarge is returned when the folder passes a limit.
var ErrTooLarge = errors.New("mirror: the folder is larger than allowed")

// Sync makes dst a copy of src as described in the package comment. dst
// is created if missing and must be a directory only the mirror writes.
func Sync(src, dst string, lim Limits) (*Report, error) {
	t0 := time.Now()
	sum := sha256.New()
	s := &syncer{lim: lim, rep: &Report{LeftOut: map[string]int{}}, sum: sum}
	// New files are written beside the copy, not in it (where a name of
	// the folder's own could be the scratch name), then renamed in.
	scratch := dst + ".incoming"
	os.RemoveAll(scratch)
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	defer os.RemoveAll(scratch)
	var err error
	if s.scratch, err = unix.Open(scratch, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	defer unix.Close(s.scratch)
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("mirror: the data folder %s: %w", src, err)
	}
	defer unix.Close(sfd)
	if err = os.MkdirAll(dst, 0o755); err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	if err = os.Chmod(dst, 0o755); err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	defer unix.Close(dfd)
	if err := s.dir(sfd, dfd, "", 0); err != nil {
		return nil, err
	}
	s.rep.Digest = hex.EncodeToString(sum.Sum(nil))
	s.rep.Took = time.Since(t0)
	return s.rep, nil
}

type syncer struct {
	lim     Limits
	rep     *Report
	sum     io.Writer
	scratch int // the directory new files are written in first
}

// dir copies the directory open as sfd into the one open as dfd; rel is
// its path inside the folder, for the listing and for errors.
func (s *syncer) dir(sfd, dfd int, rel string, depth int) error {
	if depth > s.lim.MaxDepth {
		return fmt.Errorf("%w: %s is nested deeper than %d directories", ErrTooLarge, show(rel), s.lim.MaxDepth)
	}
	names, err := readNames(sfd)
	if err != nil {
		return fmt.Errorf("mirror: reading %s: %w", show(rel), err)
	}
	slices.Sort(names)
	keep := map[string]bool{}
	for _, name := range names {
		kept, err := s.entry(sfd, dfd, name, filepath.Join(rel, name), depth)
		if err != nil {
			return err
		}
		if kept {
			keep[name] = true
		}
	}
	// What the copy holds beyond what was kept goes.
	have, err := readNames(dfd)
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	for _, name := range have {
		if !keep[name] {
			if err := removeAt(dfd, name); err != nil {
				return fmt.Errorf("mirror: removing %s from the copy: %w", show(filepath.Join(rel, name)), err)
			}
			s.rep.Removed++
		}
	}
	return nil
}

// entry copies one name of a directory; it reports whether the copy
// keeps it.
func (s *syncer) entry(sfd, dfd int, name, rel string, depth int) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		s.rep.LeftOut[leftUnread]++
		return false, nil
	}
	if s.rep.Files+s.rep.Dirs >= s.lim.MaxFiles {
		return false, fmt.Errorf("%w: more than %d files and directories", ErrTooLarge, s.lim.MaxFiles)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return true, s.subdir(sfd, dfd, name, rel, depth)
	case unix.S_IFREG:
		if st.Nlink > 1 {
			s.rep.LeftOut[leftHardLink]++
			return false, nil
		}
		return s.file(sfd, dfd, name, rel, &st)
	case unix.S_IFLNK:
		s.rep.LeftOut[leftSymlink]++
	default:
		s.rep.LeftOut[leftSpecial]++
	}
	return false, nil
}

func (s *syncer) subdir(sfd, dfd int, name, rel string, depth int) error {
	sub, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		s.rep.LeftOut[leftUnread]++
		return nil
	}
	defer unix.Close(sub)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := removeAt(dfd, name); err != nil {
			return fmt.Errorf("mirror: %w", err)
		}
	}
	if err := unix.Mkdirat(dfd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mirror: %w", err)
	}
	// Past the umask (the supervisor's is 077): the box reads the copy as
	// another user than its owner.
	if err := unix.Fchmodat(dfd, name, 0o755, 0); err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	dsub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	defer unix.Close(dsub)
	s.rep.Dirs++
	fmt.Fprintf(s.sum, "d %s\n", rel)
	return s.dir(sub, dsub, rel, depth+1)
}

// file copies one regular file unless the copy has it already (same size
// and modification time).
func (s *syncer) file(sfd, dfd int, name, rel string, st *unix.Stat_t) (bool, error) {
	if s.lim.MaxBytes > 0 && s.rep.Bytes+st.Size > s.lim.MaxBytes {
		return false, fmt.Errorf("%w: it holds more than %d bytes", ErrTooLarge, s.lim.MaxBytes)
	}
	s.rep.Files++
	s.rep.Bytes += st.Size
	fmt.Fprintf(s.sum, "f %s %d %d.%09d\n", rel, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
	var have unix.Stat_t
	if err := unix.Fstatat(dfd, name, &have, unix.AT_SYMLINK_NOFOLLOW); err == nil &&
		have.Mode&unix.S_IFMT == unix.S_IFREG && have.Size == st.Size && have.Mtim == st.Mtim {
		return true, nil
	}
	// O_NOFOLLOW and O_NONBLOCK: a name swapped for a link or a FIFO
	// since the stat is neither followed nor waited on; the fstat then
	// checks it is still the file that was looked at.
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		s.forget(st)
		return false, nil
	}
	f := os.NewFile(uintptr(in), name)
	defer f.Close()
	var now unix.Stat_t
	if unix.Fstat(in, &now) != nil || now.Ino != st.Ino || now.Dev != st.Dev || now.Mode&unix.S_IFMT != unix.S_IFREG || now.Nlink != 1 {
		s.forget(st)
		return false, nil
	}
	if err := s.copyInto(dfd, name, f, st); err != nil {
		return false, fmt.Errorf("mirror: copying %s: %w", show(rel), err)
	}
	s.rep.Copied++
	return true, nil
}

// forget takes back a file counted before it turned out unreadable.
func (s *syncer) forget(st *unix.Stat_t) {
	s.rep.Files--
	s.rep.Bytes -= st.Size
	s.rep.LeftOut[leftUnread]++
}

// copyInto writes f's content as dfd/name: into a new file in the
// scratch directory, renamed over the old one once complete, with f's
// modification time.
func (s *syncer) copyInto(dfd int, name string, f *os.File, st *unix.Stat_t) error {
	const tmp = "file"
	unix.Unlinkat(s.scratch, tmp, 0)
	out, err := unix.Openat(s.scratch, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	w := os.NewFile(uintptr(out), tmp)
	err = unix.Fchmod(out, 0o644) // past the umask, as for directories
	if err == nil {
		_, err = io.Copy(w, io.LimitReader(f, st.Size))
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.UtimesNanoAt(s.scratch, tmp, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil {
		var have unix.Stat_t
		if unix.Fstatat(dfd, name, &have, unix.AT_SYMLINK_NOFOLLOW) == nil && have.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = removeAt(dfd, name)
		}
	}
	if err == nil {
		err = unix.Renameat(s.scratch, tmp, dfd, name)
	}
	if err != nil {
		unix.Unlinkat(s.scratch, tmp, 0)
	}
	return err
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

// removeAt removes name from the directory open as dfd, whatever it is.
func removeAt(dfd int, name string) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	sub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := readNames(sub)
	if err == nil {
		for _, n := range names {
			if err = removeAt(sub, n); err != nil {
				break
			}
		}
	}
	unix.Close(sub)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}

// show makes a path from the folder safe to put in a message.
func show(rel string) string {
	if rel == "" {
		return "the folder"
	}
	return fmt.Sprintf("%q", strings.ToValidUTF8(rel, "?"))
}
