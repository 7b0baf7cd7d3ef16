package mcptest

import (
	"encoding/json"
	"fmt"
	"io"

	"pybox/host/escape"
)

// Printer writes one line per result: text for people, JSON for machines.
type Printer struct {
	W    io.Writer
	JSON bool
	// Verbose adds what was seen to a passing line, and the time taken.
	Verbose bool
}

// Print writes r. What a check saw may hold the server's or a program's
// text: it is escaped (escape.Line) so that it cannot act on a terminal.
func (p *Printer) Print(r Result) {
	if p.JSON {
		b, _ := json.Marshal(r)
		fmt.Fprintf(p.W, "%s\n", escape.JSON(b))
		return
	}
	if r.Pass {
		if p.Verbose {
			fmt.Fprintf(p.W, "PASS %-20s %s (%.1f s)\n", r.Name, escape.Line(r.Detail), float64(r.MS)/1000)
		} else {
			fmt.Fprintf(p.W, "PASS %s\n", r.Name)
		}
		return
	}
	fmt.Fprintf(p.W, "FAIL %-20s expected: %s; got: %s; hint: %s\n", r.Name, escape.Line(r.Expected), escape.Line(r.Got), escape.Line(r.Hint))
}

// Summary is the closing line.
func Summary(passed, failed int) string {
	return fmt.Sprintf("%d passed, %d failed", passed, failed)
}
