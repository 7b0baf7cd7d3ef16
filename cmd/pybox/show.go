package main

import (
	"fmt"
	"io"
	"reflect"

	"pybox/host/escape"
)

// showf is fmt.Fprintf for text that came from an image's meta.json or
// from the guest: every text argument (a string, a value of a string type
// as its string, a []string, an error) is escaped with escape.Line, so no
// control in it
// acts on the terminal (OSC 52 writes the clipboard) and no tab or
// newline in it moves a tabwriter column or fakes a line. Other arguments
// are formatted as they are, and format itself is trusted: compose text
// into arguments, never into format. JSON output does not come here; its
// encoder escapes.
func showf(w io.Writer, format string, a ...any) {
	fmt.Fprintf(w, format, shown(a)...)
}

// shown returns a with its text escaped (see showf).
func shown(a []any) []any {
	out := make([]any, len(a))
	for i, v := range a {
		switch v := v.(type) {
		case error:
			out[i] = escape.Line(v.Error())
		case []string:
			s := make([]string, len(v))
			for j, e := range v {
				s[j] = escape.Line(e)
			}
			out[i] = s
		default:
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
				out[i] = escape.Line(rv.String())
			} else {
				out[i] = v
			}
		}
	}
	return out
}
