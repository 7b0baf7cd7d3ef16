package escape

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// Writer escapes the controls of a byte stream (a serial console) as it
// passes to a terminal, keeping the ones a line-based console needs:
// newline, carriage return, tab and backspace. A character split between
// two writes is held back until its end arrives.
type Writer struct {
	w    io.Writer
	held []byte // the start of a character cut by the end of a write
}

// consoleKeeps are the C0 controls a console passes through.
const consoleKeeps = "\n\r\t\b"

// NewWriter returns a Writer onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p onto the underlying writer. It reports len(p) when the
// escaped bytes were written.
func (e *Writer) Write(p []byte) (int, error) {
	in := append(e.held, p...)
	e.held = nil
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		if !utf8.FullRune(in[i:]) {
			e.held = append([]byte(nil), in[i:]...)
			break
		}
		r, size := utf8.DecodeRune(in[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			out = fmt.Appendf(out, `\x%02x`, in[i])
		case isControl(r, consoleKeeps):
			out = append(out, visible(r)...)
		default:
			out = append(out, in[i:i+size]...)
		}
		i += size
	}
	if _, err := e.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
