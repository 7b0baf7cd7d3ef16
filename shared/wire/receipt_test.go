package wire

import (
	"reflect"
	"testing"
)

// A receipt's network section goes through a frame as it was, and an
// empty one lists no connection rather than null.
func TestReceiptNetwork(t *testing.T) {
	for _, nw := range []*Network{
		{Allowed: "127.0.0.1,web.test:8080", Connections: []NetConnection{
			{Host: "web.test", Port: 8080, Address: "127.0.0.1", Kind: "http", Sent: 10, Received: 20, Millis: 3, Allowed: true},
			{Host: "evil.test", Port: 443, Kind: "tls", Why: "evil.test:443 is not on the list"},
		}, NotListed: 2, Refused: 1, SentBytes: 10, ReceivedBytes: 20, Faults: 1},
		{Allowed: "web.test", Connections: []NetConnection{}},
		nil,
	} {
		in := &Message{Type: TypeReceipt, ID: 3, Result: &Result{Receipt: Receipt{RunID: "r1", Status: StatusOK,
			Cleanup: Cleanup{Status: CleanupRemoved}, Network: nw}}}
		p, err := Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Decode(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !reflect.DeepEqual(out.Result.Receipt.Network, nw) {
			t.Errorf("network %+v came back as %+v", nw, out.Result.Receipt.Network)
		}
	}
}
