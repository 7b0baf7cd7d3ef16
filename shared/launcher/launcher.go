// Package launcher is the warm box's launcher as the image builder and
// the guest agent both know it: its C source, which every image build
// compiles against the image's own Python into Path, and the words of
// its conversation with the agent. pybox-launch.c says how it works.
package launcher

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"strings"
)

// Source is pybox-launch.c.
//
//go:embed pybox-launch.c
var Source string

// Path is where an image holds the compiled launcher; a warm box's
// python3 starts with it in LD_PRELOAD.
const Path = "/usr/lib/pybox/pybox-launch.so"

// Env is the environment entry that loads it. The agent puts it last in
// a warm box's environment; the launcher takes it out of the process's
// environment and of /proc/self/environ before anything else runs.
const Env = "LD_PRELOAD=" + Path

// ControlFD is the launcher's end of the agent's unix seqpacket socket.
const ControlFD = 3

// StandIn is the code a warm box's python3 is started with: as long as
// the longest program, so that the program's code can take its place in
// the process's command line. It is never run.
var StandIn = strings.Repeat("#", MaxCode)

// MaxCode is the most code the launcher takes, in bytes (the product's
// limit).
const MaxCode = 65536

// The conversation on ControlFD, one seqpacket message each.
const (
	// From the launcher.
	Initialized = "initialized" // the interpreter is up
	Importing   = "importing"   // "importing MODULE", before each module
	Ready       = "ready"       // "ready MODULE...", what was imported
	Fail        = "fail"        // "fail REASON"; the launcher exits 3
	Fds         = "fds"         // "fds 0,1,2": what the program inherits

	// From the agent.
	Preload = "preload" // go on with the preload
	Run     = "run\n"   // prefix of the program's code; SCM_RIGHTS carry its stdout and stderr
	Go      = "go"      // "go N": run it, keeping what the first N modules of the list set at import
)

// SourceSHA256 is the hex sha256 of Source: part of an image's cache key,
// so that a changed launcher rebuilds every image.
func SourceSHA256() string {
	sum := sha256.Sum256([]byte(Source))
	return hex.EncodeToString(sum[:])
}
