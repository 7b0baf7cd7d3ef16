package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"pybox/host/paths"
	"pybox/host/vm"
)

// Phases of a VM in state.json.
const (
	PhaseBooting    = "booting"
	PhaseRunning    = "running"
	PhaseRestarting = "restarting" // the guest was wedged; it boots again
)

// State is state.json: what the supervisor runs, for `pybox vm status`
// and `pybox vm stop`. The supervisor writes it; it is gone when the VM is.
type State struct {
	Phase         string `json:"phase"`
	SupervisorPid int    `json:"supervisor_pid"`
	QEMUPid       int    `json:"qemu_pid,omitempty"`
	Accel         string `json:"accel,omitempty"`
	// Arch is the guest's architecture (x86_64 or arm64); empty in the
	// state of a supervisor from before guests had a choice of one.
	Arch    string `json:"arch,omitempty"`
	Machine string `json:"machine,omitempty"`
	Channel string `json:"channel,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	// Jail says what confines what QEMU may reach on the host: its mode
	// first (namespaces, landlock, none), then what it gives or why
	// there is none.
	Jail         string     `json:"jail,omitempty"`
	StartedAt    time.Time  `json:"started_at"`
	BootMS       int64      `json:"boot_ms,omitempty"`
	AgentVersion string     `json:"agent_version,omitempty"`
	AgentCommit  string     `json:"agent_commit,omitempty"`
	GuestKernel  string     `json:"guest_kernel,omitempty"`
	Capabilities []string   `json:"capabilities,omitempty"`
	Kernel       string     `json:"kernel"`
	Initramfs    string     `json:"initramfs"`
	MemoryMiB    int        `json:"memory_mib"`
	CPUs         int        `json:"cpus"`
	Images       []vm.Image `json:"images"`
	// Data are the data folders shared with the guest, read-only.
	Data []vm.DataShare `json:"data,omitempty"`
	// GuestImages are the images the guest says it mounted, with the
	// digests it was given.
	GuestImages []vm.Image `json:"guest_images,omitempty"`
	// Health is empty while the guest answers the supervisor's pings,
	// else since when and how it does not.
	Health string `json:"health,omitempty"`
	// Restarts are the supervisor's recent restarts of a wedged guest.
	Restarts []Restart `json:"restarts,omitempty"`
}

// Restart is one restart of the guest by its supervisor.
type Restart struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// writeLastExit keeps why the supervisor stopped the VM by itself, for
// `pybox vm status` to say after the VM is gone.
func writeLastExit(d paths.VM, reason string) {
	b, _ := json.Marshal(lastExit{At: time.Now().UTC(), Reason: reason})
	writeFileAtomic(d.LastExit(), b)
}

type lastExit struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// readLastExit says why the supervisor last stopped the VM by itself, or "".
func readLastExit(d paths.VM) string {
	b, err := os.ReadFile(d.LastExit())
	var le lastExit
	if err != nil || json.Unmarshal(b, &le) != nil {
		return ""
	}
	return fmt.Sprintf("at %s, %s", le.At.Format(time.RFC3339), le.Reason)
}

// ReadState reads state.json; (nil, nil) when there is none.
func ReadState(d paths.VM) (*State, error) {
	b, err := os.ReadFile(d.State())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func writeState(d paths.VM, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(d.State(), append(b, '\n'))
}

// writeFileAtomic writes a file so that a reader sees the old content or
// the new, never half of it.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// leftovers are the files a VM leaves while it runs.
func leftovers(d paths.VM) []string {
	return []string{d.Socket(), d.ConsoleSocket(), d.GuestSocket(), d.State(), d.Config(), vm.PidFile(d.Dir)}
}

// removeLeftovers deletes a stopped VM's files and returns those it found.
func removeLeftovers(d paths.VM) []string {
	var found []string
	for _, p := range leftovers(d) {
		if err := os.Remove(p); err == nil {
			found = append(found, p)
		}
	}
	return found
}
