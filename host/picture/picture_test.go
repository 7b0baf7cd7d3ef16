package picture

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/color/palette"
	"image/gif"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"

	"golang.org/x/image/webp"
)

const maxSide = 2000

// chart draws something with edges and gradients, like a plot.
func chart(w, h int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), 128, 255}
			if x == w/2 || y == h/3 {
				c = color.RGBA{0, 0, 0, 255}
			}
			m.Set(x, y, c)
		}
	}
	return m
}

func encodePNG(t testing.TB, m image.Image) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeJPEG(t testing.TB, m image.Image) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeGIF(t testing.TB, frames int, w, h int) []byte {
	var b bytes.Buffer
	g := &gif.GIF{}
	for i := range frames {
		p := image.NewPaletted(image.Rect(0, 0, w, h), palette.Plan9)
		for x := range w {
			p.SetColorIndex(x, (x+i)%h, uint8(x+i))
		}
		g.Image, g.Delay = append(g.Image, p), append(g.Delay, 10)
	}
	if err := gif.EncodeAll(&b, g); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bitWriter writes a VP8L bitstream: least significant bit first.
type bitWriter struct {
	b    []byte
	bits int
}

func (w *bitWriter) put(v uint32, n int) {
	for i := range n {
		if w.bits%8 == 0 {
			w.b = append(w.b, 0)
		}
		w.b[len(w.b)-1] |= byte(v>>i&1) << (w.bits % 8)
		w.bits++
	}
}

// vp8lSolid is a lossless VP8L bitstream of one color: no transforms, no
// color cache, and five prefix codes of one symbol each, so that every
// pixel takes no bits at all. Go has no WebP encoder; webp.Decode below
// proves the bytes are a real WebP.
func vp8lSolid(w, h int, c color.NRGBA) []byte {
	var bw bitWriter
	bw.put(0x2f, 8)
	bw.put(uint32(w-1), 14)
	bw.put(uint32(h-1), 14)
	bw.put(0, 1) // alpha hint
	bw.put(0, 3) // version
	bw.put(0, 1) // no transform
	bw.put(0, 1) // no color cache
	bw.put(0, 1) // no meta prefix codes
	for _, sym := range []uint8{c.G, c.R, c.B, c.A, 0} {
		bw.put(1, 1) // a simple code
		bw.put(0, 1) // of one symbol
		bw.put(1, 1) // of 8 bits
		bw.put(uint32(sym), 8)
	}
	return bw.b
}

// riff wraps chunks in a WebP file, padding each to an even size.
func riff(chunks ...[2]string) []byte {
	var body []byte
	for _, c := range chunks {
		body = append(body, c[0]...)
		body = binary.LittleEndian.AppendUint32(body, uint32(len(c[1])))
		body = append(body, c[1]...)
		if len(c[1])%2 == 1 {
			body = append(body, 0)
		}
	}
	out := append([]byte("RIFF"), binary.LittleEndian.AppendUint32(nil, uint32(4+len(body)))...)
	return append(append(out, "WEBP"...), body...)
}

func vp8x(flags byte, w, h int) string {
	b := []byte{flags, 0, 0, 0}
	for _, v := range []int{w - 1, h - 1} {
		b = append(b, byte(v), byte(v>>8), byte(v>>16))
	}
	return string(b)
}

// vp8Header is the start of a VP8 key frame: the frame tag, the start
// code and the dimensions. The check reads no further.
func vp8Header(w, h int) string {
	return string([]byte{0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, byte(w), byte(w >> 8), byte(h), byte(h >> 8)}) + strings.Repeat("\x00", 20)
}

func webpSolid(t testing.TB, w, h int) []byte {
	b := riff([2]string{"VP8L", string(vp8lSolid(w, h, color.NRGBA{200, 100, 50, 255}))})
	m, err := webp.Decode(bytes.NewReader(b))
	if err != nil || m.Bounds().Dx() != w || m.Bounds().Dy() != h {
		t.Fatalf("the test's own WebP does not decode: %v", err)
	}
	return b
}

// pngChunks builds a PNG from chunks, with their CRCs.
func pngChunks(chunks ...[2]string) []byte {
	b := []byte(pngSignature)
	for _, c := range chunks {
		b = binary.BigEndian.AppendUint32(b, uint32(len(c[1])))
		start := len(b)
		b = append(append(b, c[0]...), c[1]...)
		b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:]))
	}
	return b
}

func ihdrChunk(w, h int, depth, colorType, interlace byte) [2]string {
	d := binary.BigEndian.AppendUint32(nil, uint32(w))
	d = binary.BigEndian.AppendUint32(d, uint32(h))
	return [2]string{"IHDR", string(append(d, depth, colorType, 0, 0, interlace))}
}

func zlibOf(raw []byte) string {
	var b bytes.Buffer
	z := zlib.NewWriter(&b)
	z.Write(raw)
	z.Close()
	return b.String()
}

// interlacedGray is an Adam7 8-bit gray PNG, built row by row; extra is
// added to (or, negative, taken from) the raw data's end.
func interlacedGray(w, h, extra int) []byte {
	var raw []byte
	for _, p := range adam7 {
		pw, ph := (w-p[0]+p[2]-1)/p[2], (h-p[1]+p[3]-1)/p[3]
		if pw <= 0 || ph <= 0 {
			continue
		}
		for y := range ph {
			raw = append(raw, 0)
			for x := range pw {
				raw = append(raw, byte(x*7+y))
			}
		}
	}
	if extra < 0 {
		raw = raw[:len(raw)+extra]
	}
	raw = append(raw, make([]byte, max(extra, 0))...)
	return pngChunks(ihdrChunk(w, h, 8, 0, 1), [2]string{"IDAT", zlibOf(raw)}, [2]string{"IEND", ""})
}

func TestGood(t *testing.T) {
	rgba := chart(64, 48)
	gray := image.NewGray16(image.Rect(0, 0, 2000, 3))
	pal := image.NewPaletted(image.Rect(0, 0, 5, 7), color.Palette{color.Black, color.White})
	vp8xWebP := riff([2]string{"VP8X", vp8x(vp8xAlpha, 3, 2)}, [2]string{"VP8L", string(vp8lSolid(3, 2, color.NRGBA{1, 2, 3, 4}))})
	if _, err := webp.Decode(bytes.NewReader(vp8xWebP)); err != nil {
		t.Fatalf("the test's VP8X WebP does not decode: %v", err)
	}
	for _, tc := range []struct {
		name  string
		b     []byte
		f     *Format
		w, h  int
		gonly bool // image/png must agree that it decodes
	}{
		{"png rgba", encodePNG(t, rgba), PNG, 64, 48, true},
		{"png 16-bit gray, 2000 px wide", encodePNG(t, gray), PNG, 2000, 3, true},
		{"png palette", encodePNG(t, pal), PNG, 5, 7, true},
		{"png interlaced", interlacedGray(13, 11, 0), PNG, 13, 11, true},
		{"png interlaced 1x1", interlacedGray(1, 1, 0), PNG, 1, 1, true},
		{"jpeg", encodeJPEG(t, rgba), JPEG, 64, 48, false},
		{"jpeg gray", encodeJPEG(t, image.NewGray(image.Rect(0, 0, 9, 17))), JPEG, 9, 17, false},
		{"gif", encodeGIF(t, 1, 40, 30), GIF, 40, 30, false},
		{"gif animated", encodeGIF(t, 5, 40, 30), GIF, 40, 30, false},
		{"webp lossless", webpSolid(t, 33, 21), WebP, 33, 21, false},
		{"webp extended", vp8xWebP, WebP, 3, 2, false},
		{"webp lossy header", riff([2]string{"VP8 ", vp8Header(320, 200)}), WebP, 320, 200, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.gonly {
				if _, err := png.Decode(bytes.NewReader(tc.b)); err != nil {
					t.Fatalf("image/png cannot decode the test's own PNG: %v", err)
				}
			}
			info, err := Check(tc.b, maxSide)
			if err != nil || info.Format != tc.f || info.Width != tc.w || info.Height != tc.h {
				t.Fatalf("%+v %v", info, err)
			}
		})
	}
}

func TestNotPictures(t *testing.T) {
	for _, b := range []string{"", "hello, this is text in a file named chart.png\n", "\x89PN", "GIF88a", "RIFF\x00\x00\x00\x00WAVE", "\xff\xd8"} {
		if info, err := Check([]byte(b), maxSide); !errors.Is(err, ErrNotPicture) || info.Format != nil {
			t.Errorf("%q: %+v %v", b, info, err)
		}
	}
}

// bad expects Check to refuse b with an error that says want.
func bad(t *testing.T, name string, b []byte, want string) {
	t.Helper()
	info, err := Check(b, maxSide)
	if err == nil || errors.Is(err, ErrNotPicture) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %+v, error %v; want one that says %q", name, info, err, want)
	}
}

func TestBad(t *testing.T) {
	good := encodePNG(t, chart(64, 48))
	bad(t, "png 3000x10", encodePNG(t, image.NewGray(image.Rect(0, 0, 3000, 10))), "3000x10 px: over 2000 px on the long side")
	bad(t, "png 10x2001", encodePNG(t, image.NewGray(image.Rect(0, 0, 10, 2001))), "over 2000 px")
	// An IHDR that claims a huge picture over a few bytes of data: refused
	// before a byte of it is inflated.
	bad(t, "png bomb", pngChunks(ihdrChunk(100000, 100000, 8, 6, 0), [2]string{"IDAT", zlibOf(nil)}, [2]string{"IEND", ""}), "100000x100000 px")
	bad(t, "png after IEND", append(bytes.Clone(good), "junk"...), "4 bytes after the IEND chunk")
	bad(t, "png no IEND", good[:len(good)-12], "no IEND chunk: the file is cut short")
	bad(t, "png IDAT first", pngChunks([2]string{"IDAT", zlibOf([]byte{0, 0})}, ihdrChunk(1, 1, 8, 0, 0), [2]string{"IEND", ""}), "not IHDR")
	bad(t, "png no IDAT", pngChunks(ihdrChunk(1, 1, 8, 0, 0), [2]string{"IEND", ""}), "no IDAT")
	bad(t, "png short rows", interlacedGray(13, 11, -1), "ends before its last row")
	bad(t, "png long rows", interlacedGray(13, 11, 1), "more than its rows")
	bad(t, "png filter 5", pngChunks(ihdrChunk(1, 1, 8, 0, 0), [2]string{"IDAT", zlibOf([]byte{5, 0})}, [2]string{"IEND", ""}), "filter type 5")
	bad(t, "png not zlib", pngChunks(ihdrChunk(1, 1, 8, 0, 0), [2]string{"IDAT", "\x00\x00\x00"}, [2]string{"IEND", ""}), "not zlib")
	bad(t, "png split IDAT", pngChunks(ihdrChunk(1, 1, 8, 0, 0), [2]string{"IDAT", ""}, [2]string{"tEXt", "a\x00b"}, [2]string{"IDAT", zlibOf([]byte{0, 0})}, [2]string{"IEND", ""}), "not together")
	bad(t, "png no palette", pngChunks(ihdrChunk(1, 1, 8, 3, 0), [2]string{"IDAT", zlibOf([]byte{0, 0})}, [2]string{"IEND", ""}), "no PLTE")
	bad(t, "png bad depth", pngChunks(ihdrChunk(1, 1, 3, 2, 0), [2]string{"IDAT", zlibOf([]byte{0, 0})}, [2]string{"IEND", ""}), "bit depth 3 with color type 2")
	bad(t, "png zero width", pngChunks(ihdrChunk(0, 1, 8, 0, 0), [2]string{"IDAT", zlibOf([]byte{0})}, [2]string{"IEND", ""}), "0x1 px: a side of 0")
	flipped := bytes.Clone(good)
	flipped[len(good)/2] ^= 1
	bad(t, "png bit flipped", flipped, "CRC does not match")

	j := encodeJPEG(t, chart(64, 48))
	bad(t, "jpeg no EOI", j[:len(j)-2], "no EOI marker: the file is cut short")
	bad(t, "jpeg after EOI", append(bytes.Clone(j), 0, 0), "2 bytes after the EOI marker")
	bad(t, "jpeg 3000x10", encodeJPEG(t, image.NewGray(image.Rect(0, 0, 3000, 10))), "3000x10 px")
	bad(t, "jpeg no scan", []byte{0xff, 0xd8, 0xff, 0xd9}, "EOI before any scan")

	g := encodeGIF(t, 2, 40, 30)
	bad(t, "gif no trailer", g[:len(g)-1], "no trailer")
	bad(t, "gif after trailer", append(bytes.Clone(g), ';'), "1 bytes after the trailer")
	bad(t, "gif 2001x1", encodeGIF(t, 1, 2001, 1), "2001x1 px")
	bad(t, "gif zero height", append([]byte("GIF89a\x05\x00\x00\x00\x00\x00\x00"), ';'), "a side of 0")

	w := webpSolid(t, 33, 21)
	bad(t, "webp cut", w[:len(w)-1], "cut short")
	bad(t, "webp after RIFF", append(bytes.Clone(w), 0, 0), "2 bytes after the RIFF data")
	bad(t, "webp 3000x10", riff([2]string{"VP8L", string(vp8lSolid(3000, 10, color.NRGBA{}))}), "3000x10 px")
	bad(t, "webp lossy 3000x10", riff([2]string{"VP8 ", vp8Header(3000, 10)}), "3000x10 px")
	bad(t, "webp canvas 3000x10", riff([2]string{"VP8X", vp8x(0, 3000, 10)}, [2]string{"VP8L", string(vp8lSolid(3, 2, color.NRGBA{}))}), "3000x10 px")
	bad(t, "webp canvas mismatch", riff([2]string{"VP8X", vp8x(0, 4, 2)}, [2]string{"VP8L", string(vp8lSolid(3, 2, color.NRGBA{}))}), "on a canvas of 4x2")
	bad(t, "webp animated", riff([2]string{"VP8X", vp8x(vp8xAnimation, 3, 2)}, [2]string{"ANIM", "\x00\x00\x00\x00\x00\x00"}), "an animation")
	bad(t, "webp no image", riff([2]string{"VP8X", vp8x(0, 3, 2)}), "no image chunk")
	bad(t, "webp ICC first", riff([2]string{"ICCP", "xx"}), "not VP8, VP8L or VP8X")
}

// Every prefix of a good picture is refused: a program killed while it
// was writing one leaves a file that is not shown.
func TestEveryPrefixRefused(t *testing.T) {
	for _, good := range [][]byte{
		encodePNG(t, chart(20, 10)), interlacedGray(9, 7, 0), encodeJPEG(t, chart(20, 10)),
		encodeGIF(t, 3, 20, 10), webpSolid(t, 5, 4),
	} {
		f := Sniff(good)
		if _, err := Check(good, maxSide); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		for n := range len(good) {
			if info, err := Check(good[:n], maxSide); err == nil {
				t.Errorf("%s: the first %d of %d bytes were accepted as %+v", f.Name, n, len(good), info)
			}
		}
	}
}

// A PNG with any one byte changed is refused: every byte after the
// signature is under a CRC or the zlib checksum.
func TestEveryPNGByteMatters(t *testing.T) {
	good := encodePNG(t, chart(8, 6))
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x10
		if info, err := Check(b, maxSide); err == nil {
			t.Errorf("byte %d changed: accepted as %+v", i, info)
		}
	}
}

// FuzzCheck: whatever the bytes, Check returns (no panic, no hang), what
// it accepts has sides within the bound, and a PNG it accepts image/png
// decodes too.
func FuzzCheck(f *testing.F) {
	f.Add(encodePNG(f, chart(8, 6)))
	f.Add(interlacedGray(5, 3, 0))
	f.Add(encodeJPEG(f, chart(8, 6)))
	f.Add(encodeGIF(f, 2, 8, 6))
	f.Add(webpSolid(f, 3, 2))
	f.Add(riff([2]string{"VP8X", vp8x(vp8xAlpha, 3, 2)}, [2]string{"VP8L", string(vp8lSolid(3, 2, color.NRGBA{}))}))
	f.Fuzz(func(t *testing.T, b []byte) {
		const side = 64
		info, err := Check(b, side)
		if err != nil {
			return
		}
		if info.Width <= 0 || info.Height <= 0 || info.Width > side || info.Height > side {
			t.Fatalf("accepted %+v", info)
		}
		if info.Format == PNG {
			if _, err := png.Decode(bytes.NewReader(b)); err != nil {
				t.Fatalf("accepted a PNG image/png refuses: %v", err)
			}
		}
	})
}

// The most work one PNG can ask for: the largest sides allowed, 16-bit
// RGBA, compressed as far as zlib goes (the check inflates it all).
func BenchmarkCheckLargestPNG(b *testing.B) {
	m := image.NewNRGBA64(image.Rect(0, 0, maxSide, maxSide))
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	var buf bytes.Buffer
	if err := enc.Encode(&buf, m); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(buf.Len()), "file-bytes")
	b.SetBytes(int64(maxSide * (1 + maxSide*8)))
	for b.Loop() {
		if _, err := Check(buf.Bytes(), maxSide); err != nil {
			b.Fatal(err)
		}
	}
}
