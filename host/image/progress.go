package image

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"pybox/host/escape"
)

// progress shows a build's stages and counters on a terminal (one line,
// rewritten) or in a log (a line per stage, counters at most every 10 s).
// Every line is escaped (escape.Line): it can hold what the programs of
// the tree printed and strings from a base image's meta.json.
type progress struct {
	mu     sync.Mutex
	w      io.Writer
	tty    bool
	prefix string
	stage  string
	last   time.Time
	open   bool // a status line is on screen (tty)
}

func newProgress(w io.Writer, name string) *progress {
	if w == nil {
		w = io.Discard
	}
	p := &progress{w: w, prefix: "image " + name + ": "}
	if f, ok := w.(*os.File); ok {
		p.tty = isTerminal(f)
	}
	return p
}

// Stage starts a stage.
func (p *progress) Stage(n, of int, name, detail string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stage = name
	p.clear()
	fmt.Fprintln(p.w, escape.Line(fmt.Sprintf("%s[%d/%d] %s%s", p.prefix, n, of, name, dashed(detail))))
	p.last = time.Now()
}

// Status updates the current stage's counters.
func (p *progress) Status(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := escape.Line(p.prefix + p.stage + ": " + fmt.Sprintf(format, args...))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", msg)
		p.open = true
		return
	}
	if time.Since(p.last) >= 10*time.Second {
		fmt.Fprintln(p.w, msg)
		p.last = time.Now()
	}
}

// Say prints a line of its own.
func (p *progress) Say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintln(p.w, escape.Line(p.prefix+fmt.Sprintf(format, args...)))
}

func (p *progress) clear() {
	if p.open {
		fmt.Fprint(p.w, "\r\033[K")
		p.open = false
	}
}

func dashed(s string) string {
	if s == "" {
		return ""
	}
	return " — " + s
}

// mib formats a byte count.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
