package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"pybox/shared/wire"
)

// chartPNG is a w×h PNG; with noise, every pixel random (so it does not
// compress: about 3·w·h bytes).
func chartPNG(t testing.TB, w, h int, noise bool) []byte {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	for y := range h {
		for x := range w {
			c := color.RGBA{uint8(x), uint8(y), 200, 255}
			if noise {
				c = color.RGBA{uint8(r.Uint32()), uint8(r.Uint32()), uint8(r.Uint32()), 255}
			}
			m.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func photoJPEG(t testing.TB) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, 30, 20)), nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func smallGIF(t testing.TB) []byte {
	var b bytes.Buffer
	if err := gif.Encode(&b, image.NewGray(image.Rect(0, 0, 8, 8)), nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// delivered finds the delivery line that names a file.
func delivered(d *decoded, name string) string {
	for _, w := range d.doc.Delivery.What {
		if strings.HasPrefix(w, name+" ") {
			return w
		}
	}
	return ""
}

// sameFiles checks that the files list is what it is without pictures:
// every file with its content, as text or base64.
func sameFiles(t *testing.T, d *decoded, files []wire.OutputFile) {
	t.Helper()
	if d.doc.Files == nil || len(*d.doc.Files) != len(files) {
		t.Fatalf("files: %+v", d.doc.Files)
	}
	for i, f := range *d.doc.Files {
		enc, content := contentOf(files[i].Content)
		if f.Name != files[i].Name || f.Omitted || f.Content == nil || *f.Content != *content || f.Encoding != enc || f.SHA256 != sum(files[i].Content) {
			t.Errorf("file %d: %+v", i, f)
		}
	}
}

func TestShapePictures(t *testing.T) {
	chart, photo, anim := chartPNG(t, 64, 48, false), photoJPEG(t), smallGIF(t)
	files := []wire.OutputFile{
		{Name: "a.csv", Content: []byte("x,y\n1,2\n")},
		{Name: "chart.png", Content: chart},
		{Name: "cut.png", Content: chart[:len(chart)/2]},
		{Name: "fake.png", Content: []byte("this is text in a file named .png\n")},
		{Name: "photo.jpg", Content: photo},
		{Name: "plot", Content: anim}, // the name says nothing: the bytes do
		{Name: "wide.png", Content: chartPNG(t, 3000, 10, false)},
	}
	rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
	d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec, Files: files}), ReturnFiles: true}))
	sameFiles(t, d, files)
	want := []imageBlock{{"image", chart, "image/png"}, {"image", photo, "image/jpeg"}, {"image", anim, "image/gif"}}
	if len(d.images) != len(want) {
		t.Fatalf("%d images; delivery %q", len(d.images), d.doc.Delivery.What)
	}
	for i, im := range d.images {
		if !bytes.Equal(im.Data, want[i].Data) || im.MIMEType != want[i].MIMEType {
			t.Errorf("image %d: %s of %d bytes; want %s of %d", i, im.MIMEType, len(im.Data), want[i].MIMEType, len(want[i].Data))
		}
	}
	for name, why := range map[string]string{
		"cut.png":  "cut.png is not shown as an image (PNG: chunk",
		"wide.png": "wide.png is not shown as an image (PNG: 3000x10 px: over 2000 px on the long side); it is returned as a file",
	} {
		if got := delivered(d, name); !strings.HasPrefix(got, why) {
			t.Errorf("delivery on %s: %q; want %q", name, got, why)
		}
	}
	if len(d.doc.Delivery.What) != 2 || !d.doc.Delivery.Trimmed {
		t.Errorf("delivery %+v: want a line for each of the two pictures not shown, none for fake.png", d.doc.Delivery)
	}
	t.Logf("delivery: %q", d.doc.Delivery.What)

	// Without return_files: no files, no images.
	d = checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec, Files: files})}))
	if d.doc.Files != nil || len(d.images) != 0 || d.doc.Delivery.Trimmed {
		t.Fatalf("return_files false: files %v, %d images, delivery %+v", d.doc.Files, len(d.images), d.doc.Delivery)
	}
}

// Three charts whose content fits the 48 KiB cap, and a receipt that
// fills most of the response: all three stay whole in files, but their
// image blocks would pass 256 KiB, so fewer are shown and delivery says
// which are not, and why.
func TestShapePicturesTrimmed(t *testing.T) {
	var files []wire.OutputFile
	for i := range 3 {
		files = append(files, wire.OutputFile{Name: fmt.Sprintf("chart%d.png", i), Content: chartPNG(t, 72, 72+i, true)})
	}
	rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
	rec.Capture.Stdout = strings.Repeat("\x01", wire.MaxOutputBytes) // escaped to six bytes, and seven in the text
	d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec, Files: files}), ReturnFiles: true}))
	sameFiles(t, d, files)
	if len(d.exec.Capture.Stdout) != wire.MaxOutputBytes {
		t.Fatalf("stdout was cut to %d bytes: the pictures must not cost the receipt", len(d.exec.Capture.Stdout))
	}
	if len(d.images) == 0 || len(d.images) == 3 {
		t.Fatalf("%d of 3 images shown; the test wants a result where some but not all fit (response %d bytes)", len(d.images), d.line)
	}
	shown := 0
	for i, f := range files {
		switch line := delivered(d, f.Name); {
		case line == "":
			if !bytes.Equal(d.images[shown].Data, f.Content) {
				t.Errorf("image %d is not %s", shown, f.Name)
			}
			shown++
		case line != f.Name+" is not shown as an image (to fit the 256 KiB response limit); it is returned as a file":
			t.Errorf("chart %d: %q", i, line)
		}
	}
	if shown != len(d.images) {
		t.Errorf("%d images, %d files not named in delivery", len(d.images), shown)
	}
	t.Logf("response %d bytes, %d of 3 images; %q", d.line, len(d.images), d.doc.Delivery.What)
}

// Many pictures, many that fail the check with names that escape six
// times over, in a result already near its limits: the limits hold, at
// most maxPictures are shown, and delivery's lines stay few.
func TestShapePicturesBounded(t *testing.T) {
	tiny := chartPNG(t, 2, 2, false)
	var files []wire.OutputFile
	for i := range 40 {
		name := fmt.Sprintf("%02d.png", i)
		content := tiny
		if i%2 == 1 {
			name, content = strings.Repeat("<", 190)+name, tiny[:len(tiny)-1]
		}
		files = append(files, wire.OutputFile{Name: name, Content: content})
	}
	for _, fill := range []bool{false, true} {
		rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
		if fill {
			rec.Capture.Stdout = strings.Repeat("\x01", wire.MaxOutputBytes)
			rec.Capture.Stderr = strings.Repeat("<", wire.MaxOutputBytes)
			for i := range 6 {
				files = append(files, wire.OutputFile{Name: fmt.Sprintf("z%d", i), Content: bytes.Repeat([]byte{1}, 7<<10)})
			}
		}
		d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec, Files: files}), ReturnFiles: true}))
		if len(d.images) > maxPictures || len(d.doc.Delivery.What) > 16 {
			t.Fatalf("%d images, %d delivery lines", len(d.images), len(d.doc.Delivery.What))
		}
		if !fill && (len(d.images) != maxPictures || !strings.Contains(strings.Join(d.doc.Delivery.What, "\n"), "more files are not shown as images")) {
			t.Errorf("%d images; delivery %q", len(d.images), d.doc.Delivery.What)
		}
		t.Logf("fill %v: response %d bytes, %d images, delivery %q", fill, d.line, len(d.images), d.doc.Delivery.What)
	}
}

// Pictures in a result whose trimming left little room: the lines on
// the pictures not shown do not fit one by one (names that escape six
// times over), so one line counts them, and the result still fits.
func TestShapePicturesNotesFallBack(t *testing.T) {
	tiny := chartPNG(t, 2, 2, false)
	var files []wire.OutputFile
	for i := range 12 {
		files = append(files, wire.OutputFile{Name: strings.Repeat("<", 190) + fmt.Sprintf("%02d.png", i), Content: tiny[:len(tiny)-1]})
	}
	files = append(files, wire.OutputFile{Name: "ok.png", Content: tiny})
	// Many small files: trimming drops content to within a few hundred
	// bytes of what it aims for.
	for i := range 160 {
		files = append(files, wire.OutputFile{Name: fmt.Sprintf("z%03d", i), Content: bytes.Repeat([]byte{1}, 200)})
	}
	rec := receipt("r", wire.StatusOK, wire.CleanupRemoved)
	rec.Capture.Stdout = strings.Repeat("\x01", wire.MaxOutputBytes)
	rec.Capture.Stderr = strings.Repeat("<", wire.MaxOutputBytes)
	d := checkResult(t, shape(outcome{RunID: "r", Result: taken(&wire.Result{Receipt: rec, Files: files}), ReturnFiles: true}))
	what := d.doc.Delivery.What
	if last := what[len(what)-1]; last != "12 files that look like images are not shown as images; they are returned as files" {
		t.Fatalf("delivery %q", what)
	}
	t.Logf("response %d bytes, %d images; %q", d.line, len(d.images), what)
}

// Through the SDK: the Go client reads the image blocks back as the
// file's bytes.
func TestCallReturnsPictures(t *testing.T) {
	vm := newFakeVM()
	chart := chartPNG(t, 20, 10, false)
	vm.result = func(r *wire.Run) (*wire.Result, error) {
		res := &wire.Result{Receipt: receipt(r.RunID, wire.StatusOK, wire.CleanupRemoved)}
		for _, f := range r.Files {
			res.Files = append(res.Files, wire.OutputFile(f))
		}
		return res, nil
	}
	cs := startSession(t, DefaultOptions(), vm, testLimits()).client("")
	args := func(returnFiles bool) map[string]any {
		return map[string]any{"code": "x", "return_files": returnFiles, "files": []any{
			map[string]any{"name": "chart.png", "content": base64.StdEncoding.EncodeToString(chart), "encoding": "base64"},
			map[string]any{"name": "notes.png", "content": "not a picture"},
		}}
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: ToolName, Arguments: args(true)})
	if err != nil {
		t.Fatal(err)
	}
	d := fromClient(t, res)
	if len(res.Content) != 2 || len(*d.doc.Files) != 2 || d.doc.Delivery.Trimmed {
		t.Fatalf("%d contents, delivery %+v", len(res.Content), d.doc.Delivery)
	}
	if im := res.Content[1].(*sdk.ImageContent); !bytes.Equal(im.Data, chart) || im.MIMEType != "image/png" {
		t.Fatalf("the image block: %s of %d bytes", im.MIMEType, len(im.Data))
	}
	if res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: ToolName, Arguments: args(false)}); err != nil || len(res.Content) != 1 {
		t.Fatalf("return_files false: %v, %d contents", err, len(res.Content))
	}
}
