// Package client talks to the VM supervisor over its unix socket
// ($PYBOX_HOME/vm/pybox.sock): hello, ping, run (with cancel), shutdown.
// Several clients may be connected at once; each may have several
// requests in flight.
//
// It is the one place on the host that distrusts the guest: every frame
// is decoded strictly, once, and a run's receipt is checked to be that
// run's, bounded (every string and list the guest controls, to what the
// contract allows; file names escaped) and given the host's own record
// of the run's data folders (see Result). `pybox run`, `pybox mcp` and
// `pybox check` all see that one bounded receipt.
//
// A run that may reach the network (RunOptions.Net) has the connections
// of its box served here, by the caller's egress.Gate: they come from the
// guest as streams of the run, each frame checked against the streams'
// rules (net.go), and the receipt's network section is the gate's record.
//
// Errors are a *wire.Error when the supervisor or the guest answered with
// one, and when the client itself knows the outcome: ErrNoVM when no
// supervisor is running, a supervisor of another protocol, a run lost
// with its connection. Its Code says what happened and, for a run, its
// Cleanup whether a box was made and removed. Anything else is an error
// of the connection itself.
package client
