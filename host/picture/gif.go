package picture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image/gif"
)

// GIF block introducers.
const (
	gifExtension = 0x21
	gifImage     = 0x2c
	gifTrailer   = 0x3b
)

// checkGIF walks the blocks after the screen descriptor (read by
// image/gif): extensions and images whole, every image inside the screen
// and with a color table, at least one image, and the trailer as the
// last byte. The images' compressed data is skipped, not decoded.
func checkGIF(b []byte, maxSide int) (int, int, error) {
	cfg, err := gif.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return 0, 0, fmt.Errorf("a bad screen descriptor (%v)", err)
	}
	if err := sides(cfg.Width, cfg.Height, maxSide); err != nil {
		return 0, 0, err
	}
	global := b[10]&0x80 != 0
	pos := 13 + colorTable(b[10])
	images := 0
	for {
		if pos >= len(b) {
			return 0, 0, errors.New("no trailer: " + errCut.Error())
		}
		block := b[pos]
		pos++
		switch block {
		case gifTrailer:
			if pos != len(b) {
				return 0, 0, fmt.Errorf("%d bytes after the trailer", len(b)-pos)
			}
			if images == 0 {
				return 0, 0, errors.New("no image in it")
			}
			return cfg.Width, cfg.Height, nil
		case gifExtension:
			if pos >= len(b) {
				return 0, 0, errCut
			}
			pos++ // the label
		case gifImage:
			images++
			if len(b)-pos < 10 {
				return 0, 0, errCut
			}
			d := b[pos : pos+9]
			left, top := int(binary.LittleEndian.Uint16(d[0:])), int(binary.LittleEndian.Uint16(d[2:]))
			w, h := int(binary.LittleEndian.Uint16(d[4:])), int(binary.LittleEndian.Uint16(d[6:]))
			if left+w > cfg.Width || top+h > cfg.Height {
				return 0, 0, fmt.Errorf("image %d (%dx%d at %d,%d) is outside the %dx%d screen", images, w, h, left, top, cfg.Width, cfg.Height)
			}
			if !global && d[8]&0x80 == 0 {
				return 0, 0, fmt.Errorf("image %d has no color table", images)
			}
			pos += 9 + colorTable(d[8])
			if pos >= len(b) {
				return 0, 0, errCut
			}
			if lzw := b[pos]; lzw < 2 || lzw > 8 {
				return 0, 0, fmt.Errorf("image %d: LZW code size %d (2 to 8 exist)", images, lzw)
			}
			pos++
		default:
			return 0, 0, fmt.Errorf("byte %d is 0x%02x, not a block", pos-1, block)
		}
		var err error
		if pos, err = skipSubBlocks(b, pos); err != nil {
			return 0, 0, err
		}
	}
}

// colorTable is the size of the color table that packed fields announce.
func colorTable(packed byte) int {
	if packed&0x80 == 0 {
		return 0
	}
	return 3 << (packed&7 + 1)
}

// skipSubBlocks returns where the data sub-blocks at pos end, after their
// terminating empty block.
func skipSubBlocks(b []byte, pos int) (int, error) {
	for {
		if pos >= len(b) {
			return 0, errCut
		}
		n := int(b[pos])
		pos += 1 + n
		if n == 0 {
			return pos, nil
		}
	}
}
