package wire

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of a run request, as docs/limits.md documents them; both
// sides check them.
const (
	MaxCodeBytes         = 65536
	MaxTimeoutSeconds    = 30
	MaxOutputBytes       = 8192 // per stream
	DefaultOutputBytes   = 4096
	MaxInputFiles        = 16
	MaxInputBytes        = 256 << 10 // all input files together, decoded
	MaxReturnedFileBytes = 48 << 10  // content of returned files together
	MaxListedNotReturned = 16
	MaxReturnedFiles     = 64 // files brought back from /tmp/output
	MaxRunIDBytes        = 64
	MaxImageNameBytes    = 64
	MaxFileNameBytes     = 255
	MaxDataFolders       = 8         // data folders one run may name
	MaxOutputChunk       = 512 << 10 // bytes of a delivered file in one output message
	MaxDeliveredFiles    = 1024      // files one run streams to the output folder (their digests fit a receipt)
	DefaultMemoryBytes   = 512 << 20
	// MaxRunsAtOnce is the most runs at once a VM may be sized for (the
	// host's vm start --runs, the guest's pybox.runs).
	MaxRunsAtOnce         = 16
	DefaultPidsMax        = 128
	DefaultTmpBytes       = 64 << 20
	DefaultTmpInodes      = 16384
	DefaultTimeoutSeconds = 2
)

// Run is one program to run in a fresh box.
type Run struct {
	RunID          string      `json:"run_id"`
	Code           string      `json:"code"`
	Image          string      `json:"image"`
	TimeoutSeconds float64     `json:"timeout_s"`
	MaxOutputBytes int         `json:"max_output_bytes"`
	Files          []InputFile `json:"files,omitempty"`
	ReturnFiles    bool        `json:"return_files"`
	// Data names the data folders the box sees read-only at /data/NAME.
	// Only the names count: the supervisor brings each folder up to date
	// before the run, tells the guest nothing but the names, and fills in
	// the rest of the receipt's Data from its own record.
	Data []DataFolder `json:"data,omitempty"`
	// MaxDataBytes, when not 0, is the most the named data folders may
	// hold together; a run over it is refused before it starts.
	MaxDataBytes int64 `json:"max_data_bytes,omitempty"`
	// Deliver asks for every file of /tmp/output whole, streamed to the
	// host as output messages before the receipt (for an output folder on
	// the host), up to its byte bound.
	Deliver *Deliver `json:"deliver,omitempty"`
	// Net lets the run's program reach the hosts the user opened,
	// through a proxy in its box whose connections are streams to the
	// host process that made the run (see TypeNetOpen). The list itself
	// stays on the host.
	Net bool `json:"net,omitempty"`
	// NetPorts are the ports the user's list names, for a net run: the
	// box also takes connections made straight to them (clients that
	// ignore the proxy), and lookups of names from its own resolver,
	// each checked by the host as a proxy request is. At most
	// MaxNetPorts, each 1–65535, once.
	NetPorts []int `json:"net_ports,omitempty"`
	// HostTimeNS is the host's wall clock (Unix nanoseconds) when the
	// run was sent: the agent steps the guest's clock to it when the
	// guest's is behind it, or far ahead (Receipt.Clock). 0 when unknown.
	HostTimeNS int64 `json:"host_time_ns,omitempty"`
	// Client is who asked, in its own words ("pybox mcp (pid 4242,
	// claude-code 2.1.332)"): shown beside the run while it is in
	// progress (pybox vm status), nothing else.
	Client string `json:"client,omitempty"`
}

// MaxClientBytes bounds Run.Client.
const MaxClientBytes = 200

// Deliver bounds what a run streams back of /tmp/output.
type Deliver struct {
	MaxBytes int64 `json:"max_bytes"` // all files together
}

// DataFolder is a data folder a run sees: its name, and as the host
// describes it, where it is on the host and what it held for this run.
// Between host and guest only Name travels; the rest is the host's alone,
// filled in by the supervisor when the receipt comes back.
type DataFolder struct {
	Name     string `json:"name"`
	HostPath string `json:"host_path,omitempty"`
	Files    int    `json:"files,omitempty"`
	Bytes    int64  `json:"bytes,omitempty"`
	// Digest is the sha256 of the folder's listing (names, sizes and
	// modification times), not of its contents: it changes when a file
	// is added, removed or rewritten.
	Digest string `json:"digest,omitempty"`
	// LeftOut says what of the host folder the box does not see
	// (symbolic links, hard links, special files), counted by kind.
	LeftOut []string `json:"left_out,omitempty"`
}

// OutputChunk is part of one file of /tmp/output, streamed for delivery.
// A file's chunks come in order; the receipt then lists it, with its
// sha256, in Output.Delivered.
type OutputChunk struct {
	RunID  string `json:"run_id"`
	Name   string `json:"name"`
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"`
}

// InputFile is a file placed in /tmp/input/, already decoded.
type InputFile struct {
	Name    string `json:"name"`
	Content []byte `json:"content"`
}

// Check checks every bound of a run request. The error says which rule was
// broken; nothing may run when it is not nil. It is the one check of a
// run on each side of the wall: on the host client.CheckRun makes it
// for every run sent (a server adds only its own ceilings), in the guest
// the agent makes it for every run it gets.
func (r *Run) Check() error {
	if err := checkToken("run_id", r.RunID, MaxRunIDBytes); err != nil {
		return err
	}
	if err := CheckImageName(r.Image); err != nil {
		return err
	}
	if err := CheckCode(r.Code); err != nil {
		return err
	}
	if err := CheckTimeout(r.TimeoutSeconds, MaxTimeoutSeconds); err != nil {
		return err
	}
	if r.MaxOutputBytes < 1 || r.MaxOutputBytes > MaxOutputBytes {
		return fmt.Errorf("max_output_bytes is %d; it must be 1–%d", r.MaxOutputBytes, MaxOutputBytes)
	}
	if err := CheckDataNames(r.Data); err != nil {
		return err
	}
	if r.MaxDataBytes < 0 || r.Deliver != nil && r.Deliver.MaxBytes < 0 {
		return errors.New("a byte bound is negative")
	}
	if r.HostTimeNS < 0 {
		return errors.New("host_time_ns is negative")
	}
	if err := checkNetPorts(r.Net, r.NetPorts); err != nil {
		return err
	}
	if len(r.Client) > MaxClientBytes || !utf8.ValidString(r.Client) || strings.IndexFunc(r.Client, unicode.IsControl) >= 0 {
		return fmt.Errorf("client is longer than %d bytes, not UTF-8, or holds control characters", MaxClientBytes)
	}
	return CheckInputFiles(r.Files)
}

// CheckCode checks a program's source: UTF-8, at most MaxCodeBytes, and
// no NUL character, which Python source cannot hold and a command line
// (python3 -c) cannot carry.
func CheckCode(code string) error {
	if !utf8.ValidString(code) {
		return errors.New("code is not valid UTF-8")
	}
	if len(code) > MaxCodeBytes {
		return fmt.Errorf("code is %d UTF-8 bytes; the limit is %d", len(code), MaxCodeBytes)
	}
	if i := strings.IndexByte(code, 0); i >= 0 {
		line := 1 + strings.Count(code[:i], "\n")
		return fmt.Errorf("code holds a NUL character (U+0000) on line %d; Python source cannot contain one: write it as \"\\x00\" inside a string", line)
	}
	return nil
}

// CheckDataNames checks the data folders a run names: at most
// MaxDataFolders, each once, each a name like an image's.
func CheckDataNames(data []DataFolder) error {
	if len(data) > MaxDataFolders {
		return fmt.Errorf("%d data folders; a run may name at most %d", len(data), MaxDataFolders)
	}
	seen := map[string]bool{}
	for _, d := range data {
		if err := CheckDataName(d.Name); err != nil {
			return err
		}
		if seen[d.Name] {
			return fmt.Errorf("data folder %q is named twice", d.Name)
		}
		seen[d.Name] = true
		if d.HostPath != "" || d.Files != 0 || d.Bytes != 0 || d.Digest != "" || len(d.LeftOut) != 0 {
			// Where a folder is and what it holds is the host's to say,
			// in its own record, never a request's.
			return fmt.Errorf("data folder %q: a run names its data folders and says nothing else of them", d.Name)
		}
	}
	return nil
}

// CheckDataName checks a data folder's name: the rules of an image name.
func CheckDataName(name string) error {
	if err := CheckImageName(name); err != nil {
		return errors.New("data folder name: " + strings.TrimPrefix(err.Error(), "image name "))
	}
	return nil
}

// CheckTimeout checks a timeout in seconds against a ceiling.
func CheckTimeout(s, ceiling float64) error {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return errors.New("timeout_s must be a finite number")
	}
	if s <= 0 {
		return fmt.Errorf("timeout_s is %v; it must be more than 0", s)
	}
	if s > ceiling {
		return fmt.Errorf("timeout_s is %v; this server allows at most %v (its --max-timeout)", s, ceiling)
	}
	return nil
}

// CheckInputFiles checks the count, total size and names of input files.
func CheckInputFiles(files []InputFile) error {
	if len(files) > MaxInputFiles {
		return fmt.Errorf("%d files; at most %d are allowed", len(files), MaxInputFiles)
	}
	total := 0
	seen := map[string]string{}
	for _, f := range files {
		if err := CheckFileName(f.Name); err != nil {
			return err
		}
		folded := strings.ToLower(f.Name)
		if prev, dup := seen[folded]; dup {
			if prev == f.Name {
				return fmt.Errorf("file name %q appears twice", f.Name)
			}
			return fmt.Errorf("file names %q and %q differ only in case", prev, f.Name)
		}
		seen[folded] = f.Name
		total += len(f.Content)
	}
	if total > MaxInputBytes {
		return fmt.Errorf("input files hold %d bytes together; the limit is %d (256 KiB)", total, MaxInputBytes)
	}
	return nil
}

// CheckFileName checks one input file name: a plain name, never a path.
func CheckFileName(name string) error {
	switch {
	case name == "":
		return errors.New("a file name is empty")
	case name == "." || name == "..":
		return fmt.Errorf("file name %q is not allowed", name)
	case len(name) > MaxFileNameBytes:
		return fmt.Errorf("file name of %d bytes; the limit is %d", len(name), MaxFileNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("file name %q is not valid UTF-8", name)
	case strings.ContainsAny(name, `/\`):
		return fmt.Errorf("file name %q contains a path separator; give a plain name", name)
	}
	for _, c := range name {
		if unicode.IsControl(c) || c == utf8.RuneError {
			return fmt.Errorf("file name %q contains a control character", name)
		}
	}
	return nil
}

// CheckImageName checks an image name: lower-case letters, digits, '-'
// and '_', starting with a letter.
func CheckImageName(name string) error {
	if name == "" {
		return errors.New("image name is empty")
	}
	if len(name) > MaxImageNameBytes {
		return fmt.Errorf("image name %q is longer than %d bytes", name, MaxImageNameBytes)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '-' || c == '_')
		if !ok {
			return fmt.Errorf("image name %q: use lower-case letters, digits, '-' and '_', starting with a letter", name)
		}
	}
	return nil
}

func checkToken(field, v string, max int) error {
	if v == "" || len(v) > max {
		return fmt.Errorf("%s must be 1–%d bytes", field, max)
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%s %q: use letters, digits, '-' and '_'", field, v)
		}
	}
	return nil
}

// NewRunID names a run: prefix (which says where it came from, for the
// logs) and 16 random hex digits.
func NewRunID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// MaxNetPorts bounds Run.NetPorts.
const MaxNetPorts = 32

// checkNetPorts checks a run's NetPorts: only for a net run, at most
// MaxNetPorts, each a port, once.
func checkNetPorts(net bool, ports []int) error {
	if len(ports) > 0 && !net {
		return errors.New("net_ports without net")
	}
	if len(ports) > MaxNetPorts {
		return fmt.Errorf("%d net ports; a run may name at most %d", len(ports), MaxNetPorts)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 1 || p > 65535 || seen[p] {
			return fmt.Errorf("net port %d is not a port 1–65535, or is named twice", p)
		}
		seen[p] = true
	}
	return nil
}
