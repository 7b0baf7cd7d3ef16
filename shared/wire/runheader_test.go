package wire

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
)

// fullRun has every field of a Run set.
func fullRun() *Run {
	return &Run{RunID: "r-full", Code: "print(1)", Image: "data", TimeoutSeconds: 2.5, MaxOutputBytes: 100,
		Files: []InputFile{{Name: "a.csv", Content: []byte("1,2\n")}}, ReturnFiles: true,
		Data: []DataFolder{{Name: "sales"}, {Name: "logs"}}, MaxDataBytes: 1 << 40, Deliver: &Deliver{MaxBytes: 64 << 20},
		Client: "pybox run (pid 7)", Net: true}
}

// A run travels whole, each field once: in its header or in its body.
func TestRunFrame(t *testing.T) {
	if n := reflect.TypeFor[Run]().NumField(); n != reflect.TypeFor[runBody]().NumField()+reflect.TypeFor[RunHeader]().NumField() {
		t.Fatalf("Run has %d fields, and its header and body carry %d and %d: a new field must travel in one of them",
			n, reflect.TypeFor[RunHeader]().NumField(), reflect.TypeFor[runBody]().NumField())
	}
	r := fullRun()
	p, err := Encode(&Message{Type: TypeRun, ID: 7, Run: r})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(p)
	if err != nil || m.ID != 7 || !reflect.DeepEqual(m.Run, r) {
		t.Fatalf("Decode = %+v, %v; want %+v", m.Run, err, r)
	}
	h, err := PeekRun(p)
	want := RunHeader{RunID: "r-full", TimeoutSeconds: 2.5, Deliver: &Deliver{MaxBytes: 64 << 20}, MaxDataBytes: 1 << 40, Data: []string{"sales", "logs"}, Net: true}
	if err != nil || !reflect.DeepEqual(h, want) {
		t.Fatalf("PeekRun = %+v, %v; want %+v", h, err, want)
	}
	for _, field := range []string{"run_id", "timeout_s", "sales", "deliver", "max_data_bytes"} {
		if bytes.Contains(p[bytes.IndexByte(p, '{'):], []byte(field)) {
			t.Errorf("the body says %s, which is the header's", field)
		}
	}
	// Of a data folder, its name travels, nothing the host knows of it.
	r.Data[0].HostPath, r.Data[0].Bytes = "/home/u/sales", 5
	p, _ = Encode(&Message{Type: TypeRun, ID: 7, Run: r})
	if m, _ := Decode(p); !reflect.DeepEqual(m.Run.Data, []DataFolder{{Name: "sales"}, {Name: "logs"}}) {
		t.Errorf("the data folders came as %+v", m.Run.Data)
	}
	if bytes.Contains(p, []byte("/home/u")) {
		t.Error("a host path travelled")
	}
}

func TestRunFrameRefused(t *testing.T) {
	good, _ := Encode(&Message{Type: TypeRun, ID: 1, Run: goodRun()})
	body := good[bytes.IndexByte(good, '{'):]
	head := good[:len(good)-len(body)]
	flags := func(b byte) []byte { p := bytes.Clone(good); p[headerSize] = b; return p }
	for name, p := range map[string][]byte{
		"no run header":               EncodeRaw(TypeRun, 1, nil),
		"cut in the header":           head[:len(head)-1],
		"no body":                     head,
		"a field of the header again": append(bytes.Clone(head), `{"run_id":"r2","code":"","image":"stdlib","max_output_bytes":1,"return_files":false}`...),
		"unknown flags":               flags(4),
		"a bound without delivery":    func() []byte { p := bytes.Clone(good); p[headerSize+9+7] = 1; return p }(),
	} {
		if _, err := Decode(p); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if _, err := PeekRun(good[:headerSize+5]); err != errShortRunHeader {
		t.Errorf("PeekRun of a short header: %v", err)
	}
	if _, err := PeekRun(EncodeRaw(TypePing, 1, nil)); err == nil {
		t.Error("PeekRun of a ping")
	}
	long := goodRun()
	long.RunID = strings.Repeat("r", 256)
	if _, err := Encode(&Message{Type: TypeRun, ID: 1, Run: long}); err == nil {
		t.Error("a run ID longer than its length byte was encoded")
	}
}

// FuzzPeekRun: whatever a run frame holds, PeekRun reads it without
// panicking, and a header it reads is written again as it was; Decode
// reads the same header.
func FuzzPeekRun(f *testing.F) {
	for _, r := range []*Run{goodRun(), fullRun(), {TimeoutSeconds: math.NaN()}} {
		p, err := Encode(&Message{Type: TypeRun, ID: 3, Run: r})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p)
	}
	f.Add(EncodeRaw(TypeRun, 1, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255}))
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := PeekRun(p)
		if m, derr := Decode(p); derr == nil && m.Type == TypeRun {
			back, _ := splitRun(m.Run)
			if err != nil || !sameHeader(back, h) {
				t.Fatalf("Decode read the header %+v, PeekRun %+v (%v)", back, h, err)
			}
		}
		if err != nil {
			return
		}
		q, err := Encode(&Message{Type: TypeRun, ID: 1, Run: joinRun(h, &runBody{})})
		if err != nil {
			t.Fatalf("a header read could not be written: %v", err)
		}
		again, err := PeekRun(q)
		if err != nil || !sameHeader(again, h) {
			t.Fatalf("%+v came back as %+v (%v)", h, again, err)
		}
	})
}

// sameHeader compares two headers, NaN timeouts by their bits.
func sameHeader(a, b RunHeader) bool {
	if math.Float64bits(a.TimeoutSeconds) != math.Float64bits(b.TimeoutSeconds) {
		return false
	}
	a.TimeoutSeconds, b.TimeoutSeconds = 0, 0
	return reflect.DeepEqual(a, b)
}
