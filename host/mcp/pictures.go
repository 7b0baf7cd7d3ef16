package mcp

import (
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/host/client"
	"pybox/host/picture"
)

// Bounds on the pictures a result shows as image content.
const (
	// maxPictureSide: model APIs refuse an image over 8000 px on a side,
	// and over 2000 px once a conversation holds many, and a refused
	// image can leave the agent's conversation unusable. Larger pictures
	// are not shown (nor scaled: what is shown is the file's own bytes).
	maxPictureSide = 2000
	// maxPictures bounds the image blocks of one result, and with them
	// the work of fitting them in: the first ones in the files' order are
	// tried.
	maxPictures = 16
	// maxPictureNotes bounds delivery's lines about pictures not shown;
	// a last line counts the rest.
	maxPictureNotes = 8
	// pictureNameBytes bounds a file's name in those lines.
	pictureNameBytes = 64
)

const notShownToFit = "to fit the 256 KiB response limit"

// shownPicture is a returned file that is a picture, or starts like one.
type shownPicture struct {
	name  string
	image *sdk.ImageContent // nil when it failed the check
	shown bool
	why   string // why it is not shown
}

// showPictures adds an image block after the text for each returned file
// whose content is in the result and that is a well-formed picture
// (decided from its bytes, never its name), in the files' order, as many
// as fit the response limit: one that does not fit is left out and the
// ones after it are still tried. Trimming has settled the document; the
// pictures change only delivery, whose lines say which files that look
// like pictures are not shown, and why. When those lines do not fit, one
// short line counts them; when even that does not fit, no picture is
// shown or mentioned.
//
// Each step is measured as a whole result, so what is kept at the end is
// a state that was measured to fit.
func (t *trimmer) showPictures() {
	pics := t.pictures()
	if len(pics) == 0 {
		return
	}
	base := t.doc.Delivery
	apply := func(detailed bool) bool {
		t.doc.Delivery = base
		t.doc.Delivery.What = append([]string(nil), base.What...) // notes go to a copy
		t.doc.images = nil
		for _, p := range pics {
			if p.shown {
				t.doc.images = append(t.doc.images, p.image)
			}
		}
		t.notePictures(pics, detailed)
		return t.fits()
	}
	detailed := apply(true)
	if !detailed && !apply(false) {
		t.doc.Delivery, t.doc.images = base, nil
		return
	}
	for i := range pics {
		if pics[i].image == nil {
			continue
		}
		pics[i].shown = true
		if !apply(detailed) {
			pics[i].shown = false
		}
	}
	apply(detailed)
}

// pictures lists the returned files with content that start like a
// picture, checked: those that fail the check, or come after the first
// maxPictures, say why already; the rest are not shown until they are
// found to fit.
func (t *trimmer) pictures() []shownPicture {
	var pics []shownPicture
	tried := 0
	for i, f := range t.files {
		if f.Content == nil || i >= len(t.raw) {
			continue
		}
		info, err := picture.Check(t.raw[i], maxPictureSide)
		p := shownPicture{name: f.Name}
		switch {
		case errors.Is(err, picture.ErrNotPicture):
			continue
		case err != nil:
			p.why = err.Error()
		case tried == maxPictures:
			p.why = fmt.Sprintf("at most %d images are shown in one result", maxPictures)
		default:
			tried++
			p.image = &sdk.ImageContent{Data: t.raw[i], MIMEType: info.Format.MIME}
			p.why = notShownToFit
		}
		pics = append(pics, p)
	}
	return pics
}

// notePictures says in delivery which pictures are not shown, and why:
// one line each (at most maxPictureNotes and a count of the rest), or,
// not detailed, one line that counts them.
func (t *trimmer) notePictures(pics []shownPicture, detailed bool) {
	var left []shownPicture
	for _, p := range pics {
		if !p.shown {
			left = append(left, p)
		}
	}
	switch {
	case len(left) == 0:
	case !detailed:
		t.note("%d files that look like images are not shown as images; they are returned as files", len(left))
	default:
		for i, p := range left {
			if i == maxPictureNotes {
				t.note("%d more files are not shown as images; they are returned as files", len(left)-i)
				break
			}
			t.note("%s is not shown as an image (%s); it is returned as a file", client.Cut(p.name, pictureNameBytes), p.why)
		}
	}
}
