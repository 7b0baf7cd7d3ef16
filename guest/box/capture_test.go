//go:build linux

package box

import (
	"bytes"
	"io"
	"os"
	"runtime"
	"testing"
	"time"
)

// feed writes data into a capture through a real pipe, as the program would.
func feed(t *testing.T, max int, write func(w io.Writer)) *capture {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := startCapture(r, max)
	write(w)
	w.Close()
	if !c.finish(5 * time.Second) {
		t.Fatal("the stream did not end after its writer closed")
	}
	return c
}

func TestCaptureKeepsFirstBytesAndCountsAll(t *testing.T) {
	c := feed(t, 10, func(w io.Writer) { io.WriteString(w, "hello, world and more") })
	s, text := c.stream()
	if text != "hello, wor" || s.Bytes != 21 || s.KeptBytes != 10 || !s.Truncated || s.InvalidUTF8 {
		t.Errorf("got %q %+v", text, s)
	}
}

func TestCaptureShortStream(t *testing.T) {
	c := feed(t, 4096, func(w io.Writer) { io.WriteString(w, "ok\n") })
	s, text := c.stream()
	if text != "ok\n" || s.Bytes != 3 || s.KeptBytes != 3 || s.Truncated {
		t.Errorf("got %q %+v", text, s)
	}
}

func TestCaptureInvalidUTF8(t *testing.T) {
	c := feed(t, 4096, func(w io.Writer) { w.Write([]byte("a\xff\xfeb\x01")) })
	s, text := c.stream()
	if text != "a\uFFFDb\x01" || !s.InvalidUTF8 || s.Bytes != 5 || s.KeptBytes != 5 {
		t.Errorf("got %q %+v", text, s)
	}
}

func TestCaptureDropsCharacterCutByLimit(t *testing.T) {
	// "é" is two bytes; the limit falls between them.
	c := feed(t, 4, func(w io.Writer) { io.WriteString(w, "abcé and more") })
	s, text := c.stream()
	if text != "abc" || s.InvalidUTF8 || s.KeptBytes != 3 || !s.Truncated {
		t.Errorf("got %q %+v", text, s)
	}
}

// A flood costs the agent its fixed buffers, not the flood's size.
func TestCaptureFloodKeepsMemoryFlat(t *testing.T) {
	const flood = 256 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := feed(t, 8192, func(w io.Writer) {
		chunk := bytes.Repeat([]byte{1}, 1<<20)
		for i := 0; i < flood>>20; i++ {
			w.Write(chunk)
		}
	})
	runtime.ReadMemStats(&after)
	s, _ := c.stream()
	if s.Bytes != flood || s.KeptBytes != 8192 || !s.Truncated {
		t.Errorf("got %+v", s)
	}
	// The writer's 1 MiB chunk plus the capture's buffers, with room.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Errorf("capturing %d bytes allocated %d bytes", flood, grew)
	}
}

func TestCaptureFinishStopsAStuckWriter(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := startCapture(r, 16)
	io.WriteString(w, "partial")
	if c.finish(50 * time.Millisecond) {
		t.Error("finish said the stream ended while its writer is open")
	}
	if s, text := c.stream(); text != "partial" || s.Bytes != 7 {
		t.Errorf("got %q %+v", text, s)
	}
}
