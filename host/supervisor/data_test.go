package supervisor

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"pybox/host/vm"
	"pybox/shared/wire"
)

// salesRecord is what the host knows of data folder sales in these tests.
var salesRecord = []wire.DataFolder{{Name: "sales", HostPath: "/home/u/sales", Files: 2, Bytes: 11,
	Digest: "d1", LeftOut: []string{"1 symbolic link"}}}

// dataHarness is a harness whose relay readies data folder runs with
// salesRecord.
func dataHarness(t *testing.T) (*harness, net.Conn) {
	h := newHarness(t)
	h.relay.SetPrepare(func(*wire.RunHeader) ([]wire.DataFolder, *wire.Error) { return salesRecord, nil })
	c := h.connect()
	h.hello(c)
	return h, c
}

// The guest is told the names of a run's data folders, nothing of the
// host's: a run frame's header has room for their names only.
func TestGuestToldDataNamesOnly(t *testing.T) {
	h, c := dataHarness(t)
	run := testRun("r1")
	run.Data = []wire.DataFolder{{Name: "sales", HostPath: "/etc", Bytes: 1}}
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 9, Run: run})
	if g := recv(t, h.guest); g.Type != wire.TypeRun || !reflect.DeepEqual(g.Run.Data, []wire.DataFolder{{Name: "sales"}}) {
		t.Fatalf("the guest got %+v", g.Run)
	}
}

// The host's own record of a run's data folders goes to the client just
// before the guest's receipt, which passes as the guest sent it (the
// client puts the record into the receipt, whatever the guest claims).
func TestHostFactsBeforeTheReceipt(t *testing.T) {
	h, c := dataHarness(t)
	run := testRun("r1")
	run.Data = []wire.DataFolder{{Name: "sales"}}
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 9, Run: run})
	g := recv(t, h.guest)
	if want := []wire.DataFolder{{Name: "sales"}}; !reflect.DeepEqual(g.Run.Data, want) {
		t.Fatalf("the guest was told %+v, want %+v", g.Run.Data, want)
	}
	rc := receipt("r1", wire.StatusOK)
	claim := []wire.DataFolder{{Name: "sales", HostPath: "/", Files: 1e6}}
	rc.ID, rc.Result.Receipt.Data = g.ID, claim
	send(t, h.guest, rc)
	if m := recv(t, c); m.Type != wire.TypeFacts || m.ID != 9 || !reflect.DeepEqual(m.Facts.Data, salesRecord) {
		t.Fatalf("the client got %+v, want the host's facts %+v", m, salesRecord)
	}
	if m := recv(t, c); m.Type != wire.TypeReceipt || m.ID != 9 || !reflect.DeepEqual(m.Result.Receipt.Data, claim) {
		t.Fatalf("the client got %+v, want the receipt as the guest sent it", m)
	}
}

// A run that named no data folder gets no facts: its receipt comes alone.
func TestNoFactsForRunWithout(t *testing.T) {
	h, c := dataHarness(t)
	send(t, c, &wire.Message{Type: wire.TypeRun, ID: 9, Run: testRun("r1")})
	g := recv(t, h.guest)
	rc := receipt("r1", wire.StatusOK)
	rc.ID = g.ID
	send(t, h.guest, rc)
	if m := recv(t, c); m.Type != wire.TypeReceipt {
		t.Fatalf("the client got %s, want the receipt", m.Type)
	}
}

// prepareRun walks the folder and returns what the host found in it,
// leaving the run as the client sent it.
func TestPrepareRunRecord(t *testing.T) {
	folder := t.TempDir()
	os.WriteFile(filepath.Join(folder, "a.csv"), []byte("1,2\n"), 0o644)
	os.WriteFile(filepath.Join(folder, "b.csv"), []byte("3,4,5\n"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(folder, "link"))
	os.Chmod(folder, 0o755)
	s := &supervisor{logf: t.Logf}
	s.cfg.VM.Data = []vm.DataShare{{Name: "sales", Folder: folder}}
	if err := s.openFolders(); err != nil {
		t.Fatal(err)
	}
	defer s.closeFolders()
	if err := s.checkFolders(); err != nil {
		t.Fatal(err)
	}
	run := &wire.RunHeader{RunID: "r1", TimeoutSeconds: 2, Data: []string{"sales"}}
	rec, e := s.prepareRun(run)
	if e != nil {
		t.Fatal(e)
	}
	if len(rec) != 1 || rec[0].Name != "sales" || rec[0].HostPath != folder || rec[0].Files != 2 || rec[0].Bytes != 10 ||
		len(rec[0].Digest) != 64 || len(rec[0].LeftOut) != 1 || !strings.HasPrefix(rec[0].LeftOut[0], "1 symbolic links:") {
		t.Errorf("record %+v", rec)
	}
	if want := []string{"sales"}; !reflect.DeepEqual(run.Data, want) {
		t.Errorf("the run became %+v", run.Data)
	}
	if _, e := s.prepareRun(&wire.RunHeader{Data: []string{"other"}}); e == nil || e.Code != wire.ErrNoData {
		t.Errorf("a folder the VM lacks: %v", e)
	}
	// A file with a second name: the run is refused, saying why.
	os.Link(filepath.Join(folder, "a.csv"), filepath.Join(folder, "again.csv"))
	if _, e := s.prepareRun(run); e == nil || e.Code != wire.ErrBadRequest || !strings.Contains(e.Message, "more than one name") {
		t.Errorf("a hard link: %v", e)
	}
	if err := s.checkFolders(); err == nil || !strings.Contains(err.Error(), "hard links") {
		t.Errorf("a boot with a hard link in a data folder: %v", err)
	}
	os.Remove(filepath.Join(folder, "again.csv"))
	// The folder's path now leads to another folder: the run is refused
	// rather than given a receipt of a folder the VM was not given.
	os.Rename(folder, folder+".orig")
	os.Mkdir(folder, 0o755)
	if _, e := s.prepareRun(run); e == nil || e.Code != wire.ErrBadRequest || !strings.Contains(e.Message, "moved or replaced") {
		t.Errorf("a swapped folder: %v", e)
	}
}
