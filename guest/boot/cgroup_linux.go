package boot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CgroupRoot is where the cgroup2 hierarchy is mounted.
const CgroupRoot = "/sys/fs/cgroup"

// Controllers are the controllers every run's cgroup uses.
const Controllers = "+memory +pids +cpu"

// AgentMemoryLow protects the agent's own memory: a run that presses on
// memory reclaims from itself before it reclaims from PID 1.
const AgentMemoryLow = 64 << 20

// CgroupStep is one write or mkdir in the cgroup tree.
type CgroupStep struct {
	Path  string // relative to CgroupRoot
	Mkdir bool
	Value string // written to Path when not Mkdir
}

// CgroupSteps set up the tree: the agent in a group of its own, because
// the root group has no memory.low to protect it with, and runs/ as the
// parent of every run's group. runs/ never holds a process itself: cgroup
// v2 lets only the root enable controllers for children while processes
// live in it.
var CgroupSteps = []CgroupStep{
	{Path: "cgroup.subtree_control", Value: Controllers},
	{Path: "agent", Mkdir: true},
	// "0" moves the writing process, every thread of it.
	{Path: "agent/cgroup.procs", Value: "0"},
	{Path: "agent/memory.low", Value: fmt.Sprint(AgentMemoryLow)},
	{Path: "runs", Mkdir: true},
	{Path: "runs/cgroup.subtree_control", Value: Controllers},
}

// String reads like the shell command that does the same.
func (s CgroupStep) String() string {
	p := filepath.Join(CgroupRoot, s.Path)
	if s.Mkdir {
		return "mkdir " + p
	}
	return fmt.Sprintf("echo %q > %s", s.Value, p)
}

// Do runs the step; a directory that exists already counts as made.
func (s CgroupStep) Do() error {
	p := filepath.Join(CgroupRoot, s.Path)
	var err error
	if s.Mkdir {
		err = os.Mkdir(p, 0o755)
		if errors.Is(err, os.ErrExist) {
			err = nil
		}
	} else {
		err = os.WriteFile(p, []byte(s.Value), 0)
	}
	if err != nil {
		return fmt.Errorf("boot: %s: %w", s, err)
	}
	return nil
}

// SetupCgroups runs CgroupSteps in order and stops at the first failure:
// without its cgroups the agent cannot bound a run.
func SetupCgroups() error {
	if err := unix.Access(filepath.Join(CgroupRoot, "cgroup.controllers"), unix.R_OK); err != nil {
		return fmt.Errorf("boot: no cgroup2 at %s: %w", CgroupRoot, err)
	}
	for _, s := range CgroupSteps {
		if err := s.Do(); err != nil {
			return err
		}
	}
	return nil
}
