package supervisor

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"pybox/shared/frame"
	"pybox/shared/wire"
)

// runFrames are seeds: run frames as a client sends them, and broken ones.
func runFrames(f *testing.F) {
	long := testRun("r-long")
	long.TimeoutSeconds, long.Deliver = 1e300, &wire.Deliver{MaxBytes: -1}
	nan := testRun("r-nan")
	nan.TimeoutSeconds = math.NaN()
	data := testRun("r-data")
	data.Data = []wire.DataFolder{{Name: "sales"}, {Name: "../etc"}}
	for _, r := range []*wire.Run{testRun("r1"), long, nan, data} {
		p, err := wire.Encode(&wire.Message{Type: wire.TypeRun, ID: 1, Run: r})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p)
		f.Add(p[:len(p)/2])
	}
	f.Add(wire.EncodeRaw(wire.TypeRun, 1, []byte{2}))
	f.Add(wire.EncodeRaw(wire.TypePing, 1, nil))
	// Stream frames: for no run, so dropped; malformed; one a client may
	// not send.
	f.Add(wire.EncodeRaw(wire.TypeNetData, 1, []byte{0, 0, 0, 1, 'x'}))
	f.Add(wire.EncodeRaw(wire.TypeNetWindow, 1, []byte{0, 0, 0, 1, 0, 0, 0, 1}))
	f.Add(wire.EncodeRaw(wire.TypeNetClose, 1, []byte{0, 0, 0, 1, 2}))
	f.Add(wire.EncodeRaw(wire.TypeNetOpen, 1, []byte{0, 0, 0, 1}))
}

// FuzzRunExpiry: whatever a run frame's header says, the relay's wait
// for its receipt is at least that of a run of no time and at most that
// of the longest run the product allows, with delivery.
func FuzzRunExpiry(f *testing.F) {
	runFrames(f)
	least := (&wire.Run{}).HostDeadline()
	most := (&wire.Run{TimeoutSeconds: wire.MaxTimeoutSeconds, Deliver: &wire.Deliver{}}).HostDeadline()
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := wire.PeekRun(p)
		if err != nil {
			return
		}
		if d := runExpiry(&h); d < least || d > most {
			t.Fatalf("a timeout of %v gave an expiry of %v", h.TimeoutSeconds, d)
		}
		if pd := newPending(nil, wire.TypeRun, 1, &h); pd.runID != h.RunID || pd.deliver != (h.Deliver != nil) {
			t.Fatalf("pending %+v of %+v", pd, h)
		}
	})
}

// FuzzClientFrame: whatever frame a client sends after its hello, the
// relay answers it or passes it to the guest, without panicking, and what
// it passes on is the frame as it came but for its ID. The one frame it
// does neither with is a well-formed stream frame, here for no run: that
// is dropped, and counted.
func FuzzClientFrame(f *testing.F) {
	runFrames(f)
	f.Fuzz(func(t *testing.T, p []byte) {
		if len(p) > 1<<16 {
			return
		}
		h := newHarness(t)
		c := h.connect()
		h.hello(c)
		toGuest, toClient := make(chan []byte, 1), make(chan []byte, 1)
		go readInto(h.guest, toGuest)
		go readInto(c, toClient)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		// As it is, empty too: frame.Write would refuse to send that.
		if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...)); err != nil {
			t.Fatal(err)
		}
		if typ, _, _, _, err := wire.PeekNet(p); err == nil && typ != wire.TypeNetOpen {
			waitFor(t, func() bool {
				h.relay.mu.Lock()
				defer h.relay.mu.Unlock()
				return h.relay.netDropped == 1
			})
			return
		}
		select {
		case g := <-toGuest:
			if len(g) != len(p) || !bytes.Equal(g[:1], p[:1]) || !bytes.Equal(g[9:], p[9:]) {
				t.Fatalf("the guest got %q for %q", g, p)
			}
		case <-toClient:
		case <-time.After(5 * time.Second):
			t.Fatalf("%q was neither answered nor passed on", p)
		}
	})
}

// readInto reads one frame from r into ch (nil when none came).
func readInto(r interface{ Read([]byte) (int, error) }, ch chan<- []byte) {
	p, _ := frame.Read(r)
	ch <- p
}
