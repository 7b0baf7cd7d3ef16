//go:build linux

package box

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// maxReport bounds what the agent reads from box-init's report pipe.
const maxReport = 64 << 10

// boxProc is a started box-init and the agent's ends of its pipes.
type boxProc struct {
	pid    int
	stdout *capture
	stderr *capture
	report *reports
	// exited gets box-init's wait status once (see watch).
	exited chan unix.WaitStatus
}

// watch collects box-init's exit with wait, into exited.
func (p *boxProc) watch(wait func(int) (unix.WaitStatus, *unix.Rusage)) {
	p.exited = make(chan unix.WaitStatus, 1)
	go func() {
		ws, _ := wait(p.pid)
		p.exited <- ws
	}()
}

// spawnSpec is how to start one box-init.
type spawnSpec struct {
	exe      string
	cfg      childConfig
	cgroupFD int // < 0: no cgroup (tests)
	ids      hostIDs
	stdin    *os.File // the program's fd 0; nil: /dev/null
	control  *os.File // a warm box's socket to the agent, box-init's controlFD; nil: none
	maxOut   int      // bytes kept of stdout and of stderr
	// ready, if set, is called with box-init's pid once it is started
	// and before it is given its config: box-init waits for the config
	// before anything else, so what ready makes exists before anything
	// of the program does (a net run's proxy, see listenIn). If ready
	// fails, box-init is killed and collected with wait.
	ready func(pid int) error
	wait  func(int) (unix.WaitStatus, *unix.Rusage)
}

// sysProcAttr is how box-init is cloned: every namespace at once, its
// uids mapped to unprivileged ids of the guest, and born inside the
// run's cgroup (cgroupFD < 0 only in tests on a host without cgroup2).
func sysProcAttr(cgroupFD int, hid hostIDs) *syscall.SysProcAttr {
	ids := []syscall.SysProcIDMap{
		{ContainerID: 0, HostID: hid.root, Size: 1},
		{ContainerID: programID, HostID: hid.program, Size: 1},
	}
	return &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET |
			unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP,
		UidMappings: ids,
		GidMappings: ids,
		// setgroups stays denied in the box: a process could otherwise
		// drop a group that a file's permissions deny it through.
		GidMappingsEnableSetgroups: false,
		// uid 0 of the box, so that box-init keeps its capabilities in
		// the new user namespace across exec. The agent has no
		// supplementary groups to drop, and setgroups is denied anyway.
		Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		UseCgroupFD: cgroupFD >= 0,
		CgroupFD:    cgroupFD,
		// Its own session: no controlling terminal, and no signal from
		// the agent's process group reaches it.
		Setsid: true,
	}
}

// spawn starts box-init with cfg, stdout and stderr kept up to maxOut
// bytes each. The caller owns the process and must collect it with the
// reaper.
func spawn(sp spawnSpec) (*boxProc, error) {
	var closers []*os.File
	defer func() {
		for _, f := range closers {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			closers = append(closers, r, w)
		}
		return r, w, err
	}
	stdin := sp.stdin
	if stdin == nil {
		var err error
		if stdin, err = os.Open(os.DevNull); err != nil {
			return nil, err
		}
		closers = append(closers, stdin)
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return nil, err
	}
	cfgR, cfgW, err := pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := pipe()
	if err != nil {
		return nil, err
	}
	files := []*os.File{stdin, outW, errW, cfgR, repW} // fds 0–4
	if sp.control != nil {
		files = append(files, sp.control) // controlFD
	}
	p, err := os.StartProcess(sp.exe, []string{"box-init", "box-init"}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{},
		Files: files,
		Sys:   sysProcAttr(sp.cgroupFD, sp.ids),
	})
	if err != nil {
		return nil, fmt.Errorf("start box-init: %w", err)
	}
	bp := &boxProc{pid: p.Pid}
	// The reaper collects the exit; the handle is only a pidfd to close.
	p.Release()
	if sp.ready != nil {
		if err := sp.ready(bp.pid); err != nil {
			// box-init is still reading its config: nothing of the box
			// ran. Every pipe end closes on return.
			unix.Kill(bp.pid, unix.SIGKILL)
			if sp.wait != nil {
				sp.wait(bp.pid)
			}
			return nil, err
		}
	}
	// The agent keeps only its read ends (and the config's write end);
	// once the box's processes are gone, the reads end.
	closers = []*os.File{outW, errW, cfgR, repW}
	if sp.stdin == nil {
		closers = append(closers, stdin)
	}
	bp.stdout = startCapture(outR, sp.maxOut)
	bp.stderr = startCapture(errR, sp.maxOut)
	bp.report = readReports(repR)
	go func() {
		// box-init reads to the end before anything else, so this never
		// blocks for long; if box-init died, the write fails.
		json.NewEncoder(cfgW).Encode(sp.cfg)
		cfgW.Close()
	}()
	return bp, nil
}

// reports collects box-init's report lines.
type reports struct {
	started chan struct{} // closed when a good posture arrives
	done    chan struct{} // closed at end of file
	f       *os.File

	// Valid after done.
	posture   *wire.Posture
	startedAt time.Time // when the good posture arrived: the program's start
	step      string    // the step that failed, if one did
	err       string
	program   *unix.WaitStatus // the program's own end, from box-init
}

func readReports(f *os.File) *reports {
	r := &reports{started: make(chan struct{}), done: make(chan struct{}), f: f}
	go r.read()
	return r
}

func (r *reports) read() {
	defer close(r.done)
	defer r.f.Close()
	sc := bufio.NewScanner(io.LimitReader(r.f, maxReport))
	sc.Buffer(make([]byte, 4096), maxReport)
	for sc.Scan() {
		var rep report
		if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
			r.step, r.err = "report", fmt.Sprintf("unreadable report from box-init: %v", err)
			continue
		}
		switch {
		case rep.Posture != nil && r.posture == nil:
			r.posture = rep.Posture
			if rep.Posture.OK {
				r.startedAt = time.Now()
				close(r.started)
			}
		case rep.Step != "" && r.step == "":
			r.step, r.err = rep.Step, rep.Error
		case rep.WaitStatus != nil && r.program == nil && r.startedAt != (time.Time{}):
			ws := unix.WaitStatus(*rep.WaitStatus)
			r.program = &ws
		}
	}
	// Drain past the limit so that box-init never blocks on a full pipe.
	io.Copy(io.Discard, r.f)
}

// finish waits up to d for end of file, then stops reading. It reports
// whether the pipe ended by itself.
func (r *reports) finish(d time.Duration) bool {
	select {
	case <-r.done:
		return true
	case <-time.After(d):
		r.f.SetReadDeadline(time.Now())
		<-r.done
		return false
	}
}

// refusal says why the program did not run, or "" if box-init reported
// a good posture and nothing failed after it. Call it after done.
func (r *reports) refusal() string {
	switch {
	case r.step != "":
		return fmt.Sprintf("box setup failed at step %s: %s", r.step, r.err)
	case r.posture == nil:
		return "box-init ended without reporting its posture"
	case !r.posture.OK:
		return fmt.Sprintf("posture check failed: %v", r.posture.Problems)
	}
	return ""
}
