package picture

import (
	"bytes"
	"errors"
	"fmt"
)

// Format is one of the image formats a client is given as image content.
type Format struct {
	Name string // PNG, JPEG, GIF, WebP
	MIME string // the content's mimeType
	// magic reports whether b starts like this format.
	magic func(b []byte) bool
	// check checks b's structure and returns its dimensions.
	check func(b []byte, maxSide int) (width, height int, err error)
}

// Formats, in the order Sniff tries them.
var (
	PNG  = &Format{Name: "PNG", MIME: "image/png", magic: isPNG, check: checkPNG}
	JPEG = &Format{Name: "JPEG", MIME: "image/jpeg", magic: isJPEG, check: checkJPEG}
	GIF  = &Format{Name: "GIF", MIME: "image/gif", magic: isGIF, check: checkGIF}
	WebP = &Format{Name: "WebP", MIME: "image/webp", magic: isWebP, check: checkWebP}

	formats = []*Format{PNG, JPEG, GIF, WebP}
)

// ErrNotPicture is the error for bytes that start like none of the formats.
var ErrNotPicture = errors.New("picture: not a PNG, JPEG, GIF or WebP image")

// Info is what Check found.
type Info struct {
	Format        *Format
	Width, Height int
}

// Sniff returns the format b starts like, or nil.
func Sniff(b []byte) *Format {
	for _, f := range formats {
		if f.magic(b) {
			return f
		}
	}
	return nil
}

// Check reports whether b is a well-formed image of one of the formats,
// with both sides more than 0 and at most maxSide pixels. It returns
// [ErrNotPicture] for bytes of no known format; any other error says, in
// words for the person or model reading it, what is wrong.
func Check(b []byte, maxSide int) (Info, error) {
	f := Sniff(b)
	if f == nil {
		return Info{}, ErrNotPicture
	}
	w, h, err := f.check(b, maxSide)
	if err != nil {
		return Info{Format: f}, fmt.Errorf("%s: %w", f.Name, err)
	}
	return Info{Format: f, Width: w, Height: h}, nil
}

// sides checks dimensions against the bound. It comes before any work
// whose cost grows with them.
func sides(w, h, maxSide int) error {
	switch {
	case w <= 0 || h <= 0:
		return fmt.Errorf("%dx%d px: a side of 0", w, h)
	case w > maxSide || h > maxSide:
		return fmt.Errorf("%dx%d px: over %d px on the long side", w, h, maxSide)
	}
	return nil
}

var errCut = errors.New("the file is cut short")

func isPNG(b []byte) bool  { return bytes.HasPrefix(b, []byte(pngSignature)) }
func isJPEG(b []byte) bool { return bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}) }
func isGIF(b []byte) bool {
	return bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a"))
}
func isWebP(b []byte) bool {
	return len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP"
}
