package client_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"pybox/host/client"
	"pybox/shared/wire"
)

// hostile is a receipt whose every string and list the guest controls is
// over its bound.
func hostile(runID string) *wire.Result {
	huge := strings.Repeat("\x01\"\\<", 16<<10)
	r := wire.Receipt{RunID: runID, Status: wire.StatusOK, Reason: huge, Signal: huge,
		Image:    wire.ImageInfo{Name: huge, Digest: huge, Python: huge, Suite: huge},
		Agent:    wire.AgentInfo{Version: huge, Commit: huge, Kernel: huge},
		Memory:   wire.Memory{Reading: huge},
		Capture:  wire.Capture{Stdout: huge, Stderr: "\x1b]52;c;Zm9v\x07\u202e"},
		Box:      &wire.BoxInfo{Warm: true, Preloaded: make([]string, 100), Fallback: huge},
		Posture:  &wire.Posture{CapEff: huge, OpenFDs: make([]int, 1000), Namespaces: []string{huge}, Problems: make([]string, 65)},
		Overruns: []string{huge},
		Cleanup:  wire.Cleanup{Status: wire.CleanupRemoved, Detail: huge},
		Data:     []wire.DataFolder{{Name: "sales", HostPath: "/"}},
	}
	for i := range 2000 {
		name := fmt.Sprintf("f%d\n\u202e", i)
		r.InputFiles = append(r.InputFiles, wire.FileDigest{Name: name, SHA256: huge[:300]})
		r.Output.Returned = append(r.Output.Returned, wire.FileDigest{Name: name, SHA256: huge[:300]})
		r.Output.Delivered = append(r.Output.Delivered, wire.FileDigest{Name: name})
		r.Output.NotReturned = append(r.Output.NotReturned, wire.NotReturned{Name: strings.Repeat("n", 300), Reason: huge[:300]})
		r.Output.NotDelivered = append(r.Output.NotDelivered, wire.NotReturned{Name: name, Reason: huge[:300]})
	}
	r.Output.NotListed, r.Output.NotDeliveredUnlisted = 5, 7
	res := &wire.Result{Receipt: r}
	for i := range 100 {
		res.Files = append(res.Files, wire.OutputFile{Name: fmt.Sprintf("out%d\x1b", i), Content: []byte("x")})
	}
	return res
}

// NewResult bounds every string and list of the guest's answer to what
// the contract allows, escapes names, counts what it does not list,
// counts the controls of each stream itself, keeps the host's record of
// the data folders, says that it cut, and leaves the guest's answer as
// it was.
func TestNewResultBounds(t *testing.T) {
	guest := hostile("r1")
	facts := &wire.HostFacts{Data: []wire.DataFolder{{Name: "sales", HostPath: "/home/u/sales", Files: 2, LeftOut: make([]string, 20)}}}
	res := client.NewResult(guest, facts)
	if !reflect.DeepEqual(guest, hostile("r1")) {
		t.Error("NewResult changed the guest's answer")
	}
	if !res.Cut() {
		t.Error("Cut() is false for a receipt that was cut")
	}
	r := &res.Receipt
	for name, s := range map[string]string{"reason": r.Reason, "cleanup.detail": r.Cleanup.Detail, "overrun": r.Overruns[0],
		"box.fallback": r.Box.Fallback, "posture.namespaces": r.Posture.Namespaces[0]} {
		if len(s) > 2048+len("…") || !strings.HasSuffix(s, "…") {
			t.Errorf("%s: %d bytes, not cut", name, len(s))
		}
	}
	for name, s := range map[string]string{"signal": r.Signal, "image.name": r.Image.Name, "agent.kernel": r.Agent.Kernel,
		"memory.reading": r.Memory.Reading, "posture.cap_eff": r.Posture.CapEff, "not_returned.reason": r.Output.NotReturned[0].Reason} {
		if len(s) > 128+len("…") {
			t.Errorf("%s: %d bytes, not cut", name, len(s))
		}
	}
	if len(r.Capture.Stdout) > wire.MaxOutputBytes || r.Capture.StderrInfo.Controls != 3 {
		t.Errorf("capture: stdout %d bytes, stderr controls %d (want 3, the host's count)", len(r.Capture.Stdout), r.Capture.StderrInfo.Controls)
	}
	o := r.Output
	switch {
	case len(r.InputFiles) != wire.MaxInputFiles, len(o.Returned) != wire.MaxReturnedFiles, len(o.Delivered) != wire.MaxDeliveredFiles,
		len(res.Files) != wire.MaxReturnedFiles:
		t.Errorf("lists: %d input files, %d returned, %d delivered, %d files", len(r.InputFiles), len(o.Returned), len(o.Delivered), len(res.Files))
	case len(o.NotReturned) != wire.MaxListedNotReturned || o.NotListed != 5+2000-wire.MaxListedNotReturned:
		t.Errorf("not returned: %d listed, %d counted", len(o.NotReturned), o.NotListed)
	case len(o.NotDelivered) != wire.MaxListedNotReturned || o.NotDeliveredUnlisted != 7+2000-wire.MaxListedNotReturned:
		t.Errorf("not delivered: %d listed, %d counted", len(o.NotDelivered), o.NotDeliveredUnlisted)
	case len(r.Posture.OpenFDs) != 64 || len(r.Posture.Problems) != 65 || r.Posture.Problems[64] != "… and 1 more" || len(r.Box.Preloaded) != 65:
		t.Errorf("posture: %d fds, problems %q; preloaded %d", len(r.Posture.OpenFDs), r.Posture.Problems[60:], len(r.Box.Preloaded))
	}
	if n := r.InputFiles[0].Name; n != `f0\u{a}\u{202e}` {
		t.Errorf("a name with controls is shown as %q", n)
	}
	if n := res.Files[0].Name; n != `out0\u{1b}` {
		t.Errorf("a returned file's name is shown as %q", n)
	}
	if n := o.NotReturned[0].Name; len(n) > 200+len("…") {
		t.Errorf("a long name: %d bytes", len(n))
	}
	if d := r.Data; len(d) != 1 || d[0].HostPath != "/home/u/sales" || len(d[0].LeftOut) != 8 {
		t.Errorf("data %+v, want the host's record, bounded", d)
	}
	if d := client.NewResult(guest, nil).Receipt.Data; d != nil {
		t.Errorf("a run that named no folder has data %+v", d)
	}
}

// A receipt within its bounds comes through as it was, and says nothing
// was cut; one with no cleanup status gets UNKNOWN, with why.
func TestNewResultKeeps(t *testing.T) {
	code := 0
	guest := &wire.Result{Receipt: wire.Receipt{RunID: "r1", Status: wire.StatusOK, ExitCode: &code, Reason: "the program exited 0",
		Capture: wire.Capture{Stdout: "hello\n"}, Output: wire.Output{Returned: []wire.FileDigest{{Name: `a\b`, Bytes: 1}}, NotReturned: []wire.NotReturned{}},
		Cleanup: wire.Cleanup{Status: wire.CleanupRemoved}}}
	res := client.NewResult(guest, nil)
	if res.Cut() || !reflect.DeepEqual(res.Result, *guest) {
		t.Errorf("cut %v:\n%+v\nwant\n%+v", res.Cut(), res.Result, *guest)
	}
	guest.Receipt.Cleanup = wire.Cleanup{}
	if c := client.NewResult(guest, nil).Receipt.Cleanup; c.Status != wire.CleanupUnknown || c.Detail == "" {
		t.Errorf("no cleanup status became %+v", c)
	}
}

// A receipt's network section is the host's: the guest's is dropped,
// and the host's is bounded: its hosts (the box's) escaped, reasons
// cut, connections past wire.MaxNetListed counted.
func TestNewResultNetwork(t *testing.T) {
	guest := hostile("r1")
	guest.Receipt.Network = &wire.Network{Allowed: "everything", Connections: []wire.NetConnection{{Host: "example.com", Allowed: true}}}
	res := client.NewResult(guest, nil)
	if res.Receipt.Network != nil {
		t.Fatalf("the guest's network section was kept: %+v", res.Receipt.Network)
	}
	res = client.NewResult(&wire.Result{Receipt: wire.Receipt{RunID: "r1", Status: wire.StatusOK, Cleanup: wire.Cleanup{Status: wire.CleanupRemoved}}}, nil)
	host := &wire.Network{Allowed: "web.test", NotListed: 3, Refused: 1, SentBytes: 10, ReceivedBytes: 20}
	for i := range wire.MaxNetListed + 5 {
		host.Connections = append(host.Connections, wire.NetConnection{Host: fmt.Sprintf("h%d\x1b", i), Kind: "http", Why: strings.Repeat("w", 5000)})
	}
	res.SetNetwork(host)
	nw := res.Receipt.Network
	switch {
	case !res.Cut():
		t.Error("Cut() is false")
	case len(nw.Connections) != wire.MaxNetListed || nw.NotListed != 3+5 || nw.Refused != 1 || nw.SentBytes != 10 || nw.ReceivedBytes != 20:
		t.Errorf("%d listed, %+v", len(nw.Connections), *nw)
	case nw.Connections[0].Host != `h0\u{1b}` || len(nw.Connections[0].Why) > 2048+len("…"):
		t.Errorf("first connection %q, why of %d bytes", nw.Connections[0].Host, len(nw.Connections[0].Why))
	case len(host.Connections) != wire.MaxNetListed+5 || host.Connections[0].Host != "h0\x1b":
		t.Error("the host's record was changed")
	}
}
