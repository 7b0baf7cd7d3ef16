//go:build linux

package box

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/launcher"
	"pybox/shared/wire"
)

// readLine reads one message of the launcher, by deadline.
func (wb *warmBox) readLine(deadline time.Time) (string, error) {
	wb.ctl.SetReadDeadline(deadline)
	defer wb.ctl.SetReadDeadline(time.Time{})
	buf := make([]byte, 64<<10+64)
	n, err := wb.ctl.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// write sends one message to the launcher, by deadline.
func (wb *warmBox) write(msg string, deadline time.Time) error {
	wb.ctl.SetWriteDeadline(deadline)
	defer wb.ctl.SetWriteDeadline(time.Time{})
	if _, err := wb.ctl.Write([]byte(msg)); err != nil {
		return fmt.Errorf("telling the launcher %q: %w", msg, err)
	}
	return nil
}

// handOver gives wb the run's program: its input files, fresh stdout and
// stderr pipes, the code. A box still warming gets the program as soon as
// its interpreter is up, a run's CPU weight, and until by to stop its
// preload at the next module. Then it checks what the launcher holds,
// binds the run's data folders, sets the box's memory limit to what a
// cold box's program could allocate, and tells the launcher to go. Each
// exchange has handOverLimit from its own start. Until "go", nothing of
// the program has run: an error leaves the run free to make a cold box.
func (rn *run) handOver(ctx context.Context, wb *warmBox, by time.Time) (err error) {
	rn.mu.Lock()
	rn.warm, rn.boxID, rn.slot = wb, wb.id, wb.slot
	rn.mu.Unlock()
	rn.cg, rn.st, rn.proc = wb.cg, wb.st, wb.proc
	rn.at.cgroup = time.Now()
	if err := rn.st.addInput(rn.req.Files); err != nil {
		return err
	}
	rn.at.staged = time.Now()
	if err := rn.cg.set("cpu.weight", strconv.Itoa(cpuWeightRun)); err != nil {
		return fmt.Errorf("cpu.weight: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer outW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		return err
	}
	defer errW.Close()
	out, errOut := startCapture(outR, rn.req.MaxOutputBytes), startCapture(errR, rn.req.MaxOutputBytes)
	defer func() {
		if err != nil { // the program's pipes were never the box's
			out.finish(0)
			errOut.finish(0)
		}
	}()
	if err := wb.await(ctx, wb.preloading, by, "did not start its interpreter"); err != nil {
		return err
	}
	select {
	case <-wb.done:
		if wb.err != nil {
			return wb.err
		}
	default:
	}
	if err := wb.sendProgram(rn.req.Code, outW, errW); err != nil {
		return err
	}
	if err := wb.await(ctx, wb.done, by, "did not stop its preload"); err != nil {
		return err
	}
	if wb.err != nil {
		return wb.err
	}
	// The preload's output is done with: a program's starts empty, and
	// the run's cleanup finishes its pipes.
	for name, c := range map[string]*capture{"stdout": rn.proc.stdout, "stderr": rn.proc.stderr} {
		c.finish(0)
		if st, _ := c.stream(); st.Bytes > 0 {
			rn.b.logf("box: warm box %s: the preload printed %d bytes on %s (not the program's)", wb.id, st.Bytes, name)
		}
	}
	rn.proc.stdout, rn.proc.stderr = out, errOut
	line, err := wb.readLine(time.Now().Add(handOverLimit))
	if err != nil {
		return fmt.Errorf("the launcher did not report its descriptors: %v", err)
	}
	if word, rest, _ := strings.Cut(line, " "); word == launcher.Fail {
		return fmt.Errorf("the launcher could not take the program: %s", rest)
	}
	if line != launcher.Fds+" 0,1,2" {
		return fmt.Errorf("the launcher holds more than fds 0-2 (%q)", line)
	}
	if ctx.Err() != nil {
		return errors.New("the run was cancelled")
	}
	// The run's data folders, bound and checked as box-init does for a
	// cold box.
	if len(rn.req.Data) > 0 {
		data := rn.b.dataMounts(rn.req.Data)
		if err := bindData(wb.proc.pid, slotIDs(wb.slot), data); err != nil {
			return fmt.Errorf("binding the data folders: %w", err)
		}
		if problems := checkData(wb.proc.pid, data); len(problems) > 0 {
			return fmt.Errorf("the data folders' posture: %s", strings.Join(problems, "; "))
		}
	}
	// The box becomes the run's: its memory limit is a cold box's plus
	// what the preload holds that the program cannot free (the page
	// cache it read is reclaimable, and not counted), no OOM preference.
	held, err := rn.cg.unreclaimable()
	if err != nil {
		return err
	}
	preload := max(0, held-wb.fresh)
	if err := rn.cg.set("memory.max", strconv.FormatInt(memoryMax+preload, 10)); err != nil {
		return fmt.Errorf("memory.max: %w", err)
	}
	for _, pid := range rn.cg.procs() {
		os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0"), 0)
	}
	rn.cpu0, _ = rn.cg.stats()
	rn.rec.Memory.PreloadBytes, rn.rec.Memory.LimitBytes = preload, memoryMax+preload
	rn.b.bound(rn.req.RunID, memoryMax+preload)
	// A net run's proxy listens before anything of the program runs.
	if rn.req.Net {
		if err := rn.listen(wb.proc.pid); err != nil {
			return err
		}
	}
	keep := keeps(programImports(rn.req.Code), wb.preloaded)
	if err := wb.write(launcher.Go+" "+strconv.Itoa(keep), time.Now().Add(handOverLimit)); err != nil {
		return err
	}
	rn.go_ = time.Now()
	rn.at.spawned = rn.go_
	wb.ctl.Close()
	rn.rec.Box = &wire.BoxInfo{Warm: true, Preloaded: slices.Clone(wb.preloaded),
		PrepareMS: wb.readyAt.Sub(wb.spawned).Milliseconds(), ReadyMS: rn.go_.Sub(wb.readyAt).Milliseconds(),
		PrepareCPUMS: (rn.cpu0.userUsec + rn.cpu0.systemUsec) / 1000}
	// The next run's box starts warming now, at the warm CPU weight.
	rn.b.replenish(wb.key())
	return nil
}

// await waits for ch (or the box's end), the run's cancel, or by.
func (wb *warmBox) await(ctx context.Context, ch <-chan struct{}, by time.Time, what string) error {
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-ch:
	case <-wb.done:
	case <-ctx.Done():
		return errors.New("the run was cancelled")
	case <-t.C:
		return fmt.Errorf("the warm box %s within the setup's allowance", what)
	}
	return nil
}

// sendProgram sends the code, with the program's stdout and stderr.
func (wb *warmBox) sendProgram(code string, stdout, stderr *os.File) error {
	rights := unix.UnixRights(int(stdout.Fd()), int(stderr.Fd()))
	conn, err := wb.ctl.SyscallConn()
	if err != nil {
		return err
	}
	wb.ctl.SetWriteDeadline(time.Now().Add(handOverLimit))
	defer wb.ctl.SetWriteDeadline(time.Time{})
	var serr error
	if err := conn.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte(launcher.Run+code), rights, nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil || serr != nil {
		return fmt.Errorf("sending the program: %v", errors.Join(err, serr))
	}
	return nil
}

// keeps says how many modules of the preload, in order, the program
// imports itself, by its import statements, directly or through a module
// listed after them (the list is in the order of their dependencies: a
// program that imports pandas needs numpy before it). What those modules
// set at import (warnings filters) stays for the program, as their import
// would have set it in a cold box; the rest goes back to how a fresh
// interpreter has it.
func keeps(imports, preloaded []string) int {
	n := 0
	for i, m := range preloaded {
		for _, name := range imports {
			if name == m || strings.HasPrefix(name, m+".") {
				n = i + 1
			}
		}
	}
	return n
}

// addInput writes a run's input files into a box's existing input/.
func (s *staging) addInput(files []wire.InputFile) error {
	dir := filepath.Join(s.tmp, "input")
	if len(files) == 0 {
		return nil
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeOwned(filepath.Join(dir, f.Name), f.Content, 0o444, s.ids.root); err != nil {
			return fmt.Errorf("input file %q: %w", f.Name, err)
		}
	}
	return os.Chmod(dir, 0o555)
}
