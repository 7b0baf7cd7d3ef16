//go:build linux

package box

import (
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"pybox/shared/wire"
)

// readChunk is the one buffer a stream is read through: a flood costs
// the agent this much and no more.
const readChunk = 32 << 10

// capture reads one of the program's streams to its end, keeping the
// first max bytes and counting the rest.
type capture struct {
	f     *os.File
	kept  []byte // cap max, never grown
	total int64
	done  chan struct{}
}

// startCapture reads f in a goroutine until end of file. f's write end
// must already be closed in the agent, so end of file means every
// process of the box has closed it.
func startCapture(f *os.File, max int) *capture {
	c := &capture{f: f, kept: make([]byte, 0, max), done: make(chan struct{})}
	go c.read()
	return c
}

func (c *capture) read() {
	defer close(c.done)
	buf := make([]byte, readChunk)
	for {
		n, err := c.f.Read(buf)
		c.total += int64(n)
		if room := cap(c.kept) - len(c.kept); room > 0 {
			c.kept = append(c.kept, buf[:min(n, room)]...)
		}
		if err != nil {
			return
		}
	}
}

// finish waits up to d for end of file, then stops reading (a writer
// that escaped the kill would otherwise hold the run open) and closes f.
// It reports whether the stream ended by itself.
func (c *capture) finish(d time.Duration) bool {
	ended := true
	select {
	case <-c.done:
	case <-time.After(d):
		ended = false
		c.f.SetReadDeadline(time.Now())
		<-c.done
	}
	c.f.Close()
	return ended
}

// stream describes what was captured and returns it as text. Bytes that
// are not valid UTF-8 become U+FFFD, one per invalid run, and the stream
// is flagged; a character cut in two by the limit is dropped whole
// rather than flagged, and KeptBytes counts what is left. Call it after
// finish.
func (c *capture) stream() (wire.Stream, string) {
	kept := c.kept
	truncated := c.total > int64(len(kept))
	if truncated {
		kept = trimCutRune(kept)
	}
	s := wire.Stream{Bytes: c.total, KeptBytes: len(kept), Truncated: truncated}
	if utf8.Valid(kept) {
		return s, string(kept)
	}
	s.InvalidUTF8 = true
	return s, strings.ToValidUTF8(string(kept), "\uFFFD")
}

// trimCutRune drops an incomplete UTF-8 sequence at the end of b.
func trimCutRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}
