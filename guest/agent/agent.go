package agent

import (
	"context"
	"io/fs"
	"slices"
	"sync"
	"time"

	"pybox/shared/wire"
)

// Version and Commit are stamped at build time:
//
//	-ldflags "-X pybox/guest/agent.Version=... -X pybox/guest/agent.Commit=..."
var (
	Version = "dev"
	Commit  = "unknown"
)

// Capabilities are the requests this agent serves, announced in hello.
var Capabilities = []string{"run", "cancel", "ping", "shutdown"}

// Bounds of what the agent remembers, so that its memory stays flat
// however many runs it serves.
const (
	keepRuns       = 32 // finished runs listed by the console's "runs"
	keepPrecancels = 16 // cancels that arrived before their run
)

// Runner runs one program in a fresh box; *box.Runner is the real one.
type Runner interface {
	// Run runs r and returns its result; a cancelled ctx ends the run
	// with status cancelled. It is never called twice at once. A run
	// that asks for delivery has its output files streamed through emit.
	Run(ctx context.Context, r *wire.Run, emit func(*wire.OutputChunk) error) *wire.Result
	// Healthy is non-nil while the box refuses runs (a cleanup failed).
	Healthy() error
	// Progress says where the run in progress is (nil when none is).
	Progress() *wire.RunProgress
	// Abort tears down the box of a run that overran its bound while
	// Run is still inside it, and says what it could confirm.
	Abort(runID string) wire.Cleanup
	// Warm says how each image's warm box is.
	Warm() []wire.WarmBox
	// Close discards what the runner keeps ready: the VM stops.
	Close()
}

// Config is what an Agent needs from the VM around it.
type Config struct {
	Kernel string
	Images []wire.ImageInfo // the images mounted, in hello's order
	Data   []string         // the data folders mounted
	Runner Runner
	Logf   func(format string, args ...any)
	// PowerOff is called after shutdown has been answered. In the guest
	// it syncs and ends the VM and never returns.
	PowerOff func()
	// WriteTimeout drops a connection whose host has not taken a frame
	// for this long. Zero means 10 s.
	WriteTimeout time.Duration
	// Files is the filesystem the console reads /proc and /sys from.
	Files fs.FS
	// LogLines returns the recent log lines for the console's "log".
	LogLines func() []string
	// Watchdog is how long a run may take before the agent tears its box
	// down; nil means its bound, wire.RunBound plus wire.WatchdogGrace.
	Watchdog func(r *wire.Run) time.Duration
	// Idle, when set, is how the guest gives freed memory back to the
	// host while no run comes (see Idle).
	Idle *Idle
}

// Agent serves the host. Its methods are safe for concurrent use.
type Agent struct {
	cfg     Config
	hello   wire.Hello
	images  map[string]wire.ImageInfo
	started time.Time

	mu      sync.Mutex
	current *activeRun
	idle    *idler // nil when the guest keeps its memory
	broken  error  // set when the box code panicked: refuse runs
	// stuck names a run the watchdog tore down whose Run has not
	// returned yet: the box is still held, so runs are refused.
	stuck     string
	stopping  bool // shutdown received
	precancel []string
	history   []record // newest last
	last      *wire.Result
	open      int    // connections open now
	served    uint64 // connections ever accepted
}

// activeRun is the run in progress.
type activeRun struct {
	id      string
	image   string
	conn    *conn
	cancel  context.CancelFunc
	started time.Time
	done    chan struct{} // closed once the receipt is sent (or lost)
}

// record is a finished run, for the console.
type record struct {
	id, image, status, cleanup string
	wallMS                     int64
	ended                      time.Time
}

// New returns an Agent for cfg.
func New(cfg Config) *Agent {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.PowerOff == nil {
		cfg.PowerOff = func() {}
	}
	if cfg.Watchdog == nil {
		cfg.Watchdog = func(r *wire.Run) time.Duration { return r.Bound() + wire.WatchdogGrace }
	}
	a := &Agent{cfg: cfg, images: map[string]wire.ImageInfo{}, started: time.Now(), idle: newIdler(cfg.Idle, cfg.Logf)}
	for _, img := range cfg.Images {
		a.images[img.Name] = img
	}
	a.hello = wire.Hello{
		Protocol:     wire.ProtocolVersion,
		AgentVersion: Version,
		AgentCommit:  Commit,
		Kernel:       cfg.Kernel,
		Capabilities: slices.Clone(Capabilities),
		Images:       slices.Clone(cfg.Images),
		Data:         slices.Clone(cfg.Data),
	}
	return a
}

// Info is how receipts name this agent on this kernel.
func Info(kernel string) wire.AgentInfo {
	return wire.AgentInfo{Version: Version, Commit: Commit, Kernel: kernel}
}

func (a *Agent) logf(format string, args ...any) { a.cfg.Logf(format, args...) }
