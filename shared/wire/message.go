package wire

import (
	"encoding/json"
	"fmt"
)

// ProtocolVersion is checked in the hello handshake; a peer that speaks
// another version is refused.
const ProtocolVersion = 2

// Message types. Every request the host sends carries an ID; the guest's
// answer carries the same ID. A run is answered once, by its receipt (or by
// an error such as busy); a cancel is answered at once with ok, and the
// run it cancelled is then answered by its own receipt.
const (
	TypeHello    = "hello"    // host → guest: Hello; guest → host: Hello
	TypePing     = "ping"     // host → guest
	TypePong     = "pong"     // guest → host
	TypeRun      = "run"      // host → guest: Run
	TypeReceipt  = "receipt"  // guest → host: Result
	TypeOutput   = "output"   // guest → host: OutputChunk, before a run's receipt (Run.Deliver)
	TypeCancel   = "cancel"   // host → guest: Cancel
	TypeOK       = "ok"       // guest → host: the request was done
	TypeShutdown = "shutdown" // host → guest: sync and power off
	TypeError    = "error"    // guest → host (or supervisor → client): Error
)

// CapUnsealable is announced in hello only by the benchmark build of the
// agent (make bench-guest), whose boxes can be switched to run without
// the posture check or the seccomp filter. The product's commands run
// nothing through such an agent.
const CapUnsealable = "unsealable"

// Error codes a client can act on.
const (
	ErrBusy       = "busy"        // another run is in progress; nothing was queued
	ErrBadRequest = "bad_request" // the request broke a rule; nothing ran
	ErrNoImage    = "no_image"    // the VM has no such image
	ErrNoData     = "no_data"     // the VM has no such data folder
	ErrUnhealthy  = "unhealthy"   // the agent could not clean a box and refuses runs until it recovers
	ErrNoVM       = "no_vm"       // the supervisor has no guest (VM stopped or stopping)
	ErrProtocol   = "protocol"    // a malformed or unexpected message
	ErrInternal   = "internal"
	// ErrNoReceipt: no receipt came within the run's bound
	// (HostDeadline); the run was cancelled and its cleanup is unknown.
	ErrNoReceipt = "no_receipt"
)

// Message is one frame's payload.
type Message struct {
	Type   string       `json:"type"`
	ID     uint64       `json:"id"`
	Hello  *Hello       `json:"hello,omitempty"`
	Run    *Run         `json:"run,omitempty"`
	Result *Result      `json:"result,omitempty"`
	Cancel *Cancel      `json:"cancel,omitempty"`
	Error  *Error       `json:"error,omitempty"`
	Output *OutputChunk `json:"output,omitempty"`
	// Status rides on a pong: what the agent is doing.
	Status *AgentStatus `json:"status,omitempty"`
}

// AgentStatus is what the agent is doing when it answers a ping.
type AgentStatus struct {
	// Health is "healthy", or why the agent refuses runs.
	Health string `json:"health"`
	// Run is the run in progress, if any.
	Run *RunProgress `json:"run,omitempty"`
	// Warm says how each image's warm box is.
	Warm []WarmBox `json:"warm,omitempty"`
	// Memory is the guest's memory as its kernel counts it.
	Memory *GuestMemory `json:"memory,omitempty"`
}

// GuestMemory is the guest's memory, in bytes, from its kernel's count
// (/proc/meminfo): Total = Used + Cache + Free.
type GuestMemory struct {
	Total int64 `json:"total"`
	// Used is what the kernel and processes hold, files kept in memory
	// only (the initramfs, tmpfs) included.
	Used int64 `json:"used"`
	// Cache is the page cache the kernel may drop (image and data files
	// read).
	Cache int64 `json:"cache"`
	Free  int64 `json:"free"`
	// Warm is what the warm boxes hold, a part of Used and Cache.
	Warm int64 `json:"warm"`
}

// WarmBox is how an image's warm box is: "warming" (for ForMS, importing
// Importing), "ready" (waiting for ForMS, with its preload), "cold" (none,
// and Reason says why) or "off" (warm boxes are turned off).
type WarmBox struct {
	Image     string   `json:"image"`
	State     string   `json:"state"`
	ForMS     int64    `json:"for_ms,omitempty"`
	Importing string   `json:"importing,omitempty"`
	Preloaded []string `json:"preloaded,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	// MemoryBytes is what the box holds now (its cgroup's count).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// RunProgress is where the run in progress is.
type RunProgress struct {
	RunID string `json:"run_id"`
	Image string `json:"image"`
	// Phase is setup, program, settle, output or cleanup.
	Phase   string `json:"phase"`
	PhaseMS int64  `json:"phase_ms"` // time in this phase so far
	RunMS   int64  `json:"run_ms"`   // time since the run's request
	// BoundMS is the run's whole bound (RunBound).
	BoundMS int64 `json:"bound_ms"`
}

// Hello opens every connection. The host sends its protocol version; the
// guest answers with its own and what it is.
type Hello struct {
	Protocol     int         `json:"protocol"`
	AgentVersion string      `json:"agent_version,omitempty"`
	AgentCommit  string      `json:"agent_commit,omitempty"`
	Kernel       string      `json:"kernel,omitempty"`
	Capabilities []string    `json:"capabilities,omitempty"`
	Images       []ImageInfo `json:"images,omitempty"`
	// Data names the data folders the guest mounted.
	Data []string `json:"data,omitempty"`
}

// ImageInfo names an image the guest mounted and the digest it verified,
// with the Python version and Debian suite the image says it holds (see
// ImageAbout; empty for an image that does not say).
type ImageInfo struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Python string `json:"python,omitempty"`
	Suite  string `json:"suite,omitempty"`
}

// Cancel asks the guest to stop the run with this ID.
type Cancel struct {
	RunID string `json:"run_id"`
}

// Error says why a request was not done.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Cleanup is the cleanup status when the error concerns a run that
	// may have started (for example the guest went away mid-run).
	Cleanup *Cleanup `json:"cleanup,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Encode marshals m for a frame.
func Encode(m *Message) ([]byte, error) { return json.Marshal(m) }

// Decode unmarshals a frame's payload and checks that it is a known type
// with the body that type needs. It rejects unknown fields: a peer that
// sends them speaks another version.
func Decode(p []byte) (*Message, error) {
	var m Message
	if err := decodeStrict(p, &m); err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return &m, nil
}

func (m *Message) check() error {
	need := map[string]bool{
		TypeHello: m.Hello != nil, TypeRun: m.Run != nil, TypeReceipt: m.Result != nil,
		TypeCancel: m.Cancel != nil, TypeError: m.Error != nil, TypeOutput: m.Output != nil,
		TypePing: true, TypePong: true, TypeOK: true, TypeShutdown: true,
	}
	ok, known := need[m.Type]
	if !known {
		return fmt.Errorf("wire: unknown message type %q", m.Type)
	}
	if !ok {
		return fmt.Errorf("wire: %s message without its body", m.Type)
	}
	return nil
}
