package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// ReceiptSchemaVersion is stamped into every receipt.
const ReceiptSchemaVersion = 1

// Run statuses. Exactly one applies to a finished run.
const (
	StatusOK        = "ok"        // the program exited 0
	StatusError     = "error"     // the program failed: non-zero exit or killed by a signal of its own
	StatusTimeout   = "timeout"   // the wall timeout killed the box
	StatusOOM       = "oom"       // the memory limit killed the box
	StatusCancelled = "cancelled" // the host cancelled the run
	StatusRefused   = "refused"   // the box was not fit to run the program (posture, setup); nothing ran
)

// Cleanup statuses.
const (
	CleanupRemoved      = "REMOVED"       // the cgroup and every mount of the box are confirmed gone
	CleanupFailed       = "FAILED"        // something of the box is left; Detail says what
	CleanupNotAttempted = "NOT_ATTEMPTED" // no box was made (no VM, refused before start)
	CleanupUnknown      = "UNKNOWN"       // the host lost contact with the guest mid-run
)

// Reasons an output file was not brought back.
const (
	NotReturnedNotAsked   = "return_files was false"
	NotReturnedOverCap    = "over the 48 KiB content cap"
	NotReturnedNotFile    = "not a regular file"
	NotReturnedSymlink    = "symbolic link (never followed)"
	NotReturnedHardLink   = "hard link (more than one name)"
	NotReturnedUnreadable = "could not be read"
	NotReturnedChanged    = "changed while being read"
	NotReturnedOverCount  = "over the 64-file return cap"
	NotReturnedName       = "name needs escaping; only plain names come back"
	// NotReturnedTimeLimit starts the reason of a file that collecting
	// /tmp/output did not finish within its allowance (or before a
	// cancel): not looked at, or listed without its sha256.
	NotReturnedTimeLimit = "time limit"
	// NotDeliveredOverCap: a file past the run's delivery bound.
	NotDeliveredOverCap = "over the output folder's bound for one run"
	// NotDeliveredOverCount: a file past the first MaxDeliveredFiles.
	NotDeliveredOverCount = "over the 1024-file delivery cap"
)

// Result is the guest's answer to a run: the receipt, and the content of
// the files it brought back (which the host delivers beside the receipt,
// never inside it).
type Result struct {
	Receipt Receipt      `json:"receipt"`
	Files   []OutputFile `json:"files,omitempty"`
}

// OutputFile is a file brought back from /tmp/output/.
type OutputFile struct {
	Name    string `json:"name"`
	Content []byte `json:"content"`
}

// Receipt is what the guest knows about one run, written by the guest.
type Receipt struct {
	SchemaVersion int          `json:"schema_version"`
	RunID         string       `json:"run_id"`
	Status        string       `json:"status"`
	Reason        string       `json:"reason"`
	ExitCode      *int         `json:"exit_code"`
	Signal        string       `json:"signal,omitempty"`
	Image         ImageInfo    `json:"image"`
	Agent         AgentInfo    `json:"agent"`
	Limits        AppliedLimit `json:"limits"`
	WallMS        int64        `json:"wall_ms"`
	CPU           CPUTime      `json:"cpu"`
	Memory        Memory       `json:"memory"`
	Pids          Pids         `json:"pids"`
	Capture       Capture      `json:"capture"`
	InputFiles    []FileDigest `json:"input_files"`
	// Data lists the data folders the box saw. The host fills it in from
	// its own record when the receipt reaches it; the guest's is not kept.
	Data []DataFolder `json:"data,omitempty"`
	// Network is what the run's box reached through the host, for a run
	// that may reach it (Run.Net). The host process that made the run
	// fills it in from its own record of the connections it served; the
	// guest's is not kept.
	Network *Network `json:"network,omitempty"`
	Output  Output   `json:"output_files"`
	Posture *Posture `json:"posture,omitempty"`
	// Box says how the box was made: cold for this run, or warm (made
	// ahead, its image's preload list imported before the hand-over).
	Box *BoxInfo `json:"box,omitempty"`
	// Overruns names each phase that ran out of its allowance (see
	// RunBound) and stopped where it was, and what it left undone.
	Overruns []string `json:"overruns,omitempty"`
	Cleanup  Cleanup  `json:"cleanup"`
}

// MaxNetListed is how many connections a receipt's Network lists; the
// rest are counted in NotListed.
const MaxNetListed = 64

// Network is the host's record of a run's connections: those its
// program made to the box's proxy, served or refused by the host under
// the user's list.
type Network struct {
	// Allowed is the user's list of hosts the run could reach, in its
	// canonical form.
	Allowed string `json:"allowed"`
	// Connections are the first MaxNetListed connections, in the order
	// they ended; NotListed counts the rest.
	Connections []NetConnection `json:"connections"`
	NotListed   int             `json:"not_listed"`
	// Refused counts the connections refused, and SentBytes and
	// ReceivedBytes sum the bytes of all of them, listed or not: from the
	// box to the servers, and back.
	Refused       int   `json:"refused"`
	SentBytes     int64 `json:"sent_bytes"`
	ReceivedBytes int64 `json:"received_bytes"`
	// Faults counts the frames of the run's streams that broke their
	// rules (an order, a bound, a window): each aborted its stream. The
	// guest of a working VM sends none.
	Faults int `json:"faults,omitempty"`
}

// NetConnection is one connection of a run, as the host saw it.
type NetConnection struct {
	Host     string `json:"host"`              // as the box named it ("" when its request could not be read)
	Port     int    `json:"port,omitempty"`    // idem
	Address  string `json:"address,omitempty"` // the address dialled
	Kind     string `json:"kind"`              // "tls" (a CONNECT tunnel) or "http"
	Sent     int64  `json:"sent_bytes"`        // from the box to the server
	Received int64  `json:"received_bytes"`    // from the server to the box
	Millis   int64  `json:"duration_ms"`
	Allowed  bool   `json:"allowed"`
	// Why says why the connection was refused, or why a served one was
	// cut short; empty for one that ran its course.
	Why string `json:"why,omitempty"`
}

// AgentInfo names the guest agent that wrote the receipt.
type AgentInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Kernel  string `json:"kernel"`
	// Clock is how the guest's clock stood against the host's when the
	// run came; absent when the run carried no host time.
	Clock *ClockCheck `json:"clock,omitempty"`
}

// ClockCheck is the guest's clock against the host's time in a run
// request (Run.HostTimeNS), read when the request came: OffsetMS is the
// guest's minus the host's, before any step (the request's own transit
// makes it a little positive when the clocks agree). Stepped says the
// agent set the guest's clock to the host's time: it was behind, or
// ahead by more than the transit can explain.
type ClockCheck struct {
	OffsetMS float64 `json:"offset_ms"`
	Stepped  bool    `json:"stepped"`
}

// AppliedLimit is what bounded the run.
type AppliedLimit struct {
	TimeoutSeconds float64 `json:"timeout_s"`
	MaxOutputBytes int     `json:"max_output_bytes"`
	MemoryBytes    int64   `json:"memory_bytes"`
	PidsMax        int     `json:"pids_max"`
	TmpBytes       int64   `json:"tmp_bytes"`
	TmpInodes      int     `json:"tmp_inodes"`
}

// CPUTime is the box's CPU use, from its cgroup.
type CPUTime struct {
	UserMS   int64 `json:"user_ms"`
	SystemMS int64 `json:"system_ms"`
}

// BoxInfo says how a run's box was made.
type BoxInfo struct {
	Warm bool `json:"warm"`
	// Preloaded are the modules already in sys.modules at the program's
	// start (a warm box's preload list): the one way its program can
	// tell it from a cold box's.
	Preloaded []string `json:"preloaded,omitempty"`
	// PrepareMS is how long the warm box took to start and preload;
	// ReadyMS how long it then waited for this run.
	PrepareMS int64 `json:"prepare_ms,omitempty"`
	ReadyMS   int64 `json:"ready_ms,omitempty"`
	// PrepareCPUMS is the CPU the warm box used before the hand-over
	// (starting python3, the preload): what warming cost this run.
	PrepareCPUMS int64 `json:"prepare_cpu_ms,omitempty"`
	// Fallback says why a cold box ran a program whose image is warmed.
	Fallback string `json:"fallback,omitempty"`
}

// Memory is the box's memory reading. Reading is "final" when memory.peak
// was read after every process in the box was gone.
type Memory struct {
	PeakBytes  int64  `json:"peak_bytes"`
	Reading    string `json:"reading"`
	LimitBytes int64  `json:"limit_bytes"`
	OOMKilled  bool   `json:"oom_killed"`
	// PreloadBytes is what a warm box held at the hand-over (its preload).
	// PeakBytes is the whole box's peak, the preload with it; LimitBytes
	// is the program's limit on top of the preload.
	PreloadBytes int64 `json:"preload_bytes,omitempty"`
}

// Pids says whether the box hit its process limit.
type Pids struct {
	Max      int   `json:"max"`
	LimitHit int64 `json:"limit_hit"` // pids.events "max": forks refused
}

// Capture holds what the program printed, as data. Each stream keeps its
// first max_output_bytes; Bytes counts everything it wrote. Bytes that are
// not valid UTF-8 are replaced by U+FFFD in the string, and InvalidUTF8 is
// set; the byte counts are of the raw bytes.
type Capture struct {
	StdoutInfo Stream `json:"stdout_info"`
	StderrInfo Stream `json:"stderr_info"`
	// The text itself, under the names docs/result.md documents.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

// Stream describes one captured stream.
type Stream struct {
	Bytes       int64 `json:"bytes"`
	KeptBytes   int   `json:"kept_bytes"`
	Truncated   bool  `json:"truncated"`
	InvalidUTF8 bool  `json:"invalid_utf8"`
	// Controls counts the characters of the text that a terminal or a
	// bidi-aware view would act on (C0 other than tab and newline, DEL,
	// C1, bidirectional formatting). The host counts them, not the guest;
	// in its JSON they are escaped.
	Controls int `json:"controls,omitempty"`
}

// FileDigest names a file with its size and sha256 (hex).
type FileDigest struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Output lists what the program left in /tmp/output/.
type Output struct {
	Returned    []FileDigest  `json:"returned"`
	NotReturned []NotReturned `json:"not_returned"`
	// NotListed counts the files not brought back beyond the first 16.
	NotListed int `json:"not_listed"`
	// Delivered lists the files streamed whole to the host when the run
	// asked for delivery (Run.Deliver), each with its sha256; the first
	// 16 of those that were not are in NotDelivered with the reason, and
	// the rest counted in NotDeliveredUnlisted.
	Delivered            []FileDigest  `json:"delivered,omitempty"`
	NotDelivered         []NotReturned `json:"not_delivered,omitempty"`
	NotDeliveredUnlisted int           `json:"not_delivered_unlisted,omitempty"`
	// DeliveredAll sums up the whole of Delivered, so that a result cut
	// to fit its limits (the host may list only its first entries) still
	// says how many files were delivered, their bytes, and a digest of
	// the whole list.
	DeliveredAll *FileList `json:"delivered_all,omitempty"`
}

// FileList sums up a list of files: how many, their bytes together, and
// the sha256 (hex) of the list (see SumFiles).
type FileList struct {
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// SumFiles sums up files. The digest is of one line per file, in order:
// the file's sha256, a space, its size in bytes, a space, its name, and a
// newline, so that the list can be checked against the files themselves
// (for files with plain names, it is `sha256sum`'s output with sizes).
func SumFiles(files []FileDigest) FileList {
	h := sha256.New()
	l := FileList{Files: len(files)}
	for _, f := range files {
		l.Bytes += f.Bytes
		fmt.Fprintf(h, "%s %d %s\n", f.SHA256, f.Bytes, f.Name)
	}
	l.SHA256 = hex.EncodeToString(h.Sum(nil))
	return l
}

// NotReturned is a file left in /tmp/output that did not come back. Name is
// escaped (see EscapeName); Bytes and SHA256 are set when known.
type NotReturned struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	Bytes  int64  `json:"bytes,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// Posture is what the box's first process saw of itself just before it
// started the program.
type Posture struct {
	OK         bool     `json:"ok"`
	CapEff     string   `json:"cap_eff"`
	NoNewPrivs bool     `json:"no_new_privs"`
	Seccomp    int      `json:"seccomp_mode"`
	OpenFDs    []int    `json:"open_fds"`
	ReadOnly   bool     `json:"root_read_only"`
	Namespaces []string `json:"new_namespaces"`
	Problems   []string `json:"problems,omitempty"`
}

// Cleanup says whether the box is gone.
type Cleanup struct {
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// NothingRan is the cleanup of a request that never reached a box: none
// was made, so none is left. Every side says "no result, nothing ran"
// through it.
func NothingRan() *Cleanup { return &Cleanup{Status: CleanupNotAttempted, Detail: "nothing ran"} }

// Unknown is the cleanup of a run whose box's fate is not known (its
// receipt did not come, or could not be read): why says which.
func Unknown(why string) *Cleanup { return &Cleanup{Status: CleanupUnknown, Detail: why} }
