package wire

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func netPayload(typ string, id uint64, body ...byte) []byte { return EncodeRaw(typ, id, body) }

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// Each kind of a stream's frame comes back as it went, and the relay's
// PeekNet reads the same stream and length without copying.
func TestNetRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte{0xab}, MaxNetChunk)
	for _, m := range []*Message{
		{Type: TypeNetOpen, ID: 7, Net: &NetFrame{Stream: 1}},
		{Type: TypeNetData, ID: 7, Net: &NetFrame{Stream: 1, Data: []byte("GET / HTTP/1.1\r\n")}},
		{Type: TypeNetData, ID: 7, Net: &NetFrame{Stream: 0xffffffff, Data: big}},
		{Type: TypeNetWindow, ID: 7, Net: &NetFrame{Stream: 2, Window: NetWindow}},
		{Type: TypeNetClose, ID: 7, Net: &NetFrame{Stream: 2}},
		{Type: TypeNetClose, ID: 7, Net: &NetFrame{Stream: 3, Abort: true}},
	} {
		p, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode %s: %v", m.Type, err)
		}
		back, err := Decode(p)
		if err != nil {
			t.Fatalf("Decode %s: %v", m.Type, err)
		}
		if back.Type != m.Type || back.ID != m.ID || back.Net.Stream != m.Net.Stream || !bytes.Equal(back.Net.Data, m.Net.Data) ||
			back.Net.Window != m.Net.Window || back.Net.Abort != m.Net.Abort {
			t.Errorf("%s came back as %+v %+v", m.Type, back, back.Net)
		}
		typ, id, stream, n, err := PeekNet(p)
		if err != nil || typ != m.Type || id != 7 || stream != m.Net.Stream || n != len(m.Net.Data) {
			t.Errorf("PeekNet(%s) = %s %d %d %d %v", m.Type, typ, id, stream, n, err)
		}
	}
	if _, _, _, _, err := PeekNet(payload(TypePing, 1, "")); err == nil {
		t.Error("PeekNet read a ping as a stream's frame")
	}
}

// A stream's frame that breaks a rule is refused whole, by Encode and by
// Decode: the guest is not trusted.
func TestNetRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		m    *Message
		want string
	}{
		{"stream 0", &Message{Type: TypeNetOpen, ID: 1, Net: &NetFrame{}}, "stream 0"},
		{"no body", &Message{Type: TypeNetOpen, ID: 1}, "without its body"},
		{"empty data", &Message{Type: TypeNetData, ID: 1, Net: &NetFrame{Stream: 1}}, "net_data of 0 bytes"},
		{"too much data", &Message{Type: TypeNetData, ID: 1, Net: &NetFrame{Stream: 1, Data: make([]byte, MaxNetChunk+1)}}, "1 to 16384"},
		{"no window", &Message{Type: TypeNetWindow, ID: 1, Net: &NetFrame{Stream: 1}}, "net_window of 0"},
		{"too wide a window", &Message{Type: TypeNetWindow, ID: 1, Net: &NetFrame{Stream: 1, Window: NetWindow + 1}}, "1 to 65536"},
		{"data on an open", &Message{Type: TypeNetOpen, ID: 1, Net: &NetFrame{Stream: 1, Data: []byte("x")}}, "another kind's fields"},
		{"abort on data", &Message{Type: TypeNetData, ID: 1, Net: &NetFrame{Stream: 1, Data: []byte("x"), Abort: true}}, "another kind's fields"},
	} {
		if _, err := Encode(c.m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Encode, %s: %v, want %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name string
		p    []byte
		want string
	}{
		{"open, short", netPayload(TypeNetOpen, 1, 0, 0, 1), "not 4"},
		{"open, long", netPayload(TypeNetOpen, 1, append(be32(1), 0)...), "not 4"},
		{"open, stream 0", netPayload(TypeNetOpen, 1, be32(0)...), "stream 0"},
		{"data, none", netPayload(TypeNetData, 1, be32(1)...), "5 to"},
		{"data, too much", netPayload(TypeNetData, 1, append(be32(1), make([]byte, MaxNetChunk+1)...)...), "5 to"},
		{"window, short", netPayload(TypeNetWindow, 1, append(be32(1), 0, 0, 1)...), "not 8"},
		{"window, zero", netPayload(TypeNetWindow, 1, append(be32(1), be32(0)...)...), "net_window of 0"},
		{"window, too wide", netPayload(TypeNetWindow, 1, append(be32(1), be32(NetWindow+1)...)...), "1 to 65536"},
		{"close, how 2", netPayload(TypeNetClose, 1, append(be32(1), 2)...), "how 2"},
		{"close, no how", netPayload(TypeNetClose, 1, be32(1)...), "not 5"},
	} {
		if m, err := Decode(c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode, %s: %+v %v, want %q", c.name, m, err, c.want)
		}
		if _, _, _, _, err := PeekNet(c.p); err == nil {
			t.Errorf("PeekNet, %s: accepted", c.name)
		}
	}
}

// A decoded frame's data is its own: the buffer it was read from may be
// reused at once.
func TestNetDataIsACopy(t *testing.T) {
	p := netPayload(TypeNetData, 1, append(be32(5), "abc"...)...)
	m, err := Decode(p)
	if err != nil {
		t.Fatal(err)
	}
	copy(p[headerSize+4:], "xyz")
	if string(m.Net.Data) != "abc" {
		t.Errorf("the data changed with the buffer: %q", m.Net.Data)
	}
}

// FuzzPeekNet: PeekNet and Decode agree on every input: both accept a
// stream's frame or both refuse it, with the same stream and length.
func FuzzPeekNet(f *testing.F) {
	f.Add(netPayload(TypeNetOpen, 1, be32(1)...))
	f.Add(netPayload(TypeNetData, 2, append(be32(3), "data"...)...))
	f.Add(netPayload(TypeNetWindow, 3, append(be32(3), be32(4096)...)...))
	f.Add(netPayload(TypeNetClose, 4, append(be32(9), 1)...))
	f.Fuzz(func(t *testing.T, p []byte) {
		typ, id, stream, n, perr := PeekNet(p)
		m, derr := Decode(p)
		if perr == nil {
			if derr != nil {
				t.Fatalf("PeekNet accepted what Decode refuses: %v", derr)
			}
			if m.Type != typ || m.ID != id || m.Net.Stream != stream || len(m.Net.Data) != n {
				t.Fatalf("PeekNet %s %d %d %d, Decode %+v %+v", typ, id, stream, n, m, m.Net)
			}
		} else if derr == nil && m.Net != nil {
			t.Fatalf("Decode accepted a stream's frame PeekNet refuses: %v", perr)
		}
	})
}
