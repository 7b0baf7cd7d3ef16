package agent

import (
	"context"
	"io/fs"
	"net"
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

// Capabilities are the requests this agent serves, announced in hello;
// wire.CapNet says that it carries the streams of runs that open the
// network (netmux.go).
var Capabilities = []string{"run", "cancel", "ping", "shutdown", wire.CapNet}

// Bounds of what the agent remembers, so that its memory stays flat
// however many runs it serves.
const (
	keepRuns       = 32 // finished runs listed by the console's "runs"
	keepPrecancels = 16 // cancels that arrived before their run
)

// Runner runs programs, each in a fresh box, several at once;
// *box.Runner is the real one.
type Runner interface {
	// Admit sets aside room for r, or says why there is none; an error
	// whose NoMemory method says true means the runs in progress hold
	// the memory r would need.
	Admit(r *wire.Run) error
	// Cancel gives back the room of a run admitted that will not run.
	Cancel(runID string)
	// Run runs r, admitted, and returns its result; a cancelled ctx ends
	// the run with status cancelled. Runs go on at once. A run that asks
	// for delivery has its output files streamed through emit. A run
	// that opens the network (r.Net) has each connection its program
	// makes to its proxy handed to conns (nil: no network; such a run
	// is refused).
	Run(ctx context.Context, r *wire.Run, emit func(*wire.OutputChunk) error, conns func(net.Conn) bool) *wire.Result
	// Runs says where each run in progress is.
	Runs() []wire.RunProgress
	// Room says how the guest's memory is shared between runs (nil when
	// it cannot say).
	Room() *wire.Room
	// SetAside tries again to remove what failed cleanups left, and
	// lists what is still left (kept out of use; runs go on).
	SetAside() []string
	// Abort tears down the box of a run that overran its bound while
	// Run is still inside it, and says what it could confirm.
	Abort(runID string) wire.Cleanup
	// Warm says how each warm box is.
	Warm() []wire.WarmBox
	// Close discards what the runner keeps ready: the VM stops.
	Close()
}

// noMemory is how a Runner says that a run was refused for memory.
type noMemory interface{ NoMemory() bool }

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
	// SetClock, when set, steps the guest's wall clock to the host's
	// time a run carries (see syncClock); nil leaves it alone.
	SetClock func(time.Time) error
}

// Agent serves the host. Its methods are safe for concurrent use.
type Agent struct {
	cfg     Config
	hello   wire.Hello
	images  map[string]wire.ImageInfo
	started time.Time

	mu     sync.Mutex
	runs   map[string]*activeRun // the runs in progress, by run id
	idle   *idler                // nil when the guest keeps its memory
	broken error                 // set when the box code panicked: refuse runs
	// stuck names the runs the watchdog tore down whose Run has not
	// returned yet: each keeps its room until it does.
	stuck     map[string]bool
	stopping  bool // shutdown received
	precancel []string
	history   []record // newest last
	last      *wire.Result
	open      int    // connections open now
	served    uint64 // connections ever accepted
}

// activeRun is a run in progress.
type activeRun struct {
	id      string
	image   string
	conn    *conn
	msgID   uint64           // the run request's ID on conn, which its answers carry
	net     *netRun          // its streams, for a run that opens the network; else nil
	clock   *wire.ClockCheck // the guest's clock against the host's when the run came
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
	a := &Agent{cfg: cfg, images: map[string]wire.ImageInfo{}, started: time.Now(), idle: newIdler(cfg.Idle, cfg.Logf),
		runs: map[string]*activeRun{}, stuck: map[string]bool{}}
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
