package agent

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// setClock sets the guest's wall clock (CLOCK_REALTIME) to t.
func setClock(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return os.NewSyscallError("clock_settime", err)
	}
	return nil
}
