package service

import (
	"fmt"
	"net"
	"os"
)

// Notify sends state (such as "READY=1") to the service manager named by
// $NOTIFY_SOCKET, as sd_notify(3) does. Without that variable it does
// nothing: pybox was not started as a notify service.
func Notify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	// Go's net takes a leading '@' as the abstract namespace, as systemd means it.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("service: notify %s: %w", name, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("service: notify %s: %w", name, err)
	}
	return nil
}
