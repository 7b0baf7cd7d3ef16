package picture

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

const pngSignature = "\x89PNG\r\n\x1a\n"

// ihdr is a PNG's header chunk.
type ihdr struct {
	width, height                int
	depth, colorType, interlaced byte
}

// checkPNG walks the chunks: IHDR first, every chunk whole with its CRC
// right, the IDAT chunks together, a palette when the image needs one,
// and IEND last, at the very end of the file. Then it inflates the image
// data and checks it holds exactly the rows IHDR promises, each with a
// valid filter type.
func checkPNG(b []byte, maxSide int) (int, int, error) {
	var (
		hdr        ihdr
		idat       [][]byte
		idatClosed bool // a chunk other than IDAT followed the IDATs
		palette    bool
	)
	for pos, n := len(pngSignature), 0; ; n++ {
		if pos == len(b) {
			return 0, 0, errors.New("no IEND chunk: " + errCut.Error())
		}
		if len(b)-pos < 12 {
			return 0, 0, errCut
		}
		size := binary.BigEndian.Uint32(b[pos:])
		kind := string(b[pos+4 : pos+8])
		if size > 1<<31-1 || uint64(len(b)-pos-12) < uint64(size) {
			return 0, 0, fmt.Errorf("chunk %q of %d bytes: %w", kind, size, errCut)
		}
		data := b[pos+8 : pos+8+int(size)]
		if crc32.ChecksumIEEE(b[pos+4:pos+8+int(size)]) != binary.BigEndian.Uint32(b[pos+8+int(size):]) {
			return 0, 0, fmt.Errorf("chunk %q: its CRC does not match", kind)
		}
		pos += 12 + int(size)
		switch {
		case n == 0 && kind != "IHDR":
			return 0, 0, fmt.Errorf("the first chunk is %q, not IHDR", kind)
		case n == 0:
			var err error
			if hdr, err = readIHDR(data, maxSide); err != nil {
				return 0, 0, err
			}
		case kind == "IHDR":
			return 0, 0, errors.New("a second IHDR chunk")
		case kind == "PLTE":
			palette = true
		case kind == "IDAT" && idatClosed:
			return 0, 0, errors.New("IDAT chunks that are not together")
		case kind == "IDAT":
			idat = append(idat, data)
		case len(idat) > 0:
			idatClosed = true
		}
		if kind == "IEND" {
			switch {
			case pos != len(b):
				return 0, 0, fmt.Errorf("%d bytes after the IEND chunk", len(b)-pos)
			case len(idat) == 0:
				return 0, 0, errors.New("no IDAT chunk")
			case hdr.colorType == 3 && !palette:
				return 0, 0, errors.New("a palette image with no PLTE chunk")
			}
			return hdr.width, hdr.height, checkRows(hdr, idat)
		}
	}
}

// depths are the bit depths each PNG color type allows.
var depths = map[byte][]byte{0: {1, 2, 4, 8, 16}, 2: {8, 16}, 3: {1, 2, 4, 8}, 4: {8, 16}, 6: {8, 16}}

// channels is the samples per pixel of each PNG color type.
var channels = map[byte]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}

// readIHDR reads and checks the header: a bit depth the color type
// allows, the one compression and filter method, no interlacing or Adam7.
// (image/png's DecodeConfig reads on to the palette, so it cannot tell a
// bad header from a missing palette.)
func readIHDR(data []byte, maxSide int) (ihdr, error) {
	if len(data) != 13 {
		return ihdr{}, fmt.Errorf("an IHDR chunk of %d bytes, not 13", len(data))
	}
	w, h := binary.BigEndian.Uint32(data[0:]), binary.BigEndian.Uint32(data[4:])
	hdr := ihdr{width: int(w), height: int(h), depth: data[8], colorType: data[9], interlaced: data[12]}
	switch {
	case w > 1<<31-1 || h > 1<<31-1:
		return ihdr{}, fmt.Errorf("IHDR: %dx%d px is not a PNG size", w, h)
	case !slices.Contains(depths[hdr.colorType], hdr.depth):
		return ihdr{}, fmt.Errorf("IHDR: bit depth %d with color type %d", hdr.depth, hdr.colorType)
	case data[10] != 0 || data[11] != 0 || hdr.interlaced > 1:
		return ihdr{}, fmt.Errorf("IHDR: compression, filter or interlace method %d, %d, %d", data[10], data[11], data[12])
	}
	return hdr, sides(hdr.width, hdr.height, maxSide)
}

// adam7 is the interlaced passes' grid: x and y start, x and y step.
var adam7 = [][4]int{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}

// checkRows inflates the image data into nothing and checks that it
// holds each pass's rows, each a filter type byte (0 to 4) and the row's
// bytes, and then ends, with the zlib checksum right. The work is bounded
// by the dimensions, which the caller has checked.
func checkRows(h ihdr, idat [][]byte) error {
	readers := make([]io.Reader, len(idat))
	for i, d := range idat {
		readers[i] = bytes.NewReader(d)
	}
	z, err := zlib.NewReader(io.MultiReader(readers...))
	if err != nil {
		return fmt.Errorf("the image data is not zlib: %v", err)
	}
	r := bufio.NewReader(z)
	passes := [][4]int{{0, 0, 1, 1}}
	if h.interlaced == 1 {
		passes = adam7
	}
	bitsPerPixel := int(h.depth) * channels[h.colorType]
	for _, p := range passes {
		w, rows := (h.width-p[0]+p[2]-1)/p[2], (h.height-p[1]+p[3]-1)/p[3]
		if w <= 0 || rows <= 0 {
			continue // an empty pass has no rows, not even filter bytes
		}
		rowBytes := (w*bitsPerPixel + 7) / 8
		for range rows {
			f, err := r.ReadByte()
			if err == nil && f > 4 {
				return fmt.Errorf("a row with filter type %d (0 to 4 exist)", f)
			}
			if err == nil {
				_, err = r.Discard(rowBytes)
			}
			if err != nil {
				return fmt.Errorf("the image data ends before its last row: %w", dataErr(err))
			}
		}
	}
	if _, err := r.ReadByte(); err != io.EOF {
		if err == nil {
			return errors.New("the image data holds more than its rows")
		}
		return fmt.Errorf("the image data does not end well: %w", dataErr(err))
	}
	return nil
}

// dataErr says what an error from inflating means.
func dataErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errCut
	}
	return err
}
