//go:build linux

package box

import (
	"errors"

	"pybox/shared/wire"
)

// Descriptors box-init is started with, beside stdin, stdout and stderr.
const (
	configFD  = 3 // read: childConfig as JSON, then end of file
	reportFD  = 4 // write: report lines; close-on-exec
	controlFD = 5 // a warm box's: the agent's socket, the program's fd 3 (launcher.ControlFD)
)

// programID is the program's uid and gid inside the box.
const programID = 1000

// hostIDs are the unprivileged ids of the guest that a box's user
// namespace maps its uid/gid 0 (box-init's setup only) and programID to.
// Boxes alive at the same time (a run, and warm boxes waiting for the
// next) each get ids of their own, so that nothing the kernel accounts
// per uid (pipe buffers, pending signals, inotify watches) is shared, and
// no box can signal another's processes.
type hostIDs struct {
	root    int // the box's 0, as the agent sees it
	program int // programID, as the agent sees it
}

// maxSlots bounds the boxes alive at once: the runs, the warm boxes of
// every image, and what failed cleanups set aside. Slot 63 has ids
// 226000 and 227000.
const maxSlots = 64

// slotIDs are the ids of slot n: slot 0 has 100000 and 101000.
func slotIDs(n int) hostIDs {
	return hostIDs{root: 100000 + 2000*n, program: 101000 + 2000*n}
}

// exitSetup is box-init's exit status when a step fails before exec.
const exitSetup = 125

// childConfig is everything box-init needs, sent on configFD.
type childConfig struct {
	Root    string            `json:"root"`    // the image's directory, the box's read-only root
	Staging string            `json:"staging"` // the staging tmpfs, the box's /tmp
	Argv    []string          `json:"argv"`    // argv[0] is looked up in the box's PATH
	Env     []string          `json:"env"`
	AgentNS map[string]uint64 `json:"agent_ns"` // the agent's namespace inodes, by /proc/self/ns name
	UID     int               `json:"uid"`
	GID     int               `json:"gid"`
	// Data are the data folders to bind, read-only, at /data/<name>.
	Data []dataMount `json:"data,omitempty"`
	// Control: box-init has the agent's socket on controlFD, and the
	// program (a warm box's launcher) gets it as its fd 3.
	Control bool `json:"control,omitempty"`
	// FileSizeMax is RLIMIT_FSIZE: no file the program writes may be
	// larger than its /tmp could hold, so that no sparse file is far
	// larger than the space it takes.
	FileSizeMax int64 `json:"file_size_max"`

	// The benchmark build only (seal_bench.go): leave out the posture
	// check, or the check and the seccomp filter. Any other build's
	// box-init refuses a configuration with either set.
	SkipPosture bool `json:"skip_posture,omitempty"`
	SkipSeccomp bool `json:"skip_seccomp,omitempty"`
}

// dataMount is a data folder's mount in the agent (Source), to be bound
// at /data/<Name> in the box.
type dataMount struct {
	Name   string `json:"name"`
	Source string `json:"source"`
}

// check says what is wrong with a configuration box-init was given.
func (c childConfig) check() error {
	if c.Root == "" || c.Staging == "" || len(c.Argv) == 0 || c.UID == 0 || c.GID == 0 || c.FileSizeMax <= 0 {
		return errors.New("incomplete configuration")
	}
	if (c.SkipPosture || c.SkipSeccomp) && !benchBuild {
		return errors.New("this build seals every box: skip_posture and skip_seccomp exist only in the benchmark build")
	}
	return nil
}

// report is one line box-init writes on reportFD: its posture, the step
// that failed, or, once the program has ended, the program's wait status.
type report struct {
	Posture    *wire.Posture `json:"posture,omitempty"`
	Step       string        `json:"step,omitempty"`
	Error      string        `json:"error,omitempty"`
	WaitStatus *uint32       `json:"wait_status,omitempty"`
}

// namespaces are the namespaces a box gets, by their /proc/self/ns name.
var namespaces = []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"}
