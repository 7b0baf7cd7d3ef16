package client_test

import (
	"testing"

	"pybox/host/client"
	"pybox/shared/wire"
)

// A checked run stays as it was checked: what the caller changes in its
// own run after CheckRun, or in a copy Run gave it, is not sent.
func TestCheckedKeepsItsCopy(t *testing.T) {
	r := testWire("r1", "print(1)")
	r.Files = []wire.InputFile{{Name: "a.csv", Content: []byte("1")}}
	r.Data = []wire.DataFolder{{Name: "sales"}}
	r.Deliver = &wire.Deliver{MaxBytes: 10}
	c, err := client.CheckRun(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Files[0].Name, r.Data[0].Name, r.Deliver.MaxBytes = "../x", "../y", -1
	got := c.Run()
	got.Files[0].Name, got.Deliver.MaxBytes = "../z", -2
	again := c.Run()
	if again.Files[0].Name != "a.csv" || again.Data[0].Name != "sales" || again.Deliver.MaxBytes != 10 {
		t.Fatalf("the checked run became %+v", again)
	}
	if err := again.Check(); err != nil {
		t.Fatal(err)
	}
}
