package channel

import (
	"fmt"
	"io"
	"net"
	"os"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"
)

// VsockPort is the vsock port the agent listens on.
const VsockPort = 1024

// ErrNoVsock says the VM has no vsock device; the host then talks over
// the virtio-serial port.
var ErrNoVsock = fmt.Errorf("channel: no vsock device in this VM (the host uses the virtio-serial port %q instead)", PortName)

// Vsock listens on a vsock port for connections from the host. It returns
// ErrNoVsock when the VM has no vsock device: the kernel's vsock core
// makes /dev/vsock either way, and without a device the local CID is
// VMADDR_CID_ANY, or VMADDR_CID_LOCAL when the loopback transport is
// built in. A guest's own CID is 3 or more.
func Vsock(port uint32, logf func(string, ...any)) (Listener, error) {
	if _, err := os.Stat("/dev/vsock"); err != nil {
		return nil, ErrNoVsock
	}
	cid, err := vsock.ContextID()
	if err != nil || cid < 3 || cid == unix.VMADDR_CID_ANY {
		return nil, ErrNoVsock
	}
	l, err := vsock.Listen(port, nil)
	if err != nil {
		return nil, fmt.Errorf("channel: vsock listen on port %d: %w", port, err)
	}
	return &vsockListener{l: l, cid: cid, port: port, logf: logf}, nil
}

type vsockListener struct {
	l    *vsock.Listener
	cid  uint32
	port uint32
	logf func(string, ...any)
}

// Accept returns the next connection from the host. Connections from
// anywhere else (the guest itself, over the loopback transport) are
// closed at once: only the host speaks to the agent.
func (v *vsockListener) Accept() (io.ReadWriteCloser, error) {
	for {
		c, err := v.l.Accept()
		if err != nil {
			return nil, err
		}
		if a, ok := c.RemoteAddr().(*vsock.Addr); ok && a.ContextID == unix.VMADDR_CID_HOST {
			return vsockConn{c}, nil
		}
		v.logf("channel: refused a vsock connection from %v: only the host (cid %d) may connect", c.RemoteAddr(), unix.VMADDR_CID_HOST)
		c.Close()
	}
}

func (v *vsockListener) Close() error { return v.l.Close() }

func (v *vsockListener) String() string {
	return fmt.Sprintf("vsock cid %d port %d", v.cid, v.port)
}

// vsockConn names a connection by its peer for the log.
type vsockConn struct{ net.Conn }

func (c vsockConn) String() string { return "vsock from " + c.RemoteAddr().String() }
