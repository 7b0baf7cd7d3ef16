package agent

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// quickRunner finishes every run at once; a run that opens the network
// has first made a connection, which it closed.
type quickRunner struct{}

func (quickRunner) Run(ctx context.Context, r *wire.Run, _ func(*wire.OutputChunk) error, conns func(net.Conn) bool) *wire.Result {
	if conns != nil {
		boxEnd, prog := net.Pipe()
		if !conns(boxEnd) {
			boxEnd.Close()
		}
		prog.Close()
	}
	return &wire.Result{Receipt: wire.Receipt{RunID: r.RunID, Status: wire.StatusOK}}
}
func (quickRunner) Admit(*wire.Run) error { return nil }

func (quickRunner) Cancel(string) {}

func (quickRunner) Runs() []wire.RunProgress { return nil }

func (quickRunner) Room() *wire.Room { return nil }

func (quickRunner) SetAside() []string { return nil }

func (quickRunner) Abort(string) wire.Cleanup { return *wire.Unknown("the quick runner keeps no box") }

func (quickRunner) Warm() []wire.WarmBox { return nil }

func (quickRunner) Close() {}

// stream is a connection whose host sends fixed bytes and reads nothing.
type stream struct{ io.Reader }

func (stream) Write(p []byte) (int, error) { return len(p), nil }
func (stream) Close() error                { return nil }

func frames(msgs ...*wire.Message) []byte {
	var b bytes.Buffer
	for _, m := range msgs {
		p, err := wire.Encode(m)
		if err != nil {
			panic(err)
		}
		frame.Write(&b, p)
	}
	return b.Bytes()
}

// Whatever the host sends, serving it ends without a panic.
func FuzzServe(f *testing.F) {
	hello := &wire.Message{Type: wire.TypeHello, ID: 1, Hello: &wire.Hello{Protocol: wire.ProtocolVersion}}
	f.Add(frames(hello, &wire.Message{Type: wire.TypePing, ID: 2}))
	f.Add(frames(hello,
		&wire.Message{Type: wire.TypeRun, ID: 2, Run: &wire.Run{RunID: "a", Code: "1", Image: "stdlib", TimeoutSeconds: 1, MaxOutputBytes: 10}},
		&wire.Message{Type: wire.TypeCancel, ID: 3, Cancel: &wire.Cancel{RunID: "a"}}, &wire.Message{Type: wire.TypeShutdown, ID: 4}))
	f.Add(frames(hello,
		&wire.Message{Type: wire.TypeRun, ID: 2, Run: &wire.Run{RunID: "n", Code: "1", Image: "stdlib", TimeoutSeconds: 1, MaxOutputBytes: 10, Net: true}},
		&wire.Message{Type: wire.TypeNetData, ID: 2, Net: &wire.NetFrame{Stream: 1, Data: []byte("GET")}},
		&wire.Message{Type: wire.TypeNetWindow, ID: 2, Net: &wire.NetFrame{Stream: 1, Window: 10}},
		&wire.Message{Type: wire.TypeNetClose, ID: 2, Net: &wire.NetFrame{Stream: 1}},
		&wire.Message{Type: wire.TypeNetOpen, ID: 2, Net: &wire.NetFrame{Stream: 2}},
		&wire.Message{Type: wire.TypeNetClose, ID: 2, Net: &wire.NetFrame{Stream: 9, Abort: true}}))
	old := []byte(`{"type":"hello","id":1,"hello":{"protocol":2}}`)
	f.Add(append([]byte{0, 0, 0, byte(len(old))}, old...))
	f.Add([]byte{0, 0, 0, 3, '{', '}', '['})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		a := New(Config{Images: testImages, Runner: quickRunner{}})
		a.Serve(stream{bytes.NewReader(in)})
	})
}
