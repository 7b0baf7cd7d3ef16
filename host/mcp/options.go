package mcp

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"pybox/host/egress"
	"pybox/shared/wire"
)

// DefaultImage is the image a call gets when it names none (if the server
// allows it; otherwise the first allowed image).
const DefaultImage = "stdlib"

// Options are the ceilings the person who configures the server sets. An
// agent can only ask for less.
type Options struct {
	// Images an agent may use, in the order given. Never empty after Check.
	Images []string
	// MaxTimeout is the longest run an agent may ask for, in seconds:
	// more than 0, at most wire.MaxTimeoutSeconds.
	MaxTimeout float64
	// Data names the data folders an agent may ask for (the VM has them
	// from `pybox vm start --data`). Empty: the tool has no data
	// argument at all.
	Data []string
	// MaxDataBytes bounds what the data folders of one call hold together.
	MaxDataBytes int64
	// OutputDir, when set (an absolute path), receives everything a
	// program writes to /tmp/output, in OutputDir/<run_id>/.
	OutputDir string
	// OutputDotfiles lets names that start with a dot be written there.
	OutputDotfiles bool
	// MaxOutputDirBytes bounds what one run writes there.
	MaxOutputDirBytes int64
	// MaxOutputDirTotal bounds what the output folder holds, earlier
	// runs' folders included: a run may write only what is left, and a
	// call when nothing is left is refused. PyBox never deletes a run's
	// folder: making room is the user's choice.
	MaxOutputDirTotal int64
	// Net lists the hosts and ports a program may reach (--allow-net),
	// through the host's egress.Gate. Empty: the tool has no network
	// argument at all, and no run reaches the network. A call reaches
	// the network only when it names hosts, and only hosts among these.
	Net egress.Allow
}

// Defaults of the data and output folder options.
const (
	DefaultMaxDataBytes      = 64 << 30             // a real dataset; the folder is shared, never copied
	DefaultMaxOutputDirBytes = wire.DefaultTmpBytes // all a run's /tmp can hold
	DefaultMaxOutputDirTotal = 4 << 30              // 64 runs that each filled their /tmp
)

// DefaultOptions are the documented defaults: stdlib only, 2 seconds,
// no data folders, no output folder.
func DefaultOptions() Options {
	return Options{Images: []string{DefaultImage}, MaxTimeout: wire.DefaultTimeoutSeconds,
		MaxDataBytes: DefaultMaxDataBytes, MaxOutputDirBytes: DefaultMaxOutputDirBytes, MaxOutputDirTotal: DefaultMaxOutputDirTotal}
}

// ParseNames parses a comma-separated list of names, as every pybox
// command takes one (--data, --images, --preload): space around a name
// and empty names are dropped; nil when none is left.
func ParseNames(list string) []string {
	var names []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// ParseImages parses --images: names separated by commas, at least one.
func ParseImages(list string) ([]string, error) {
	names := ParseNames(list)
	if len(names) == 0 {
		return nil, errors.New("--images is empty: name at least one image, for example --images stdlib")
	}
	return names, nil
}

// ParseMaxTimeout parses --max-timeout: seconds, more than 0 and at most 30.
func ParseMaxTimeout(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("--max-timeout %q is not a number of seconds: give one from 0 to %d, for example --max-timeout 30", s, wire.MaxTimeoutSeconds)
	}
	return v, checkMaxTimeout(v)
}

func checkMaxTimeout(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > wire.MaxTimeoutSeconds {
		return fmt.Errorf("--max-timeout %v is refused: it must be more than 0 and at most %d seconds", v, wire.MaxTimeoutSeconds)
	}
	return nil
}

// Check checks the options, as at start-up: a server with a bad option
// does not start.
func (o *Options) Check() error {
	if len(o.Images) == 0 {
		return errors.New("no image allowed: name at least one with --images, for example --images stdlib")
	}
	seen := map[string]bool{}
	for _, n := range o.Images {
		if err := wire.CheckImageName(n); err != nil {
			return fmt.Errorf("--images: %w", err)
		}
		if seen[n] {
			return fmt.Errorf("--images names %q twice", n)
		}
		seen[n] = true
	}
	if err := o.checkFolders(); err != nil {
		return err
	}
	return checkMaxTimeout(o.MaxTimeout)
}

// checkFolders checks the data and output folder options.
// Zero bounds take their defaults.
func (o *Options) checkFolders() error {
	if o.MaxDataBytes == 0 {
		o.MaxDataBytes = DefaultMaxDataBytes
	}
	if o.MaxOutputDirBytes == 0 {
		o.MaxOutputDirBytes = DefaultMaxOutputDirBytes
	}
	if o.MaxOutputDirTotal == 0 {
		o.MaxOutputDirTotal = DefaultMaxOutputDirTotal
	}
	seen := map[string]bool{}
	if len(o.Data) > wire.MaxDataFolders {
		return fmt.Errorf("--data names %d folders; at most %d", len(o.Data), wire.MaxDataFolders)
	}
	for _, n := range o.Data {
		if err := wire.CheckDataName(n); err != nil {
			return fmt.Errorf("--data: %w", err)
		}
		if seen[n] {
			return fmt.Errorf("--data names %q twice", n)
		}
		seen[n] = true
	}
	if o.MaxDataBytes <= 0 {
		return fmt.Errorf("--max-data-bytes %d: give a number of bytes above 0", o.MaxDataBytes)
	}
	if o.OutputDir != "" && !filepath.IsAbs(o.OutputDir) {
		return fmt.Errorf("--output-dir %q is not an absolute path", o.OutputDir)
	}
	if o.MaxOutputDirBytes <= 0 || o.MaxOutputDirBytes > wire.DefaultTmpBytes {
		return fmt.Errorf("--max-output-dir-bytes %d: give 1–%d (a run's /tmp holds no more)", o.MaxOutputDirBytes, wire.DefaultTmpBytes)
	}
	if o.MaxOutputDirTotal <= 0 {
		return fmt.Errorf("--max-output-dir-total %d: give a number of bytes above 0", o.MaxOutputDirTotal)
	}
	return nil
}

// defaultImage is the image of a call that names none.
func (o *Options) defaultImage() string {
	for _, n := range o.Images {
		if n == DefaultImage {
			return n
		}
	}
	return o.Images[0]
}

// defaultTimeout is the timeout of a call that asks for none: 2 seconds,
// or the ceiling when it is lower.
func (o *Options) defaultTimeout() float64 {
	return math.Min(wire.DefaultTimeoutSeconds, o.MaxTimeout)
}

// allows reports whether an agent may use image.
func (o *Options) allows(image string) bool {
	for _, n := range o.Images {
		if n == image {
			return true
		}
	}
	return false
}

// Args renders the options as `pybox mcp` flags, for configuration
// snippets; defaults are left out.
func (o *Options) Args() []string {
	var args []string
	if len(o.Images) != 1 || o.Images[0] != DefaultImage {
		args = append(args, "--images", strings.Join(o.Images, ","))
	}
	if o.MaxTimeout != wire.DefaultTimeoutSeconds {
		args = append(args, "--max-timeout", strconv.FormatFloat(o.MaxTimeout, 'f', -1, 64))
	}
	if len(o.Data) > 0 {
		args = append(args, "--data", strings.Join(o.Data, ","))
	}
	if o.MaxDataBytes != DefaultMaxDataBytes {
		args = append(args, "--max-data-bytes", strconv.FormatInt(o.MaxDataBytes, 10))
	}
	if o.OutputDir != "" {
		args = append(args, "--output-dir", o.OutputDir)
	}
	if o.OutputDotfiles {
		args = append(args, "--output-dotfiles")
	}
	if o.MaxOutputDirBytes != DefaultMaxOutputDirBytes {
		args = append(args, "--max-output-dir-bytes", strconv.FormatInt(o.MaxOutputDirBytes, 10))
	}
	if o.MaxOutputDirTotal != DefaultMaxOutputDirTotal {
		args = append(args, "--max-output-dir-total", strconv.FormatInt(o.MaxOutputDirTotal, 10))
	}
	if o.netOpen() {
		args = append(args, "--allow-net", o.Net.String())
	}
	return args
}

// netOpen reports whether the server lets calls reach the network.
func (o *Options) netOpen() bool {
	return o.Net.String() != ""
}

// allowsData reports whether an agent may name data folder name.
func (o *Options) allowsData(name string) bool {
	for _, n := range o.Data {
		if n == name {
			return true
		}
	}
	return false
}
