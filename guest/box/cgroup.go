//go:build linux

package box

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// The run cgroup is handled through its files: a handful of writes and
// reads. containerd/cgroups' cgroup2 manager would bring systemd, D-Bus,
// eBPF and protobuf code into a static PID 1 for them; only its mode
// check is used.

// Limits every run's cgroup gets.
const (
	memoryMax = 512 << 20
	pidsMax   = 128
)

// cgroupSetting is one file written when a run's cgroup is made.
type cgroupSetting struct {
	file  string
	value string
	// optional settings are skipped when the kernel lacks the file
	// (memory.swap.max without swap accounting).
	optional bool
}

func (s cgroupSetting) String() string { return fmt.Sprintf("echo %s > %s", s.value, s.file) }

var cgroupSettings = []cgroupSetting{
	{file: "memory.max", value: strconv.Itoa(memoryMax)},
	{file: "memory.swap.max", value: "0", optional: true},
	// An OOM kill takes the whole box, not one process of it.
	{file: "memory.oom.group", value: "1"},
	{file: "pids.max", value: strconv.Itoa(pidsMax)},
}

// runCgroup is one run's cgroup, /sys/fs/cgroup/runs/<run_id>.
type runCgroup struct {
	dir string
	fd  int // the directory, for clone's CLONE_INTO_CGROUP
}

// checkCgroup2 says whether the guest has a unified cgroup2 hierarchy.
func checkCgroup2() error {
	if cgroups.Mode() != cgroups.Unified {
		return errors.New("box: /sys/fs/cgroup is not a cgroup2 hierarchy (guest/boot mounts it; is the kernel built with kernelconfig/?)")
	}
	return nil
}

// CPU weights (cpu.weight, 1–10000, 100 by default): a warm box warming
// or waiting gets a tenth of what a run gets, so that a running program
// is slowed as little as possible by the next one's preparation.
const (
	cpuWeightRun  = 100
	cpuWeightWarm = 10
)

// makeCgroup creates the run's cgroup under parent and sets its limits
// and CPU weight.
func makeCgroup(parent, runID string, weight int) (*runCgroup, error) {
	c := &runCgroup{dir: filepath.Join(parent, runID), fd: -1}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("make the run's cgroup: %w", err)
	}
	settings := append(slices.Clone(cgroupSettings), cgroupSetting{file: "cpu.weight", value: strconv.Itoa(weight), optional: true})
	for _, s := range settings {
		err := os.WriteFile(filepath.Join(c.dir, s.file), []byte(s.value), 0)
		if err != nil && !(s.optional && errors.Is(err, os.ErrNotExist)) {
			return c, fmt.Errorf("%s: %w (are +memory +pids enabled in %s/cgroup.subtree_control?)", s, err, parent)
		}
	}
	fd, err := unix.Open(c.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return c, fmt.Errorf("open the run's cgroup: %w", err)
	}
	c.fd = fd
	return c, nil
}

// descriptor is the directory's descriptor for CLONE_INTO_CGROUP, or -1
// without a cgroup (tests).
func (c *runCgroup) descriptor() int {
	if c == nil {
		return -1
	}
	return c.fd
}

// set writes one of the cgroup's files.
func (c *runCgroup) set(file, value string) error {
	return os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0)
}

// read reads one of the cgroup's files that holds a number.
func (c *runCgroup) read(file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
}

// procs lists the processes in the cgroup, as the agent sees their pids.
func (c *runCgroup) procs() []int {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// kill kills every process in the cgroup at once (cgroup.kill).
func (c *runCgroup) kill() error {
	return os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0)
}

// populated reports whether any process is left in the cgroup.
func (c *runCgroup) populated() (bool, error) {
	kv, err := readKV(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	return kv["populated"] != 0, nil
}

// waitEmpty waits until the cgroup holds no process, up to d. Killed
// processes leave within milliseconds; one stuck in the kernel may not.
func (c *runCgroup) waitEmpty(d time.Duration) error {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for {
		full, err := c.populated()
		if err != nil {
			return err
		}
		if !full {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes are left in %s after %v", c.dir, d)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// unreclaimable is what the cgroup holds that its processes cannot give
// back under its limit: memory.current less the page cache of files
// (memory.stat "file" less "shmem", which, without swap, stays).
func (c *runCgroup) unreclaimable() (int64, error) {
	cur, err := c.read("memory.current")
	if err != nil {
		return 0, err
	}
	st, err := readKV(filepath.Join(c.dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	return cur - max(0, st["file"]-st["shmem"]), nil
}

// cgroupStats is what the receipt takes from the cgroup.
type cgroupStats struct {
	memoryPeak int64
	oomKills   int64 // memory.events oom_kill
	userUsec   int64
	systemUsec int64
	pidsMaxHit int64 // pids.events max: forks refused
}

// stats reads the cgroup's counters. Read once the cgroup is empty,
// memory.peak is final.
func (c *runCgroup) stats() (cgroupStats, error) {
	var s cgroupStats
	peak, err := os.ReadFile(filepath.Join(c.dir, "memory.peak"))
	if err != nil {
		return s, err
	}
	s.memoryPeak, err = strconv.ParseInt(string(bytes.TrimSpace(peak)), 10, 64)
	if err != nil {
		return s, fmt.Errorf("memory.peak: %w", err)
	}
	mem, err := readKV(filepath.Join(c.dir, "memory.events"))
	if err != nil {
		return s, err
	}
	cpu, err := readKV(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return s, err
	}
	pids, err := readKV(filepath.Join(c.dir, "pids.events"))
	if err != nil {
		return s, err
	}
	s.oomKills = mem["oom_kill"]
	s.userUsec, s.systemUsec = cpu["user_usec"], cpu["system_usec"]
	s.pidsMaxHit = pids["max"]
	return s, nil
}

// remove closes the cgroup's descriptor and removes its directory. A
// cgroup is removable once its last process has been reaped; the
// directory may still be busy for a moment after that.
func (c *runCgroup) remove() error {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	var err error
	for i := 0; i < 20; i++ {
		err = unix.Rmdir(c.dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("rmdir %s: %w", c.dir, err)
}

// gone reports whether the cgroup's directory no longer exists.
func (c *runCgroup) gone() bool {
	_, err := os.Lstat(c.dir)
	return errors.Is(err, os.ErrNotExist)
}

// readKV reads a flat-keyed cgroup file ("key value" lines).
func readKV(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseKV(b), nil
}

func parseKV(b []byte) map[string]int64 {
	kv := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			kv[k] = n
		}
	}
	return kv
}
