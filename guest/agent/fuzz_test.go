package agent

import (
	"bytes"
	"context"
	"io"
	"testing"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// quickRunner finishes every run at once.
type quickRunner struct{}

func (quickRunner) Run(ctx context.Context, r *wire.Run, _ func(*wire.OutputChunk) error) *wire.Result {
	return &wire.Result{Receipt: wire.Receipt{RunID: r.RunID, Status: wire.StatusOK}}
}
func (quickRunner) Healthy() error { return nil }

func (quickRunner) Progress() *wire.RunProgress { return nil }

func (quickRunner) Abort(string) wire.Cleanup { return wire.Cleanup{Status: wire.CleanupUnknown} }

func (quickRunner) Warm() []wire.WarmBox { return nil }

func (quickRunner) Close() {}

// stream is a connection whose host sends fixed bytes and reads nothing.
type stream struct{ io.Reader }

func (stream) Write(p []byte) (int, error) { return len(p), nil }
func (stream) Close() error                { return nil }

func frames(msgs ...string) []byte {
	var b bytes.Buffer
	for _, m := range msgs {
		frame.Write(&b, []byte(m))
	}
	return b.Bytes()
}

// Whatever the host sends, serving it ends without a panic.
func FuzzServe(f *testing.F) {
	f.Add(frames(`{"type":"hello","id":1,"hello":{"protocol":1}}`, `{"type":"ping","id":2}`))
	f.Add(frames(`{"type":"hello","id":1,"hello":{"protocol":1}}`,
		`{"type":"run","id":2,"run":{"run_id":"a","code":"1","image":"stdlib","timeout_s":1,"max_output_bytes":10,"return_files":false}}`,
		`{"type":"cancel","id":3,"cancel":{"run_id":"a"}}`, `{"type":"shutdown","id":4}`))
	f.Add([]byte{0, 0, 0, 3, '{', '}', '['})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		a := New(Config{Images: testImages, Runner: quickRunner{}})
		a.Serve(stream{bytes.NewReader(in)})
	})
}
