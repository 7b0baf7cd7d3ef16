package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A run frame's header goes on after the kind and the ID with what the
// supervisor needs of the run to route it, ready its data folders and
// bound its wait for the receipt, so that it never decodes a run's body:
//
//	byte 9       flags: bit 0 set when the run asks for delivery
//	             (Run.Deliver), bit 1 when it may carry streams
//	             (Run.Net); the other bits are 0
//	bytes 10–17  timeout_s, an IEEE 754 double
//	bytes 18–25  Deliver.MaxBytes (0 without delivery)
//	bytes 26–33  MaxDataBytes
//	byte 34      the run ID's length n, then its n bytes
//	then         the number of data folders k, then k times a name's
//	             length and its bytes
//	then         the body (runBody): the rest of the run, as JSON
//
// Numbers are big-endian; the two byte bounds are signed. Each field is
// in the header or in the body, never both, so that the supervisor and
// the guest cannot be told two things. The header is read for its shape
// only: the rules of its values are the run's (Run.Check), checked by
// the host before it sends the run and by the guest when it gets it.

// RunHeader is what a run frame's header says of its run.
type RunHeader struct {
	RunID          string
	TimeoutSeconds float64
	Deliver        *Deliver
	MaxDataBytes   int64
	// Data names the run's data folders: all that travels of them.
	Data []string
	// Net says the run may carry streams (Run.Net): the supervisor
	// routes a stream's frames only for such a run.
	Net bool
}

const (
	flagDeliver = 1 << 0
	flagNet     = 1 << 1
	// maxShort is the longest run ID or data folder name a length byte
	// can give, and the most data folders a count byte can.
	maxShort = math.MaxUint8
)

// runBody is what of a Run travels in its frame's body; the rest is in
// the header (RunHeader). A field added to Run goes into one of the two.
type runBody struct {
	Code           string      `json:"code"`
	Image          string      `json:"image"`
	MaxOutputBytes int         `json:"max_output_bytes"`
	Files          []InputFile `json:"files,omitempty"`
	ReturnFiles    bool        `json:"return_files"`
	Client         string      `json:"client,omitempty"`
	NetPorts       []int       `json:"net_ports,omitempty"`
	HostTimeNS     int64       `json:"host_time_ns,omitempty"`
}

// PeekRun reads a run frame's header, and nothing of its body.
func PeekRun(p []byte) (RunHeader, error) {
	typ, _, err := Peek(p)
	if err != nil {
		return RunHeader{}, err
	}
	if typ != TypeRun {
		return RunHeader{}, fmt.Errorf("wire: a %s frame has no run header", typ)
	}
	h, _, err := readRunHeader(p[headerSize:])
	return h, err
}

// splitRun is r as its frame carries it: header and body.
func splitRun(r *Run) (RunHeader, *runBody) {
	h := RunHeader{RunID: r.RunID, TimeoutSeconds: r.TimeoutSeconds, Deliver: r.Deliver, MaxDataBytes: r.MaxDataBytes, Net: r.Net}
	for _, d := range r.Data {
		h.Data = append(h.Data, d.Name)
	}
	return h, &runBody{Code: r.Code, Image: r.Image, MaxOutputBytes: r.MaxOutputBytes, Files: r.Files, ReturnFiles: r.ReturnFiles, Client: r.Client, NetPorts: r.NetPorts, HostTimeNS: r.HostTimeNS}
}

// joinRun is the run of a frame's header and body.
func joinRun(h RunHeader, b *runBody) *Run {
	r := &Run{RunID: h.RunID, Code: b.Code, Image: b.Image, TimeoutSeconds: h.TimeoutSeconds, MaxOutputBytes: b.MaxOutputBytes,
		Files: b.Files, ReturnFiles: b.ReturnFiles, MaxDataBytes: h.MaxDataBytes, Deliver: h.Deliver, Client: b.Client, Net: h.Net, NetPorts: b.NetPorts, HostTimeNS: b.HostTimeNS}
	for _, name := range h.Data {
		r.Data = append(r.Data, DataFolder{Name: name})
	}
	return r
}

// appendTo appends h to p, a frame's kind and ID.
func (h *RunHeader) appendTo(p []byte) ([]byte, error) {
	if len(h.RunID) > maxShort || len(h.Data) > maxShort {
		return nil, fmt.Errorf("wire: a run ID of %d bytes and %d data folders do not fit a run header (at most %d of each)",
			len(h.RunID), len(h.Data), maxShort)
	}
	var flags byte
	var deliver int64
	if h.Deliver != nil {
		flags, deliver = flagDeliver, h.Deliver.MaxBytes
	}
	if h.Net {
		flags |= flagNet
	}
	p = append(p, flags)
	p = binary.BigEndian.AppendUint64(p, math.Float64bits(h.TimeoutSeconds))
	p = binary.BigEndian.AppendUint64(p, uint64(deliver))
	p = binary.BigEndian.AppendUint64(p, uint64(h.MaxDataBytes))
	p = append(append(p, byte(len(h.RunID))), h.RunID...)
	p = append(p, byte(len(h.Data)))
	for _, name := range h.Data {
		if len(name) > maxShort {
			return nil, fmt.Errorf("wire: a data folder name of %d bytes does not fit a run header (at most %d)", len(name), maxShort)
		}
		p = append(append(p, byte(len(name))), name...)
	}
	return p, nil
}

// errShortRunHeader: the frame ends inside its run header.
var errShortRunHeader = errors.New("wire: a run frame's header is cut short")

// readRunHeader reads a run header from p, which follows a frame's kind
// and ID, and returns what follows it.
func readRunHeader(p []byte) (RunHeader, []byte, error) {
	c := cursor{p: p}
	var h RunHeader
	flags := c.u8()
	h.TimeoutSeconds = math.Float64frombits(c.u64())
	deliver := int64(c.u64())
	h.MaxDataBytes = int64(c.u64())
	h.RunID = c.text()
	for range c.u8() {
		h.Data = append(h.Data, c.text())
	}
	switch {
	case c.short:
		return RunHeader{}, nil, errShortRunHeader
	case flags&^(flagDeliver|flagNet) != 0:
		return RunHeader{}, nil, fmt.Errorf("wire: a run header with unknown flags %#02x", flags)
	}
	h.Net = flags&flagNet != 0
	switch {
	case flags&flagDeliver != 0:
		h.Deliver = &Deliver{MaxBytes: deliver}
	case deliver != 0:
		return RunHeader{}, nil, errors.New("wire: a run header with a delivery bound but no delivery")
	}
	return h, c.p, nil
}

// cursor reads fields from p in turn. Once p runs out, short is set and
// every read gives zeros.
type cursor struct {
	p     []byte
	short bool
}

func (c *cursor) take(n int) []byte {
	if c.short || len(c.p) < n {
		c.short = true
		return nil
	}
	b := c.p[:n]
	c.p = c.p[n:]
	return b
}

func (c *cursor) u8() byte {
	if b := c.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (c *cursor) u64() uint64 {
	if b := c.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// text reads a length byte and that many bytes.
func (c *cursor) text() string { return string(c.take(int(c.u8()))) }
