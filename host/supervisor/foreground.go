package supervisor

import (
	"context"
	"time"
)

// Foreground starts the VM as Start does, then stays until the VM is
// gone, for a service manager (systemd, launchd) that wants the service's
// process to live as long as the service. ready is called once the guest
// has said hello. When ctx ends (the service manager's SIGTERM), the VM
// is powered off as by Stop, within stopLimit.
//
// It returns the supervisor's exit status: 0 when the VM stopped because
// it was asked to (`pybox vm stop`, ctx), 1 when it ended by itself or
// failed, so that a manager restarts a VM that failed and leaves one
// that was stopped. A VM that runs already is ErrRunning: its supervisor
// is not this process's child, and the manager could not follow it.
func Foreground(ctx context.Context, o StartOptions, stopLimit time.Duration, ready func(*State)) (int, error) {
	exited := make(chan int, 1)
	o.Exited = exited
	st, err := Start(ctx, o)
	if err != nil {
		return 1, err
	}
	ready(st)
	select {
	case code := <-exited:
		return status(code), nil
	case <-ctx.Done():
	}
	say := o.Say
	if say == nil {
		say = func(string) {}
	}
	if _, err := Stop(o.Home, stopLimit, say); err != nil {
		return 1, err
	}
	return status(<-exited), nil
}

// status maps an exit status to 0 or 1: killed by a signal (-1) is a failure.
func status(code int) int {
	if code == 0 {
		return 0
	}
	return 1
}
