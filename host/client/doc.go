// Package client talks to the VM supervisor over its unix socket
// ($PYBOX_HOME/vm/pybox.sock): hello, ping, run (with cancel), shutdown.
// Several clients may be connected at once; each may have several
// requests in flight.
//
// Errors are a *wire.Error when the supervisor or the guest answered with
// one (its Code says what happened; for a run, its Cleanup says whether a
// box was made and removed), ErrNoVM when no supervisor is running, or a
// transport error.
package client
