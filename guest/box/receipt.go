//go:build linux

package box

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// outcome is how a run ended, as the agent saw it.
type outcome struct {
	refusal   string // non-empty: box-init did not exec the program
	cancelled bool   // the host cancelled; the agent killed the box
	timedOut  bool   // the wall timeout passed; the agent killed the box
	oomKills  int64
	exited    bool // status is valid
	status    unix.WaitStatus
	// initEnded: status is box-init's own, which ended before it could
	// report the program's (a program can bring that about by lowering
	// box-init's limits).
	initEnded bool
	timeout   float64 // seconds, for the reason
}

// verdict is the receipt's status, reason, exit code and signal.
type verdict struct {
	status, reason string
	exitCode       *int
	signal         string
}

// decide turns an outcome into the receipt's verdict. The agent's own
// actions come first (a cancel or timeout explains the kill that ended
// the program), then a refusal (nothing ran), then the kernel's OOM
// kill, then the program's own exit.
func decide(o outcome) verdict {
	v := verdict{}
	// When box-init ended first, its status is the program's only if the
	// kernel's OOM kill took both.
	if o.exited && (!o.initEnded || o.oomKills > 0) && (o.refusal == "" || o.cancelled || o.timedOut) {
		v.exitCode, v.signal = exitCode(o.status)
	}
	switch {
	case o.cancelled:
		v.status, v.reason = wire.StatusCancelled, "the host cancelled the run; every process of the box was killed"
	case o.timedOut:
		v.status = wire.StatusTimeout
		v.reason = fmt.Sprintf("the program ran past its %gs timeout; every process of the box was killed", o.timeout)
	case o.refusal != "":
		v.status, v.reason = wire.StatusRefused, "the box was not fit to run the program, so nothing ran: "+o.refusal
	case o.oomKills > 0:
		v.status = wire.StatusOOM
		v.reason = fmt.Sprintf("the box reached its memory limit of %d MiB; the kernel killed every process in it", memoryMax>>20)
	case o.initEnded:
		code, sig := exitCode(o.status)
		how := "was killed by " + sig
		if sig == "" && code != nil {
			how = "exited with code " + strconv.Itoa(*code)
		}
		v.status, v.reason = wire.StatusError, "box-init, the box's init, "+how+
			" before the program ended, so the program's own exit status is lost (a program can cause this by lowering box-init's limits); every process of the box was killed"
	case !o.exited:
		v.status, v.reason = wire.StatusError, "the program's exit status was lost"
	case o.status.Exited() && o.status.ExitStatus() == 0:
		v.status, v.reason = wire.StatusOK, "the program exited with code 0"
	case o.status.Exited():
		v.status, v.reason = wire.StatusError, "the program exited with code "+strconv.Itoa(o.status.ExitStatus())
	default:
		v.status, v.reason = wire.StatusError, "the program was killed by "+v.signal
	}
	return v
}

// exitCode follows the shell: the code if the process exited, 128+n if
// signal n killed it, with the signal's name beside it.
func exitCode(ws unix.WaitStatus) (*int, string) {
	switch {
	case ws.Exited():
		c := ws.ExitStatus()
		return &c, ""
	case ws.Signaled():
		c := 128 + int(ws.Signal())
		name := unix.SignalName(ws.Signal())
		if name == "" {
			name = "signal " + strconv.Itoa(int(ws.Signal()))
		}
		return &c, name
	}
	return nil, ""
}

// pidsNote adds to a reason when the box hit its process limit.
func pidsNote(reason string, refused int64) string {
	if refused == 0 {
		return reason
	}
	forks := "forks were"
	if refused == 1 {
		forks = "fork was"
	}
	return fmt.Sprintf("%s; %d %s refused at the limit of %d processes", reason, refused, forks, pidsMax)
}
