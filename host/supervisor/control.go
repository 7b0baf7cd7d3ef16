package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"pybox/host/client"
	"pybox/host/escape"
	"pybox/host/paths"
	"pybox/host/vm"
	"pybox/shared/wire"
)

// ErrRunning is returned by Start when a VM runs (or boots) already.
var ErrRunning = errors.New("the VM is already running")

// StartOptions say what `pybox vm start` asked for.
type StartOptions struct {
	Home  string
	Accel string // auto, kvm or tcg
	VM    vm.Config
	// Command re-executes this program as the supervisor: the supervisor
	// runs Main(dir) where dir is appended to Command.
	Command []string
	// Say receives progress lines.
	Say func(string)
	// Exited, when set, receives the supervisor's exit status once it
	// ends (see Foreground); -1 when a signal killed it.
	Exited chan<- int
}

// StartError is a start that failed; ConsoleTail is the end of the
// console log, which usually says why.
type StartError struct {
	Reason      string
	ConsoleTail []string
	Log         string // the console log's path
}

func (e *StartError) Error() string { return "the VM did not start: " + e.Reason }

// Start launches a detached supervisor and returns once the guest has
// said hello (or the start failed, and nothing is left running).
func Start(ctx context.Context, o StartOptions) (*State, error) {
	d := paths.ForVM(o.Home)
	if err := d.Ensure(); err != nil {
		return nil, err
	}
	if err := o.VM.Check(); err != nil {
		return nil, err
	}
	if err := vm.CheckDataPlaces(o.VM.Data, o.Home); err != nil {
		return nil, err
	}
	o.VM.Dir = d.Dir
	lock, ok, err := tryLock(d.Lock())
	if err != nil {
		return nil, err
	}
	if !ok {
		st, _ := ReadState(d)
		return st, ErrRunning
	}
	// Held until the supervisor has its own copy: no other start can slip in.
	defer lock.Close()
	cleanup(d, nil)
	os.Remove(d.LastExit())
	// The images were verified (superblock and sha256) when they were
	// resolved from the store, or hashed just now for --image-file.
	b, err := json.Marshal(startConfig{Home: o.Home, Accel: o.Accel, VM: o.VM})
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(d.Config(), b); err != nil {
		return nil, err
	}
	events, pid, err := spawn(d, o.Command, lock, o.Exited)
	if err != nil {
		return nil, err
	}
	lock.Close()
	return waitReady(ctx, d, events, pid, o.Say)
}

// spawn starts the supervisor in its own session, with the lock and the
// write end of the events pipe as descriptors 3 and 4.
func spawn(d paths.VM, command []string, lock *os.File, exited chan<- int) (*os.File, int, error) {
	if len(command) == 0 {
		return nil, 0, errors.New("supervisor: no command to start the supervisor with")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, 0, err
	}
	defer w.Close()
	logf, err := openSupervisorLog(d)
	if err != nil {
		r.Close()
		return nil, 0, err
	}
	defer logf.Close()
	cmd := exec.Command(command[0], append(command[1:], d.Dir)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = d.Dir                      // not the caller's directory, which it would keep busy
	cmd.ExtraFiles = []*os.File{lock, w} // fds 3 and 4: lockFD, eventsFD
	// Its own session: no terminal, no job control signals from the shell
	// that ran `pybox vm start`.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		return nil, 0, fmt.Errorf("supervisor: starting %s: %w", command[0], err)
	}
	pid := cmd.Process.Pid
	// Reap it if it ends while this process lives; after that, init does.
	go func() {
		cmd.Wait()
		if exited != nil {
			exited <- cmd.ProcessState.ExitCode()
		}
	}()
	return r, pid, nil
}

func openSupervisorLog(d paths.VM) (*os.File, error) {
	p := d.SupervisorLog()
	if err := os.Rename(p, p+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
}

// waitReady follows the supervisor's events until it says ready or fails.
// Cancelling ctx (Ctrl-C) stops the supervisor, and with it the VM.
func waitReady(ctx context.Context, d paths.VM, events *os.File, pid int, say func(string)) (*State, error) {
	defer events.Close()
	type outcome struct {
		st  *State
		err string
	}
	done := make(chan outcome, 1)
	go func() {
		sc := bufio.NewScanner(events)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			switch {
			case e.Note != "" && say != nil:
				say(e.Note)
			case e.Ready != nil:
				done <- outcome{st: e.Ready}
				return
			case e.Error != "":
				done <- outcome{err: e.Error}
				return
			}
		}
		done <- outcome{err: "the supervisor exited without saying why; the end of " + d.SupervisorLog() + ":\n  " +
			strings.Join(logTail(d.SupervisorLog(), 5), "\n  ")}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		syscall.Kill(pid, syscall.SIGTERM)
		o = outcome{err: "start cancelled"}
	}
	if o.st != nil {
		return o.st, nil
	}
	// Nothing may be left running: wait for the supervisor to let go of
	// the lock (it kills QEMU first), and clean up after it if it died.
	if !waitUnlocked(d, 15*time.Second) {
		syscall.Kill(pid, syscall.SIGKILL)
		waitUnlocked(d, 5*time.Second)
	}
	cleanup(d, nil)
	return nil, &StartError{Reason: o.err, ConsoleTail: ConsoleTail(d, 20), Log: d.ConsoleLog()}
}

// waitUnlocked waits until no supervisor holds the lock.
func waitUnlocked(d paths.VM, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); ; time.Sleep(50 * time.Millisecond) {
		if h, err := held(d.Lock()); err == nil && !h {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// cleanup removes what a dead supervisor left, killing its QEMU if that
// still runs; the caller holds the lock or knows nobody does. It returns
// what it found.
func cleanup(d paths.VM, say func(string)) []string {
	var found []string
	if st, _ := ReadState(d); st != nil && vm.Ours(st.QEMUPid, d.Dir) {
		syscall.Kill(st.QEMUPid, syscall.SIGKILL)
		found = append(found, fmt.Sprintf("QEMU process %d", st.QEMUPid))
	}
	found = append(found, removeLeftovers(d)...)
	if say != nil && len(found) > 0 {
		say("cleaned up after a VM that stopped without its supervisor: " + strings.Join(found, ", "))
	}
	return found
}

// Status is what `pybox vm status` reports.
type Status struct {
	Running bool   `json:"running"`
	Phase   string `json:"phase,omitempty"`
	State   *State `json:"state,omitempty"`
	UptimeS int64  `json:"uptime_s,omitempty"`
	// Agent says whether the guest answered a ping just now, and
	// Guest what it said it is doing.
	Agent  string            `json:"agent,omitempty"`
	PingMS float64           `json:"ping_ms,omitempty"`
	Guest  *wire.AgentStatus `json:"guest,omitempty"`
	// HostMemoryBytes is what the VM process holds in the host's memory
	// (QEMU's resident set); 0 where it is not measured (vz).
	HostMemoryBytes int64    `json:"host_memory_bytes,omitempty"`
	Cleaned         []string `json:"cleaned,omitempty"`
	Note            string   `json:"note,omitempty"`
}

// stopped is the status of a VM whose supervisor's lock was free (held
// now as lock): not running, and what the last one left behind cleaned up.
func stopped(d paths.VM, lock *os.File) *Status {
	defer lock.Close()
	return &Status{Cleaned: cleanup(d, nil), Note: lastExitNote(d)}
}

// GetStatus looks at the VM: a VM whose QEMU died is reported as not
// running, and what it left behind is cleaned up.
func GetStatus(home string) (*Status, error) {
	d := paths.ForVM(home)
	if _, err := os.Stat(d.Dir); errors.Is(err, os.ErrNotExist) {
		return &Status{}, nil
	}
	if err := d.Check(); err != nil {
		return nil, err
	}
	lock, free, err := tryLock(d.Lock())
	if err != nil {
		return nil, err
	}
	if free {
		return stopped(d, lock), nil
	}
	// A supervisor holds the lock but no state: it is starting (the
	// state comes soon) or ending (its state is gone, the lock goes
	// next, as when QEMU was killed from outside). Wait a moment to tell.
	st, err := ReadState(d)
	for deadline := time.Now().Add(3 * time.Second); (err != nil || st == nil) && time.Now().Before(deadline); st, err = ReadState(d) {
		time.Sleep(50 * time.Millisecond)
		if lock, free, _ := tryLock(d.Lock()); free {
			return stopped(d, lock), nil
		}
	}
	if err != nil || st == nil {
		return &Status{Running: true, Phase: PhaseBooting, Note: "the supervisor is starting"}, nil
	}
	s := &Status{Running: true, Phase: st.Phase, State: st, UptimeS: int64(time.Since(st.StartedAt).Seconds())}
	if st.Phase == PhaseBooting || st.Phase == PhaseRestarting {
		return s, nil
	}
	// QEMUPid is 0 where the VM runs inside the supervisor (vz): then the
	// held lock says enough.
	if st.QEMUPid != 0 && !vm.Ours(st.QEMUPid, d.Dir) {
		return reapDead(d, st), nil
	}
	s.Agent, s.PingMS, s.Guest = ping(home)
	// QEMU killed a moment ago still has its cmdline while the kernel
	// tears it down; the supervisor, asked, already knows it is gone.
	if s.Guest == nil && st.QEMUPid != 0 && !vm.Ours(st.QEMUPid, d.Dir) {
		return reapDead(d, st), nil
	}
	if st.QEMUPid != 0 {
		s.HostMemoryBytes, _ = vm.HostMemory(st.QEMUPid)
	}
	return s, nil
}

func lastExitNote(d paths.VM) string {
	if why := readLastExit(d); why != "" {
		return "the supervisor stopped the VM " + why
	}
	return ""
}

// reapDead handles a supervisor whose QEMU is gone: it normally exits by
// itself at once; if it does not, it is stopped.
func reapDead(d paths.VM, st *State) *Status {
	s := &Status{Note: fmt.Sprintf("QEMU (pid %d) is gone", st.QEMUPid)}
	if !waitUnlocked(d, 3*time.Second) {
		syscall.Kill(st.SupervisorPid, syscall.SIGKILL)
		waitUnlocked(d, 3*time.Second)
		s.Cleaned = append(s.Cleaned, fmt.Sprintf("supervisor process %d", st.SupervisorPid))
	}
	s.Cleaned = append(s.Cleaned, cleanup(d, nil)...)
	return s
}

func ping(home string) (string, float64, *wire.AgentStatus) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	notAnswering := func(err error) (string, float64, *wire.AgentStatus) {
		msg := err.Error()
		if we := (*wire.Error)(nil); errors.As(err, &we) {
			msg = we.Message // the client's errors, and the supervisor's refusals
		}
		return "not answering: " + msg, 0, nil
	}
	c, err := client.DialContext(ctx, home)
	if err != nil {
		return notAnswering(err)
	}
	defer c.Close()
	t0 := time.Now()
	st, err := c.Status(ctx)
	if err != nil {
		return notAnswering(err)
	}
	return "answering", float64(time.Since(t0).Microseconds()) / 1000, st
}

// Stop powers the VM off cleanly and waits until it is gone; if the guest
// does not power off within limit, QEMU is killed (and Say says so). It
// returns false when no VM was running.
func Stop(home string, limit time.Duration, say func(string)) (bool, error) {
	d := paths.ForVM(home)
	if _, err := os.Stat(d.Dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err := d.Check(); err != nil {
		return false, err
	}
	if h, err := held(d.Lock()); err != nil {
		return false, err
	} else if !h {
		cleanup(d, say)
		return false, nil
	}
	st, _ := ReadState(d)
	if st == nil || st.Phase == PhaseBooting || st.Phase == PhaseRestarting {
		// Booting: the supervisor stops QEMU on SIGTERM.
		if st != nil {
			syscall.Kill(st.SupervisorPid, syscall.SIGTERM)
		}
	} else if err := shutdown(home); err != nil {
		say("the guest did not take the shutdown (" + err.Error() + ")")
	}
	if waitUnlocked(d, limit) {
		cleanup(d, say)
		return true, nil
	}
	if st != nil && st.QEMUPid != 0 && vm.Ours(st.QEMUPid, d.Dir) {
		say(fmt.Sprintf("the VM did not power off within %s: killing QEMU (pid %d)", limit, st.QEMUPid))
		syscall.Kill(st.QEMUPid, syscall.SIGKILL)
	}
	if !waitUnlocked(d, 5*time.Second) && st != nil {
		say(fmt.Sprintf("the supervisor (pid %d) did not exit: killing it", st.SupervisorPid))
		syscall.Kill(st.SupervisorPid, syscall.SIGKILL)
		waitUnlocked(d, 5*time.Second)
	}
	cleanup(d, nil)
	return true, nil
}

func shutdown(home string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, home)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Shutdown(ctx)
}

// ConsoleTail returns the last n lines of this boot's console log, made
// safe to print on a terminal.
func ConsoleTail(d paths.VM, n int) []string {
	var lines []string
	b, _ := os.ReadFile(d.ConsoleLog())
	for _, l := range strings.Split(strings.ReplaceAll(string(b), "\r", ""), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, Printable(l))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

func logTail(path string, n int) []string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		lines[i] = Printable(l)
	}
	return lines
}

// Printable escapes control characters (terminal escape sequences from
// the guest among them) so that a line is safe to print.
func Printable(s string) string { return escape.Line(s) }
