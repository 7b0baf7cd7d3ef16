package client

import (
	"time"

	"pybox/shared/wire"
)

// SetDeadlineFor shortens the deadline of the runs a test makes.
func SetDeadlineFor(f func(r *wire.Run) time.Duration) (restore func()) {
	old := deadlineFor
	deadlineFor = f
	return func() { deadlineFor = old }
}

// SetNetwork puts nw in r's receipt, bounded, as RunWith does.
func (r *Result) SetNetwork(nw *wire.Network) { r.setNetwork(nw) }
