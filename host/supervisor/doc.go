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
// The guest is not trusted: every frame from it is bounded and decoded
// strictly, an answer nobody asked for is dropped, and a malformed frame
// ends the VM.
package supervisor
