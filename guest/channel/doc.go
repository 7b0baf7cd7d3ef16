// Package channel hands the agent its connections from the host.
//
// Two transports carry the same frames: vsock, where the VMM offers it
// (Virtualization.framework, vhost-vsock), with one connection per host
// client; and a virtio-serial port named "pybox" (QEMU without
// /dev/vhost-vsock), which is one long-lived stream that the host's
// supervisor connects to once per VM life. Both appear to the agent as a
// [Listener] that yields io.ReadWriteCloser connections.
package channel

import "io"

// Listener yields connections from the host. Accept blocks until one is
// there.
type Listener interface {
	Accept() (io.ReadWriteCloser, error)
	Close() error
	String() string
}
