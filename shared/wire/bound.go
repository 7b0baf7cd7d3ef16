package wire

import "time"

// Every run ends within a bound that both sides know: the program's own
// timeout plus a fixed allowance for each phase around it. The guest
// enforces each allowance inside the phase (a phase that runs out stops
// where it is and the receipt says so); the host waits for a receipt no
// longer than HostDeadline, then gives up with cleanup UNKNOWN.
//
// The allowances are far above what the phases take under TCG (setup
// about 60 ms, settle and drain a few ms, collection and cleanup a few ms
// for a normal /tmp/output); they bound what a hostile program can stretch.
const (
	// SetupAllowance: the run's cgroup, its staging tmpfs with the input
	// files, and box-init's setup up to its posture report.
	SetupAllowance = 10 * time.Second
	// SettleAllowance: for box-init to exit once the box was killed, and
	// for the cgroup to empty after cgroup.kill.
	SettleAllowance = 5 * time.Second
	// DrainAllowance: for the stdout, stderr and report pipes to end once
	// the box is empty.
	DrainAllowance = 2 * time.Second
	// CollectAllowance: reading, hashing and listing /tmp/output.
	CollectAllowance = 5 * time.Second
	// DeliverAllowance: streaming /tmp/output whole to the host, for a
	// run that asks for it (Run.Deliver): 64 MiB at the 10 MB/s or so a
	// TCG guest's channel carries, with room to spare.
	DeliverAllowance = 20 * time.Second
	// CleanupAllowance: the counters, the tmpfs's unmount and the
	// cgroup's removal, with one more kill if the box had not emptied.
	CleanupAllowance = 5 * time.Second

	// WatchdogGrace is how long after RunBound the guest's watchdog
	// tears a run down whatever phase it is in.
	WatchdogGrace = 2 * time.Second
	// HostMargin is what the host adds for the frames on the way and
	// the watchdog's own answer.
	HostMargin = 5 * time.Second
)

// Allowance is the sum of the phase allowances: how much longer than
// its timeout a run may take in the guest.
const Allowance = SetupAllowance + SettleAllowance + DrainAllowance + CollectAllowance + CleanupAllowance

// RunBound is the longest a run with this timeout takes in the guest,
// from its request to its receipt.
func RunBound(timeoutS float64) time.Duration {
	return time.Duration(timeoutS*float64(time.Second)) + Allowance
}

// HostDeadline is how long the host waits for a run's receipt before it
// cancels the run and reports its cleanup as UNKNOWN.
func HostDeadline(timeoutS float64) time.Duration {
	return RunBound(timeoutS) + WatchdogGrace + HostMargin
}

// Bound is RunBound for this run: with DeliverAllowance when it asks for
// its output streamed whole.
func (r *Run) Bound() time.Duration {
	if r.Deliver != nil {
		return RunBound(r.TimeoutSeconds) + DeliverAllowance
	}
	return RunBound(r.TimeoutSeconds)
}

// HostDeadline is the package's HostDeadline for this run.
func (r *Run) HostDeadline() time.Duration {
	return r.Bound() + WatchdogGrace + HostMargin
}
