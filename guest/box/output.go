//go:build linux

package box

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// maxOutputNames bounds the names read from /tmp/output; the tmpfs holds
// fewer inodes.
const maxOutputNames = 20000

// collector walks /tmp/output once the box is empty. Only regular files
// with one link are read, each opened relative to the directory with
// O_NOFOLLOW|O_NONBLOCK, so no link is followed and no FIFO blocks.
//
// It works in two passes. The first looks at every name (a stat each)
// and reads the files that come back, which the 48 KiB cap keeps cheap.
// The second hashes the files listed as left behind, which may be large:
// under TCG sha256 runs at a few MB/s. Both passes stop at the deadline
// or when the run is cancelled, checked between names and between the
// chunks of one file (a file's apparent size is not bounded by the
// tmpfs: a sparse file costs no space). What they did not reach is
// listed with the reason "time limit", without a sha256.
type collector struct {
	dir    int // the output directory, opened without following links
	ask    bool
	budget int // content bytes that may still come back
	files  []wire.OutputFile
	out    wire.Output
	hash   []pending

	ctx      context.Context // the run's: once it is done, the collection stops
	deadline time.Time       // the phase's allowance ends
	over     bool            // stop said true at least once
	why      string          // why it stopped, once over
	// Counted once over: names not looked at, files not read or hashed
	// to their end.
	skipped, unfinished int
	buf                 []byte // delivery's read buffer
}

// pending is a listed file whose sha256 the second pass computes.
type pending struct {
	name  string
	st    unix.Stat_t
	entry int // index in out.NotReturned
}

// collectOutput reads tmp/output, tmp being the staging tmpfs, until
// deadline or until ctx is done. It never fails: what cannot be read is
// listed as not returned, with the reason. overrun is "" when it
// finished, else what it left undone.
func collectOutput(ctx context.Context, tmp string, returnFiles bool, deadline time.Time) (files []wire.OutputFile, out wire.Output, overrun string) {
	c := &collector{ctx: ctx, deadline: deadline, ask: returnFiles, budget: wire.MaxReturnedFileBytes}
	c.out = wire.Output{Returned: []wire.FileDigest{}, NotReturned: []wire.NotReturned{}}
	names, more, err := c.open(tmp)
	if err != nil {
		c.notReturned("output", wire.NotReturnedUnreadable+": "+err.Error(), -1, "")
		return c.files, c.out, ""
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
		c.out.NotReturned[p.entry] = c.hashed(p)
	}
	if c.over {
		overrun = fmt.Sprintf("output: collecting /tmp/output stopped (%s): %d names not looked at, %d files not read or hashed to the end",
			c.why, c.skipped, c.unfinished)
	}
	return c.files, c.out, overrun
}

// stop says whether the walk must stop: the deadline passed or the run
// was cancelled. Once it has said so it keeps saying so, and c.why says
// which came first.
func (c *collector) stop() bool {
	switch {
	case c.over:
	case c.ctx.Err() != nil:
		c.over, c.why = true, "the run was cancelled"
	case !time.Now().Before(c.deadline):
		c.over, c.why = true, "its allowance ran out"
	}
	return c.over
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
	if c.stop() {
		c.skipped++
		c.notReturned(name, wire.NotReturnedTimeLimit+": not looked at", -1, "")
		return
	}
	var st unix.Stat_t
	if err := unix.Fstatat(c.dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		c.notReturned(name, wire.NotReturnedUnreadable, -1, "")
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
	var content bytes.Buffer
	h := sha256.New()
	err = c.read(f, st.Size+1, io.MultiWriter(&content, h))
	switch {
	case errors.Is(err, errStopped):
		c.unfinished++
		c.notReturned(name, wire.NotReturnedTimeLimit+": not read", st.Size, "")
		return
	case err != nil || int64(content.Len()) != st.Size:
		c.notReturned(name, wire.NotReturnedChanged, st.Size, "")
		return
	}
	c.budget -= content.Len()
	c.files = append(c.files, wire.OutputFile{Name: name, Content: content.Bytes()})
	c.out.Returned = append(c.out.Returned, wire.FileDigest{Name: name, Bytes: st.Size, SHA256: hex.EncodeToString(h.Sum(nil))})
}

var errStopped = errors.New("stopped: out of time or cancelled")

// read copies at most limit bytes of f to w, a chunk at a time, and
// stops with errStopped between chunks once c.stop says so.
func (c *collector) read(f *os.File, limit int64, w io.Writer) error {
	buf := make([]byte, readChunk)
	for r := io.LimitReader(f, limit); ; {
		if c.stop() {
			return errStopped
		}
		n, err := r.Read(buf)
		w.Write(buf[:n])
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
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
	if c.stop() {
		c.unfinished++
		nr.Reason = wire.NotReturnedTimeLimit + ": not hashed; " + nr.Reason
		return nr
	}
	f, err := c.openFile(p.name, p.st)
	if err != nil {
		nr.Reason = failReason(err)
		return nr
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: h}
	err = c.read(f, p.st.Size+1, cw)
	switch {
	case errors.Is(err, errStopped):
		c.unfinished++
		nr.Reason = fmt.Sprintf("%s: hashing stopped after %d of %d bytes; %s", wire.NotReturnedTimeLimit, cw.n, p.st.Size, nr.Reason)
	case err != nil || cw.n != p.st.Size:
		nr.Reason = wire.NotReturnedChanged
	default:
		nr.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	return nr
}

// countWriter counts what passes through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.w.Write(p)
}

func failReason(err error) string {
	if errors.Is(err, errChanged) {
		return wire.NotReturnedChanged
	}
	return wire.NotReturnedUnreadable
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

// emitFunc sends part of a delivered file to the host; an error means the
// host is gone and delivery stops.
type emitFunc func(name string, offset int64, data []byte) error

// delivery is what deliverOutput did.
type delivery struct {
	delivered    []wire.FileDigest
	notDelivered []wire.NotReturned
	notListed    int
	overrun      string
}

// deliverOutput streams every file of tmp/output whole through emit, in
// name order, up to d.MaxBytes in all and until deadline or ctx ends
// (checked between chunks). It takes what the collector takes: regular
// files with one link and a plain name, opened without following links.
// What it leaves out is listed (the first 16) with the reason.
func deliverOutput(ctx context.Context, tmp string, d *wire.Deliver, emit emitFunc, deadline time.Time) delivery {
	var res delivery
	c := &collector{ctx: ctx, deadline: deadline}
	note := func(name, reason string, bytes int64) {
		if len(res.notDelivered) >= wire.MaxListedNotReturned {
			res.notListed++
			return
		}
		res.notDelivered = append(res.notDelivered, wire.NotReturned{Name: wire.EscapeName(name), Reason: reason, Bytes: max(bytes, 0)})
	}
	names, more, err := c.open(tmp)
	if err != nil {
		note("output", wire.NotReturnedUnreadable+": "+err.Error(), -1)
		return res
	}
	defer unix.Close(c.dir)
	res.notListed += more
	slices.Sort(names)
	budget := d.MaxBytes
	c.buf = make([]byte, wire.MaxOutputChunk) // one buffer for every file
	for _, name := range names {
		if c.stop() {
			note(name, wire.NotReturnedTimeLimit+": not delivered", -1)
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(c.dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			note(name, wire.NotReturnedUnreadable, -1)
			continue
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			note(name, wire.NotReturnedSymlink, -1)
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			note(name, wire.NotReturnedNotFile, -1)
		case st.Nlink > 1:
			note(name, wire.NotReturnedHardLink, st.Size)
		case !plainName(name):
			note(name, wire.NotReturnedName, st.Size)
		case st.Size > budget:
			note(name, wire.NotDeliveredOverCap, st.Size)
		case len(res.delivered) >= wire.MaxDeliveredFiles:
			note(name, wire.NotDeliveredOverCount, st.Size)
		default:
			digest, reason := c.stream(name, st, emit)
			if reason != "" {
				note(name, reason, st.Size)
				if reason == errEmitReason {
					return res
				}
				continue
			}
			budget -= st.Size
			res.delivered = append(res.delivered, wire.FileDigest{Name: name, Bytes: st.Size, SHA256: digest})
		}
	}
	if c.over {
		res.overrun = fmt.Sprintf("deliver: streaming /tmp/output stopped (%s): %d of %d files delivered", c.why, len(res.delivered), len(names)+more)
	}
	return res
}

// errEmitReason is the reason for a file whose delivery the host stopped
// taking; nothing after it is sent.
const errEmitReason = "not delivered: the host stopped taking it"

// stream sends one file through emit a chunk at a time, and returns its
// sha256, or why it was not delivered whole.
func (c *collector) stream(name string, st unix.Stat_t, emit emitFunc) (string, string) {
	if st.Size == 0 { // one empty chunk, so that the host makes the file
		if emit(name, 0, nil) != nil {
			return "", errEmitReason
		}
		return hex.EncodeToString(sha256.New().Sum(nil)), ""
	}
	f, err := c.openFile(name, st)
	if err != nil {
		return "", failReason(err)
	}
	defer f.Close()
	h := sha256.New()
	buf := c.buf[:min(int64(len(c.buf)), st.Size+1)]
	var off int64
	for {
		if c.stop() {
			return "", wire.NotReturnedTimeLimit + ": delivery stopped part way"
		}
		n, err := io.ReadFull(io.LimitReader(f, st.Size+1-off), buf)
		if n > 0 {
			if off+int64(n) > st.Size {
				return "", wire.NotReturnedChanged
			}
			h.Write(buf[:n])
			if eerr := emit(name, off, buf[:n]); eerr != nil {
				return "", errEmitReason
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return "", wire.NotReturnedUnreadable
		}
	}
	if off != st.Size {
		return "", wire.NotReturnedChanged
	}
	return hex.EncodeToString(h.Sum(nil)), ""
}
