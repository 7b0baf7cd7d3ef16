package mcp

import (
	"context"

	"pybox/host/client"
)

// VM is the server's connection to the VM, through which it runs
// programs: host/client's *Client in the real binary, a fake in tests.
// (The guest's agent has a Runner of its own: what runs a program in a
// box, inside the VM.)
type VM interface {
	// RunWith runs one program in a fresh box and returns the host's
	// result of it (the guest's receipt, bounded by host/client).
	// When ctx is cancelled, RunWith must cancel the run in the guest
	// and still return the receipt (status cancelled) if it comes within
	// a bounded wait: that receipt is how the server learns the box was
	// removed. It returns this run's own result or an error, never both
	// nor neither: host/client checks the guest's answer (a receipt of
	// another run, or none, is an error with its cleanup status there).
	// Errors are a *wire.Error when the guest, the supervisor or the
	// client know what happened, or a transport error when contact was
	// lost. A run that asks for delivery (r.Deliver) has its output
	// files' parts passed to opts.Output, in order, before RunWith
	// returns. A run that may reach the network (r.Net) has its box's
	// connections served by opts.Net, one gate for the one run, and the
	// receipt's network section is that gate's record; a run without
	// Net gets no gate.
	RunWith(ctx context.Context, r *client.Checked, opts client.RunOptions) (*client.Result, error)
	Close() error
}

// Dialer connects to the VM's supervisor. It must never start the VM:
// when none is running it fails, and the call reports cleanup
// NOT_ATTEMPTED with the command that starts one.
type Dialer func(ctx context.Context) (VM, error)
