package picture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image/jpeg"
)

// JPEG markers the walk tells apart.
const (
	markerSOI = 0xd8
	markerEOI = 0xd9
	markerSOS = 0xda
	markerRST = 0xd0 // to 0xd7
)

// isSOF reports whether marker m starts a frame (SOF0 to SOF15, which
// share the range with DHT, JPG and DAC).
func isSOF(m byte) bool {
	return m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc
}

// checkJPEG walks the markers from SOI: segments whole, one frame header,
// at least one scan after it, and EOI at the very end of the file. The
// frame header is read by image/jpeg, which accepts only the kinds of
// JPEG it can decode (baseline and progressive). The scans' coded data
// is skipped, not decoded.
func checkJPEG(b []byte, maxSide int) (int, int, error) {
	frame, scans, w, h := false, 0, 0, 0
	pos := 2 // after SOI
	for {
		for pos < len(b) && b[pos] == 0xff && pos+1 < len(b) && b[pos+1] == 0xff {
			pos++ // fill bytes
		}
		if len(b)-pos < 2 {
			return 0, 0, errors.New("no EOI marker: " + errCut.Error())
		}
		if b[pos] != 0xff {
			return 0, 0, fmt.Errorf("byte %d is not a marker", pos)
		}
		m := b[pos+1]
		pos += 2
		switch {
		case m == markerEOI && scans == 0:
			return 0, 0, errors.New("EOI before any scan")
		case m == markerEOI && pos != len(b):
			return 0, 0, fmt.Errorf("%d bytes after the EOI marker", len(b)-pos)
		case m == markerEOI:
			return w, h, nil
		case m == markerSOI || m == 0x01 || m >= markerRST && m <= markerRST+7 || m == 0x00:
			return 0, 0, fmt.Errorf("marker 0x%02x out of place", m)
		}
		if len(b)-pos < 2 {
			return 0, 0, errCut
		}
		size := int(binary.BigEndian.Uint16(b[pos:]))
		if size < 2 || len(b)-pos < size {
			return 0, 0, fmt.Errorf("segment 0x%02x of %d bytes: %w", m, size, errCut)
		}
		pos += size
		switch {
		case isSOF(m) && frame:
			return 0, 0, errors.New("a second frame header")
		case isSOF(m):
			frame = true
			var err error
			if w, h, err = jpegSides(b, maxSide); err != nil {
				return 0, 0, err
			}
		case m == markerSOS && !frame:
			return 0, 0, errors.New("a scan before the frame header")
		case m == markerSOS:
			scans++
			pos = skipScan(b, pos)
		}
	}
}

// skipScan returns where the coded data that starts at pos ends: at the
// first marker other than a stuffed 0xff00 or a restart marker (or at the
// end of b).
func skipScan(b []byte, pos int) int {
	for {
		i := bytes.IndexByte(b[pos:], 0xff)
		if i < 0 || pos+i+1 >= len(b) {
			return len(b)
		}
		pos += i
		if m := b[pos+1]; m != 0 && (m < markerRST || m > markerRST+7) && m != 0xff {
			return pos
		}
		pos += 1
	}
}

func jpegSides(b []byte, maxSide int) (int, int, error) {
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return 0, 0, fmt.Errorf("a frame header image/jpeg does not accept (%v)", err)
	}
	return cfg.Width, cfg.Height, sides(cfg.Width, cfg.Height, maxSide)
}
