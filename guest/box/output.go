//go:build linux

package box

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// Bounds of collecting /tmp/output: however the program filled it, the
// agent spends at most this much time and memory on it.
const (
	maxOutputNames = 20000 // names read from the directory; the tmpfs holds fewer inodes
	collectTime    = 5 * time.Second
)

// collector walks /tmp/output once the box is empty. Only regular files
// with one link are read, each opened relative to the directory with
// O_NOFOLLOW|O_NONBLOCK, so no link is followed and no FIFO blocks.
//
// It works in two passes. The first looks at every name (a stat each)
// and reads the files that come back, which the 48 KiB cap keeps cheap.
// The second hashes the files listed as left behind, which may be large:
// under TCG sha256 runs at a few MB/s, so a listed file that the time
// bound does not reach is listed with its size and no sha256.
type collector struct {
	dir      int // the output directory, opened without following links
	ask      bool
	budget   int // content bytes that may still come back
	deadline time.Time
	files    []wire.OutputFile
	out      wire.Output
	hash     []pending
}

// pending is a listed file whose sha256 the second pass computes.
type pending struct {
	name  string
	st    unix.Stat_t
	entry int // index in out.NotReturned
}

// collectOutput reads tmp/output, tmp being the staging tmpfs. It never
// fails: what cannot be read is listed as not returned, with the reason.
func collectOutput(tmp string, returnFiles bool) ([]wire.OutputFile, wire.Output) {
	by := time.Now().Add(collectTime)
	return collectBy(tmp, returnFiles, by, by)
}

// collectBy collects with the first pass bounded by scanBy and the
// second by hashBy.
func collectBy(tmp string, returnFiles bool, scanBy, hashBy time.Time) ([]wire.OutputFile, wire.Output) {
	c := &collector{ask: returnFiles, budget: wire.MaxReturnedFileBytes, deadline: scanBy}
	c.out = wire.Output{Returned: []wire.FileDigest{}, NotReturned: []wire.NotReturned{}}
	names, more, err := c.open(tmp)
	if err != nil {
		c.notReturned("output", wire.NotReturnedUnreadble+": "+err.Error(), -1, "")
		return c.files, c.out
	}
	defer unix.Close(c.dir)
	c.out.NotListed += more
	slices.Sort(names)
	for _, name := range names {
		c.one(name)
	}
	// Smallest first: when time runs out, the most files have a digest.
	slices.SortStableFunc(c.hash, func(a, b pending) int { return cmp.Compare(a.st.Size, b.st.Size) })
	for _, p := range c.hash {
		if time.Now().After(hashBy) {
			break
		}
		c.out.NotReturned[p.entry] = c.hashed(p)
	}
	return c.files, c.out
}

// open opens tmp/output as a directory, refusing a link in its place
// (the program owns it and may have swapped it), and reads its names.
func (c *collector) open(tmp string) ([]string, int, error) {
	tfd, err := unix.Open(tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(tfd)
	c.dir, err = unix.Openat(tfd, "output", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, 0, errors.New("/tmp/output was removed by the program")
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return nil, 0, errors.New("/tmp/output was replaced by a link or a file")
	case err != nil:
		return nil, 0, err
	}
	dup, err := unix.Dup(c.dir)
	if err != nil {
		unix.Close(c.dir)
		return nil, 0, err
	}
	d := os.NewFile(uintptr(dup), "output")
	defer d.Close()
	var names []string
	more := 0
	for {
		batch, err := d.Readdirnames(1024)
		for _, n := range batch {
			if len(names) < maxOutputNames {
				names = append(names, n)
			} else {
				more++
			}
		}
		if err != nil {
			break
		}
	}
	return names, more, nil
}

// one decides the fate of one name.
func (c *collector) one(name string) {
	if time.Now().After(c.deadline) {
		c.notReturned(name, wire.NotReturnedTimeLimit, -1, "")
		return
	}
	var st unix.Stat_t
	if err := unix.Fstatat(c.dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		c.notReturned(name, wire.NotReturnedUnreadble, -1, "")
		return
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		c.notReturned(name, wire.NotReturnedSymlink, -1, "")
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		c.notReturned(name, wire.NotReturnedNotFile, -1, "")
	case st.Nlink > 1:
		c.notReturned(name, wire.NotReturnedHardLink, st.Size, "")
	case !c.ask:
		c.hashOnly(name, st, wire.NotReturnedNotAsked)
	case !plainName(name):
		c.hashOnly(name, st, wire.NotReturnedName)
	case len(c.files) >= wire.MaxReturnedFiles:
		c.hashOnly(name, st, wire.NotReturnedOverCount)
	case st.Size > int64(c.budget):
		c.hashOnly(name, st, wire.NotReturnedOverCap)
	default:
		c.bringBack(name, st)
	}
}

// plainName is a name the host can write into a directory as it is and
// show without escaping.
func plainName(name string) bool {
	return wire.CheckFileName(name) == nil && wire.EscapeName(name) == name
}

// openFile opens name for reading and checks it is still the file that
// was looked at.
func (c *collector) openFile(name string, st unix.Stat_t) (*os.File, error) {
	fd, err := unix.Openat(c.dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev ||
		now.Mode&unix.S_IFMT != unix.S_IFREG || now.Nlink != 1 || now.Size != st.Size {
		unix.Close(fd)
		return nil, errChanged
	}
	return os.NewFile(uintptr(fd), name), nil
}

var errChanged = errors.New("changed")

func (c *collector) bringBack(name string, st unix.Stat_t) {
	f, err := c.openFile(name, st)
	if err != nil {
		c.notReturned(name, failReason(err), st.Size, "")
		return
	}
	defer f.Close()
	// One byte more than the size shows a file that grew.
	content, err := io.ReadAll(io.LimitReader(f, st.Size+1))
	if err != nil || int64(len(content)) != st.Size {
		c.notReturned(name, wire.NotReturnedChanged, st.Size, "")
		return
	}
	sum := sha256.Sum256(content)
	c.budget -= len(content)
	c.files = append(c.files, wire.OutputFile{Name: name, Content: content})
	c.out.Returned = append(c.out.Returned, wire.FileDigest{Name: name, Bytes: st.Size, SHA256: hex.EncodeToString(sum[:])})
}

// hashOnly lists a regular file that stays behind with its size; its
// sha256 comes in the second pass. Past the listing cap it is only
// counted, and not read.
func (c *collector) hashOnly(name string, st unix.Stat_t, reason string) {
	if len(c.out.NotReturned) >= wire.MaxListedNotReturned {
		c.out.NotListed++
		return
	}
	c.hash = append(c.hash, pending{name: name, st: st, entry: len(c.out.NotReturned)})
	c.notReturned(name, reason, st.Size, "")
}

// hashed is p's entry with the file's sha256, or with why it could not
// be read.
func (c *collector) hashed(p pending) wire.NotReturned {
	nr := c.out.NotReturned[p.entry]
	f, err := c.openFile(p.name, p.st)
	if err != nil {
		nr.Reason = failReason(err)
		return nr
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, io.LimitReader(f, p.st.Size+1), make([]byte, readChunk))
	if err != nil || n != p.st.Size {
		nr.Reason = wire.NotReturnedChanged
		return nr
	}
	nr.SHA256 = hex.EncodeToString(h.Sum(nil))
	return nr
}

func failReason(err error) string {
	if errors.Is(err, errChanged) {
		return wire.NotReturnedChanged
	}
	return wire.NotReturnedUnreadble
}

// notReturned lists name (escaped), or counts it past the cap. bytes < 0
// means unknown.
func (c *collector) notReturned(name, reason string, bytes int64, sum string) {
	if len(c.out.NotReturned) >= wire.MaxListedNotReturned {
		c.out.NotListed++
		return
	}
	nr := wire.NotReturned{Name: wire.EscapeName(name), Reason: reason, SHA256: sum}
	if bytes >= 0 {
		nr.Bytes = bytes
	}
	c.out.NotReturned = append(c.out.NotReturned, nr)
}
