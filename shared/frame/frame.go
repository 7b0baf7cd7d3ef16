package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Max is the largest payload a frame may declare. The largest message is a
// run request: 64 KiB of code (up to six bytes each once JSON-escaped) and
// 256 KiB of input files (base64 in JSON), well under 1 MiB.
const Max = 1 << 20

// headerSize is the length prefix: a big-endian uint32.
const headerSize = 4

// ErrTooLarge is returned for a frame that declares, or would need, more
// than Max bytes of payload.
var ErrTooLarge = errors.New("frame: payload larger than the maximum")

// ErrEmpty is returned for a frame with a zero-length payload: no message
// is empty, so such a frame is a sign of a confused or hostile peer.
var ErrEmpty = errors.New("frame: empty payload")

// Write writes payload as one frame. It refuses payloads above Max so that
// a writer can never produce a frame its peer must reject.
func Write(w io.Writer, payload []byte) error {
	if len(payload) == 0 {
		return ErrEmpty
	}
	if len(payload) > Max {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(payload))
	}
	buf := make([]byte, headerSize+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(len(payload)))
	copy(buf[headerSize:], payload)
	_, err := w.Write(buf)
	return err
}

// Read reads one frame and returns its payload. The declared length is
// checked against Max before any buffer for the payload is made. io.EOF is
// returned only when the stream ends cleanly between frames; a stream that
// ends inside a frame yields io.ErrUnexpectedEOF.
func Read(r io.Reader) ([]byte, error) {
	var hdr [headerSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, ErrEmpty
	}
	if n > Max {
		return nil, fmt.Errorf("%w: declared %d bytes, maximum %d", ErrTooLarge, n, Max)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return payload, nil
}
