package boot

import (
	"time"

	"golang.org/x/sys/unix"
)

// PowerOff syncs the filesystems and ends the VM. It never returns.
//
// The VM is started with -no-reboot and the kernel with reboot=t, so a
// restart is what ends QEMU; POWER_OFF is the fallback for a VMM that
// treats a restart as a restart.
func PowerOff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	for {
		// Not select{}: with nothing else runnable the Go runtime would
		// call that a deadlock and exit, and PID 1 must never exit.
		time.Sleep(time.Hour)
	}
}

// KernelRelease is uname -r.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Uptime is the time since the kernel started, on the clock of the kernel's
// own log lines.
func Uptime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
