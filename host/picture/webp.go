package picture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/image/vp8"
	"golang.org/x/image/vp8l"
)

// VP8X flags the check looks at.
const (
	vp8xAnimation = 1 << 1
	vp8xAlpha     = 1 << 4
)

// checkWebP walks the RIFF chunks: the RIFF size exactly the file's, every
// chunk whole, and either one image chunk (VP8 or VP8L) or a VP8X header
// followed by exactly one, of the canvas's size. Animations are refused:
// a client may take only their first frame, or none. The dimensions come
// from the image chunk's own header (x/image's vp8 and vp8l); its
// compressed data is not decoded.
func checkWebP(b []byte, maxSide int) (int, int, error) {
	size := binary.LittleEndian.Uint32(b[4:])
	switch {
	case uint64(size)+8 > uint64(len(b)):
		return 0, 0, fmt.Errorf("the RIFF header says %d bytes, the file has %d: %w", uint64(size)+8, len(b), errCut)
	case uint64(size)+8 < uint64(len(b)):
		return 0, 0, fmt.Errorf("%d bytes after the RIFF data", uint64(len(b))-uint64(size)-8)
	}
	var (
		canvasW, canvasH int
		extended         bool
		w, h             int
		images           int
	)
	for pos, n := 12, 0; pos < len(b); n++ {
		if len(b)-pos < 8 {
			return 0, 0, errCut
		}
		kind, size := string(b[pos:pos+4]), binary.LittleEndian.Uint32(b[pos+4:])
		if uint64(len(b)-pos-8) < uint64(size) {
			return 0, 0, fmt.Errorf("chunk %q of %d bytes: %w", kind, size, errCut)
		}
		data := b[pos+8 : pos+8+int(size)]
		pos += 8 + int(size) + int(size&1) // chunks are padded to an even size
		if pos > len(b) {
			return 0, 0, fmt.Errorf("chunk %q: no padding byte: %w", kind, errCut)
		}
		switch {
		case n == 0 && kind == "VP8X":
			if len(data) != 10 {
				return 0, 0, fmt.Errorf("a VP8X chunk of %d bytes, not 10", len(data))
			}
			if data[0]&vp8xAnimation != 0 {
				return 0, 0, errors.New("an animation")
			}
			extended = true
			canvasW, canvasH = int(uint24(data[4:]))+1, int(uint24(data[7:]))+1
			if err := sides(canvasW, canvasH, maxSide); err != nil {
				return 0, 0, err
			}
		case n == 0 && kind != "VP8 " && kind != "VP8L":
			return 0, 0, fmt.Errorf("the first chunk is %q, not VP8, VP8L or VP8X", kind)
		case kind == "ANIM" || kind == "ANMF":
			return 0, 0, errors.New("an animation")
		case kind == "VP8 " || kind == "VP8L":
			if images++; images > 1 {
				return 0, 0, errors.New("more than one image chunk")
			}
			var err error
			if w, h, err = webpFrame(kind, data); err != nil {
				return 0, 0, err
			}
		}
	}
	switch {
	case images == 0:
		return 0, 0, errors.New("no image chunk")
	case extended && (w != canvasW || h != canvasH):
		return 0, 0, fmt.Errorf("an image of %dx%d px on a canvas of %dx%d", w, h, canvasW, canvasH)
	}
	return w, h, sides(w, h, maxSide)
}

// webpFrame reads an image chunk's header.
func webpFrame(kind string, data []byte) (int, int, error) {
	if kind == "VP8L" {
		cfg, err := vp8l.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			return 0, 0, fmt.Errorf("a bad VP8L header (%v)", err)
		}
		return cfg.Width, cfg.Height, nil
	}
	d := vp8.NewDecoder()
	d.Init(bytes.NewReader(data), len(data))
	fh, err := d.DecodeFrameHeader()
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("a bad VP8 header (%v)", err)
	case !fh.KeyFrame:
		return 0, 0, errors.New("a VP8 chunk that is not a key frame")
	}
	return fh.Width, fh.Height, nil
}

func uint24(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 }
