// Package pipes makes the several pipes a child process's standard
// streams need at once: all of them, or none (a failure half way closes
// what was made).
package pipes

import "os"

// Pipe is one pipe: what is written to W is read from R.
type Pipe struct{ R, W *os.File }

// Make makes n pipes, or none.
func Make(n int) ([]Pipe, error) {
	ps := make([]Pipe, 0, n)
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range ps {
				p.R.Close()
				p.W.Close()
			}
			return nil, err
		}
		ps = append(ps, Pipe{r, w})
	}
	return ps, nil
}
