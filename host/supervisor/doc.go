// Package supervisor owns the running VM on the host.
//
// `pybox vm start` calls Start, which re-executes the pybox binary as a
// detached supervisor (its own session, stdio to supervisor.log) that runs
// Main: it boots the VM (trying KVM first when asked to, and falling back to
// TCG when KVM does not boot), does the hello handshake with the guest
// agent, and then relays frames between clients on pybox.sock and the
// guest channel. The supervisor holds a lock file for its whole life, so a
// free lock means no VM whatever other files say; it exits when QEMU exits
// and removes its sockets and state.json.
//
// The relay routes frames by their header: it decodes only hellos and
// the answers to its own pings, and of a client's run it reads the run
// frame's own header (wire.RunHeader: the run ID, delivery, the timeout
// its wait is bounded by, the data folders to ready). The guest is not
// trusted: every frame from it is bounded, an answer nobody asked for
// or of a type its request does not allow is dropped, a malformed header
// ends the VM, and a body is decoded strictly by whoever asked
// (host/client, for a client's request).
package supervisor
