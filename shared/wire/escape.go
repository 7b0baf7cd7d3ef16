package wire

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxEscapedName bounds an escaped name so that a hostile name cannot crowd
// out the trusted parts of a receipt.
const maxEscapedName = 160

// EscapeName makes a file name from the program safe to show: bytes that
// are not valid UTF-8 become \xNN, control and format characters (newlines,
// bidi overrides, ...) become \u{...}, and backslashes are doubled. Long
// names are cut with "…".
func EscapeName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size <= 1:
			piece = fmt.Sprintf(`\x%02x`, name[i])
		case r == '\\':
			piece = `\\`
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			piece = fmt.Sprintf(`\u{%x}`, r)
		default:
			piece = string(r)
		}
		if b.Len()+len(piece) > maxEscapedName {
			b.WriteString("…")
			break
		}
		b.WriteString(piece)
		i += size
	}
	return b.String()
}
