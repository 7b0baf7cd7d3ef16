package client

import "time"

// SetDeadlineFor shortens the deadline of the runs a test makes.
func SetDeadlineFor(f func(timeoutS float64) time.Duration) (restore func()) {
	old := deadlineFor
	deadlineFor = f
	return func() { deadlineFor = old }
}
