package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// ProtocolVersion is checked in the hello handshake; a peer that speaks
// another version is refused. 3 framed every message as a header of kind
// and ID and a JSON body; 4 gives a run frame a header of its own
// (RunHeader), so that the supervisor routes runs without their body;
// 5 runs several boxes at once, admitted by memory, and a pong lists
// every run in progress; 6 carries the connections of a run the user let
// reach the network as streams of that run (Run.Net, TypeNetOpen and the
// other net frames), to an agent that announces CapNet; 7 gives such a
// run the ports of the user's list (Run.NetPorts) for the box's direct
// listeners, and its resolver's lookups as streams the host answers.
const ProtocolVersion = 7

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
	// TypeFacts is the supervisor's own record of a run's data folders,
	// sent to the client just before the run's receipt (HostFacts).
	TypeFacts = "facts"
)

// kinds are the frame header's codes for the message types, in the order
// of the first byte of every frame's payload.
var kinds = []string{"", TypeHello, TypePing, TypePong, TypeRun, TypeReceipt, TypeOutput,
	TypeCancel, TypeOK, TypeShutdown, TypeError, TypeFacts,
	TypeNetOpen, TypeNetData, TypeNetWindow, TypeNetClose}

// CapUnsealable is announced in hello only by the benchmark build of the
// agent (make bench-guest), whose boxes can be switched to run without
// the posture check or the seccomp filter. The product's commands run
// nothing through such an agent.
const CapUnsealable = "unsealable"

// CapNet is announced in hello by an agent that carries the streams of
// runs that open the network (Run.Net, TypeNetOpen); a client sends such
// a run only to an agent that announces it.
const CapNet = "net"

// Error codes a client can act on.
const (
	ErrBusy       = "busy"        // this client's run is in progress; nothing was queued
	ErrNoMemory   = "no_memory"   // the runs in progress hold the memory another would need; nothing was queued
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
	Facts  *HostFacts   `json:"facts,omitempty"`
	// Net is a stream's frame (TypeNetOpen ... TypeNetClose), binary on
	// the wire.
	Net *NetFrame `json:"-"`
}

// HostFacts is the host's record of what a run saw of its data folders
// (where each is, its counts and listing digest), which the client puts
// into the run's receipt over whatever the guest wrote there: the guest
// is told the folders' names only.
type HostFacts struct {
	Data []DataFolder `json:"data"`
}

// AgentStatus is what the agent is doing when it answers a ping.
type AgentStatus struct {
	// Health is "healthy", or why the agent refuses runs.
	Health string `json:"health"`
	// Runs are the runs in progress, oldest first.
	Runs []RunProgress `json:"runs,omitempty"`
	// Room is how the guest's memory is shared between runs, and what
	// is left for another.
	Room *Room `json:"room,omitempty"`
	// SetAside lists what failed cleanups left of earlier boxes: kept
	// out of use (its memory still counted), retried at each run.
	SetAside []string `json:"set_aside,omitempty"`
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
	Image string `json:"image"`
	// Net is a box for the runs that open the network: its python3
	// has the proxy in its environment.
	Net       bool     `json:"net,omitempty"`
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
	// MemoryBytes is what its box holds now; LimitBytes what it may
	// hold, which admission set aside for it.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	LimitBytes  int64 `json:"limit_bytes,omitempty"`
	// Client is who asked for the run, as the run said (Run.Client).
	Client string `json:"client,omitempty"`
}

// Room is the guest's memory as admission sees it, in bytes: a run is
// admitted when its limit fits in Left. Total = Guest + Warm + Runs +
// Headroom + Left (Left may be negative when the guest grew).
type Room struct {
	// Total is the guest's memory with nothing ballooned away.
	Total int64 `json:"total"`
	// Guest is what the kernel and the agent hold outside the boxes.
	Guest int64 `json:"guest"`
	// Warm is what the warm boxes hold.
	Warm int64 `json:"warm"`
	// Runs is the sum of the limits of the runs admitted.
	Runs int64 `json:"runs"`
	// Headroom is kept for what lives outside the boxes' cgroups: the
	// agent's buffers for each run, 9p, the kernel's growth.
	Headroom int64 `json:"headroom"`
	Left     int64 `json:"left"`
	// Need is what admitting one more run takes from Left: its bound
	// and its share of the headroom.
	Need int64 `json:"need"`
	// RunsAtOnce is how many runs the VM was sized for (vm start --runs).
	RunsAtOnce int `json:"runs_at_once,omitempty"`
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

// A frame's payload is a header, then the message's body as JSON:
//
//	byte 0     the kind: the message type's code (see kinds)
//	bytes 1–8  the ID, big-endian
//	           a run's own header, for a run only (RunHeader)
//	then       the body (Hello, Run, Result, ...); none for ping, ok
//	           and shutdown, and a pong's status may be left out
//
// The header is all that routing needs: the supervisor matches answers to
// requests and forwards frames by it, without decoding bodies. The body
// is decoded strictly (DecodeStrict), once, by the process that asked.
const headerSize = 9

// legacyHello is the first byte of a frame in the JSON-only framing of
// earlier protocol versions, which a hello from an older peer is in.
const legacyHello = '{'

// Encode makes a frame's payload of m.
func Encode(m *Message) ([]byte, error) {
	kind := slices.Index(kinds, m.Type)
	if kind <= 0 {
		return nil, fmt.Errorf("wire: unknown message type %q", m.Type)
	}
	err := m.check()
	if err != nil {
		return nil, err
	}
	p := make([]byte, headerSize, headerSize+64)
	p[0] = byte(kind)
	binary.BigEndian.PutUint64(p[1:], m.ID)
	if isNet(m.Type) {
		return appendNet(p, m.Type, m.Net)
	}
	body := m.body(false)
	if m.Type == TypeRun {
		h, b := splitRun(m.Run)
		if p, err = h.appendTo(p); err != nil {
			return nil, err
		}
		body = b
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		p = append(p, b...)
	}
	return p, nil
}

// EncodeRaw makes a frame's payload of a kind, an ID and the bytes after
// them as they are (for a run, its run header and body), unchecked: for
// tests that must send what Encode never makes.
func EncodeRaw(typ string, id uint64, body []byte) []byte {
	p := make([]byte, headerSize, headerSize+len(body))
	if k := slices.Index(kinds, typ); k > 0 {
		p[0] = byte(k)
	}
	binary.BigEndian.PutUint64(p[1:], id)
	return append(p, body...)
}

// body is the body m's type carries, or nil. With fill, an empty one is
// made first, for a decoder to fill. A run's is not m.Run but part of it
// (splitRun, joinRun).
func (m *Message) body(fill bool) any {
	switch m.Type {
	case TypeHello:
		return slot(&m.Hello, fill)
	case TypeReceipt:
		return slot(&m.Result, fill)
	case TypeCancel:
		return slot(&m.Cancel, fill)
	case TypeError:
		return slot(&m.Error, fill)
	case TypeOutput:
		return slot(&m.Output, fill)
	case TypePong:
		return slot(&m.Status, fill)
	case TypeFacts:
		return slot(&m.Facts, fill)
	}
	return nil
}

// slot is the body *field points to (nil as an untyped nil), made first
// when asked.
func slot[T any](field **T, fill bool) any {
	if fill {
		*field = new(T)
	}
	if *field == nil {
		return nil
	}
	return *field
}

// Peek reads a frame's kind and ID, checked, and nothing after them (a
// run's own header: PeekRun).
func Peek(p []byte) (typ string, id uint64, err error) {
	if len(p) > 0 && p[0] == legacyHello {
		return "", 0, ErrLegacy
	}
	if len(p) < headerSize {
		return "", 0, fmt.Errorf("wire: a frame of %d bytes has no header", len(p))
	}
	if int(p[0]) == 0 || int(p[0]) >= len(kinds) {
		return "", 0, fmt.Errorf("wire: unknown message kind %d", p[0])
	}
	return kinds[p[0]], binary.BigEndian.Uint64(p[1:headerSize]), nil
}

// SetID changes the ID in a frame's header, in place: a relay forwards a
// frame under another ID without touching its body.
func SetID(p []byte, id uint64) {
	binary.BigEndian.PutUint64(p[1:headerSize], id)
}

// ErrLegacy is a frame in the framing of protocol versions before 3: a
// peer from an older pybox. Only its hello is read (LegacyHello), so that
// both sides can say which to rebuild.
var ErrLegacy = errors.New("wire: a frame from an older pybox (protocol before 3)")

// Decode reads a frame's payload: its header, then its body, strictly
// (DecodeStrict), into the type the kind names. A body the type needs
// must be there; a body it has none of must not. A run is read from its
// header and its body together.
func Decode(p []byte) (*Message, error) {
	typ, id, err := Peek(p)
	if err != nil {
		return nil, err
	}
	m := &Message{Type: typ, ID: id}
	rest := p[headerSize:]
	if isNet(typ) {
		if m.Net, err = readNet(typ, rest); err != nil {
			return nil, err
		}
		return m, nil
	}
	if typ == TypeRun {
		h, rest, err := readRunHeader(rest)
		if err != nil {
			return nil, err
		}
		var b runBody
		if err := decodeBody(typ, rest, &b); err != nil {
			return nil, err
		}
		m.Run = joinRun(h, &b)
		return m, nil
	}
	// A pong's status may be left out.
	if err := decodeBody(typ, rest, m.body(typ != TypePong || len(rest) > 0)); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeBody reads the body rest of a typ message into body, nil when
// the type has none.
func decodeBody(typ string, rest []byte, body any) error {
	switch {
	case body == nil && len(rest) > 0:
		return fmt.Errorf("wire: a %s message has no body, and this one has %d bytes", typ, len(rest))
	case body == nil:
	case len(rest) == 0:
		return fmt.Errorf("wire: %s message without its body", typ)
	case rest[0] != '{':
		return fmt.Errorf("wire: a %s message's body is not a JSON object", typ)
	default:
		if err := DecodeStrict(rest, body, "the message"); err != nil {
			return fmt.Errorf("wire: %s: %w", typ, err)
		}
	}
	return nil
}

// LegacyHello reads the hello, or the refusal of one, of a peer that
// frames messages as earlier protocol versions did (a JSON object with
// type, id and body), loosely: only to tell what it speaks. ok is false
// for anything else.
func LegacyHello(p []byte) (m *Message, ok bool) {
	var old struct {
		Type  string `json:"type"`
		ID    uint64 `json:"id"`
		Hello *Hello `json:"hello"`
		Error *Error `json:"error"`
	}
	if len(p) == 0 || p[0] != legacyHello || json.Unmarshal(p, &old) != nil {
		return nil, false
	}
	switch {
	case old.Type == TypeHello && old.Hello != nil:
		return &Message{Type: TypeHello, ID: old.ID, Hello: old.Hello}, true
	case old.Type == TypeError && old.Error != nil:
		return &Message{Type: TypeError, ID: old.ID, Error: old.Error}, true
	}
	return nil, false
}

// EncodeLegacyRefusal is a refusal of a hello in the framing of earlier
// protocol versions, so that an older peer can read why: msg should say
// which side to rebuild.
func EncodeLegacyRefusal(id uint64, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": TypeError, "id": id,
		"error": &Error{Code: ErrProtocol, Message: msg}})
	return b
}

// check says whether m has the body its type needs (and, for types with
// a body, only that one).
func (m *Message) check() error {
	need := map[string]bool{
		TypeHello: m.Hello != nil, TypeRun: m.Run != nil, TypeReceipt: m.Result != nil,
		TypeCancel: m.Cancel != nil, TypeError: m.Error != nil, TypeOutput: m.Output != nil,
		TypeFacts: m.Facts != nil, TypePing: true, TypePong: true, TypeOK: true, TypeShutdown: true,
		TypeNetOpen: m.Net != nil, TypeNetData: m.Net != nil, TypeNetWindow: m.Net != nil, TypeNetClose: m.Net != nil,
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
