package wire

import (
	"encoding/binary"
	"fmt"
)

// A run the user let reach the network (Run.Net) may carry streams: each
// connection a program in the box opens to the box's proxy is one, from
// the guest, which relays its bytes as they come and never reads them,
// to the host process that made the run, which reads, checks and serves
// it (host/egress). A stream's frames are addressed by the run's own
// message ID, as its output is, and carry a binary body, not JSON: a
// stream number, then what the kind says.
//
//	net_open   guest → host   stream                 a connection was accepted
//	net_data   both ways      stream, 1..MaxNetChunk bytes
//	net_window both ways      stream, u32            the sender may send that many bytes more
//	net_close  both ways      stream, u8             0: no more from this side (fin); 1: abort
//
// Each side may send NetWindow bytes of a stream's data before the other
// grants more: no side buffers more than that per stream, so one slow
// stream never holds the channel the other runs share.
const (
	TypeNetOpen   = "net_open"
	TypeNetData   = "net_data"
	TypeNetWindow = "net_window"
	TypeNetClose  = "net_close"
)

// Bounds of a run's streams.
const (
	// MaxNetChunk is the most data one net_data frame carries.
	MaxNetChunk = 16 << 10
	// NetWindow is each side's credit for a stream, each way, when it
	// opens; a net_window grants at most this much more at once.
	NetWindow = 64 << 10
	// MaxNetOpen is how many streams a run may have open at once.
	MaxNetOpen = 16
	// MaxNetStreams is how many streams a run may open in all.
	MaxNetStreams = 256
)

// NetFrame is the body of a stream's frame.
type NetFrame struct {
	Stream uint32 // never 0
	Data   []byte // net_data: 1..MaxNetChunk bytes
	Window uint32 // net_window: 1..NetWindow
	Abort  bool   // net_close: abort, not fin
}

// isNet says whether typ is a stream's frame.
func isNet(typ string) bool {
	return typ == TypeNetOpen || typ == TypeNetData || typ == TypeNetWindow || typ == TypeNetClose
}

// appendNet appends f's binary body for a frame of typ.
func appendNet(p []byte, typ string, f *NetFrame) ([]byte, error) {
	if err := f.check(typ); err != nil {
		return nil, err
	}
	p = binary.BigEndian.AppendUint32(p, f.Stream)
	switch typ {
	case TypeNetData:
		p = append(p, f.Data...)
	case TypeNetWindow:
		p = binary.BigEndian.AppendUint32(p, f.Window)
	case TypeNetClose:
		how := byte(0)
		if f.Abort {
			how = 1
		}
		p = append(p, how)
	}
	return p, nil
}

// check says whether f is a frame of typ as a peer may send it.
func (f *NetFrame) check(typ string) error {
	if f.Stream == 0 {
		return fmt.Errorf("wire: %s: stream 0", typ)
	}
	switch typ {
	case TypeNetData:
		if len(f.Data) == 0 || len(f.Data) > MaxNetChunk {
			return fmt.Errorf("wire: net_data of %d bytes: 1 to %d", len(f.Data), MaxNetChunk)
		}
	case TypeNetWindow:
		if f.Window == 0 || f.Window > NetWindow {
			return fmt.Errorf("wire: net_window of %d bytes: 1 to %d", f.Window, NetWindow)
		}
	}
	if typ != TypeNetData && len(f.Data) > 0 || typ != TypeNetWindow && f.Window != 0 || typ != TypeNetClose && f.Abort {
		return fmt.Errorf("wire: a %s frame with another kind's fields", typ)
	}
	return nil
}

// readNet reads the binary body of a frame of typ, exactly: its length
// is the kind's, or for data within the kind's bounds. Data is a copy.
func readNet(typ string, b []byte) (*NetFrame, error) {
	stream, n, err := peekNet(typ, b)
	if err != nil {
		return nil, err
	}
	f := &NetFrame{Stream: stream}
	switch typ {
	case TypeNetData:
		f.Data = append([]byte(nil), b[4:4+n]...)
	case TypeNetWindow:
		f.Window = binary.BigEndian.Uint32(b[4:])
	case TypeNetClose:
		f.Abort = b[4] == 1
	}
	if err := f.check(typ); err != nil {
		return nil, err
	}
	return f, nil
}

// peekNet checks a stream frame's body without copying it: its stream
// and, for data, how many bytes it carries.
func peekNet(typ string, b []byte) (stream uint32, dataLen int, err error) {
	want := map[string]int{TypeNetOpen: 4, TypeNetWindow: 8, TypeNetClose: 5}[typ]
	switch {
	case typ == TypeNetData && (len(b) < 5 || len(b) > 4+MaxNetChunk):
		return 0, 0, fmt.Errorf("wire: a net_data body of %d bytes: 5 to %d", len(b), 4+MaxNetChunk)
	case typ != TypeNetData && len(b) != want:
		return 0, 0, fmt.Errorf("wire: a %s body of %d bytes, not %d", typ, len(b), want)
	case typ == TypeNetClose && b[4] > 1:
		return 0, 0, fmt.Errorf("wire: net_close how %d: 0 (fin) or 1 (abort)", b[4])
	case typ == TypeNetWindow:
		if w := binary.BigEndian.Uint32(b[4:]); w == 0 || w > NetWindow {
			return 0, 0, fmt.Errorf("wire: net_window of %d bytes: 1 to %d", w, NetWindow)
		}
	}
	stream = binary.BigEndian.Uint32(b)
	if stream == 0 {
		return 0, 0, fmt.Errorf("wire: %s: stream 0", typ)
	}
	if typ == TypeNetData {
		dataLen = len(b) - 4
	}
	return stream, dataLen, nil
}

// PeekNet reads a stream frame's kind, ID, stream and data length,
// checked, without copying: for the relay, which forwards streams
// without decoding them.
func PeekNet(p []byte) (typ string, id uint64, stream uint32, dataLen int, err error) {
	typ, id, err = Peek(p)
	if err != nil {
		return "", 0, 0, 0, err
	}
	if !isNet(typ) {
		return "", 0, 0, 0, fmt.Errorf("wire: a %s frame is not a stream's", typ)
	}
	stream, dataLen, err = peekNet(typ, p[headerSize:])
	return typ, id, stream, dataLen, err
}
