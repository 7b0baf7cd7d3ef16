// Package vm starts the guest VM and hands back its two streams: the
// serial console and the guest channel (virtio-serial or vsock) that
// carries frames to the guest agent.
//
// Each platform is one backend in its own file: QEMU on Linux
// (vm_qemu_linux.go), Virtualization.framework on macOS (vm_vz_darwin.go),
// and a clear "not supported" error everywhere else (vm_other.go). A
// backend provides Plan (which accelerators to try, in order), Start (one
// attempt), RecordFailure (remember a probe that failed) and Alive.
// Deciding that an attempt failed — no hello from the guest in time — is
// the supervisor's job, since only it speaks the protocol.
package vm
