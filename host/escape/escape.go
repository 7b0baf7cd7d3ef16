// Package escape makes text that came from a program or the guest safe to
// show: on a terminal, where control sequences act (clear the screen,
// write the clipboard with OSC 52, plant links with OSC 8, move the
// cursor to overwrite a line), and in JSON read by clients that draw it,
// where C1 controls and bidirectional formatting characters survive
// Go's encoder and reorder or hide what is shown.
//
// The characters it treats as controls: C0 other than tab and newline,
// DEL, C1 (U+0080–U+009F), the bidirectional formatting characters
// (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), and bytes that
// are not UTF-8. Everything else, other languages and emoji included,
// passes through.
package escape

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"pybox/shared/wire"
)

// isControl says whether r acts on a terminal or on the direction of text.
// keep lists the C0 controls let through.
func isControl(r rune, keep string) bool {
	switch {
	case r < 0x20:
		return !strings.ContainsRune(keep, r)
	case r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// visible is how a control looks once escaped.
func visible(r rune) string {
	if r < 0x80 {
		return fmt.Sprintf(`\x%02x`, r)
	}
	return fmt.Sprintf(`\u{%x}`, r)
}

// Terminal escapes every control in s but tab and newline, visibly: ESC
// becomes \x1b, U+202E becomes \u{202e}, an invalid byte \xNN.
func Terminal(s string) string {
	return terminal(s, "\t\n")
}

// Line is Terminal for text shown inside one line: newlines and tabs are
// escaped too.
func Line(s string) string {
	return terminal(s, "")
}

func terminal(s, keep string) string {
	if Controls(s, keep) == 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case isControl(r, keep):
			b.WriteString(visible(r))
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Controls counts the controls in s that Terminal (keep "\t\n") or Line
// (keep "") would escape, invalid bytes included.
func Controls(s, keep string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 || isControl(r, keep) {
			n++
		}
		i += size
	}
	return n
}

// JSON rewrites encoded JSON so that no C1 control, bidirectional
// formatting character or DEL appears raw in it: each becomes a \uXXXX
// escape, which decodes to the same string. (Go's encoder escapes C0 and
// U+2028/U+2029 itself; in valid JSON these characters can only be inside
// strings, so nothing else changes.)
func JSON(b []byte) []byte {
	if !needsJSON(b) {
		return b
	}
	out := make([]byte, 0, len(b)+64)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r >= 0x20 && isControl(r, "") {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}

func needsJSON(b []byte) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c == 0x7f {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if isControl(r, "") {
			return true
		}
		i += size
	}
	return false
}

// MarkCapture counts the controls of each captured stream into its
// Controls field, overwriting what the guest said.
func MarkCapture(c *wire.Capture) {
	c.StdoutInfo.Controls = Controls(c.Stdout, "\t\n")
	c.StderrInfo.Controls = Controls(c.Stderr, "\t\n")
}
