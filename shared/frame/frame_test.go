package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	msgs := [][]byte{[]byte("a"), []byte(`{"type":"ping"}`), bytes.Repeat([]byte{7}, Max)}
	for _, m := range msgs {
		if err := Write(&buf, m); err != nil {
			t.Fatalf("Write(%d bytes): %v", len(m), err)
		}
	}
	for _, want := range msgs {
		got, err := Read(&buf)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Read = %d bytes, want %d", len(got), len(want))
		}
	}
	if _, err := Read(&buf); err != io.EOF {
		t.Fatalf("Read at end = %v, want io.EOF", err)
	}
}

func TestWriteRefuses(t *testing.T) {
	if err := Write(io.Discard, nil); !errors.Is(err, ErrEmpty) {
		t.Errorf("Write(empty) = %v, want ErrEmpty", err)
	}
	if err := Write(io.Discard, make([]byte, Max+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Write(Max+1) = %v, want ErrTooLarge", err)
	}
}

// countingReader counts the bytes handed out, so a test can show that a
// refused frame was not read (and so not buffered) past its header.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestReadRefusesHugeLengthWithoutAllocating(t *testing.T) {
	hdr := binary.BigEndian.AppendUint32(nil, 0xFFFFFFFF)
	src := &countingReader{r: io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(make([]byte, 1<<16)))}
	if _, err := Read(src); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Read = %v, want ErrTooLarge", err)
	}
	if src.n != 4 {
		t.Errorf("read %d bytes of a refused frame, want only the 4-byte header", src.n)
	}
	// A buffer for the declared 4 GiB would show in the allocation total.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 100; i++ {
		_, _ = Read(bytes.NewReader(hdr))
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("100 refused frames allocated %d bytes", grew)
	}
}

func TestReadErrors(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty frame", []byte{0, 0, 0, 0}, ErrEmpty},
		{"just over max", binary.BigEndian.AppendUint32(nil, Max+1), ErrTooLarge},
		{"short header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"short payload", append(binary.BigEndian.AppendUint32(nil, 10), "abc"...), io.ErrUnexpectedEOF},
		{"header only", binary.BigEndian.AppendUint32(nil, 10), io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		_, err := Read(bytes.NewReader(c.in))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Read = %v, want %v", c.name, err, c.want)
		}
	}
}

func FuzzRead(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 'x'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0})
	f.Add(append(binary.BigEndian.AppendUint32(nil, 5), "hello world"...))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			p, err := Read(r)
			if err != nil {
				return
			}
			if len(p) == 0 || len(p) > Max {
				t.Fatalf("Read returned %d bytes", len(p))
			}
			var buf bytes.Buffer
			if err := Write(&buf, p); err != nil {
				t.Fatalf("Write of a payload Read accepted: %v", err)
			}
			back, err := Read(&buf)
			if err != nil || !bytes.Equal(back, p) {
				t.Fatalf("round trip changed the payload: %v", err)
			}
		}
	})
}
