package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

func goodRun() *Run {
	return &Run{RunID: "r1", Code: "print(1)", Image: "stdlib", TimeoutSeconds: 2, MaxOutputBytes: 4096}
}

func TestRunCheck(t *testing.T) {
	if err := goodRun().Check(); err != nil {
		t.Fatalf("a good run was refused: %v", err)
	}
	bad := map[string]func(r *Run){
		"no run id":           func(r *Run) { r.RunID = "" },
		"run id with slash":   func(r *Run) { r.RunID = "../x" },
		"image path":          func(r *Run) { r.Image = "../stdlib" },
		"image upper":         func(r *Run) { r.Image = "Stdlib" },
		"code too long":       func(r *Run) { r.Code = strings.Repeat("x", MaxCodeBytes+1) },
		"code bad utf8":       func(r *Run) { r.Code = "\xff" },
		"code with a NUL":     func(r *Run) { r.Code = "print('a')\nx = '\x00'\n" },
		"timeout zero":        func(r *Run) { r.TimeoutSeconds = 0 },
		"timeout negative":    func(r *Run) { r.TimeoutSeconds = -1 },
		"timeout NaN":         func(r *Run) { r.TimeoutSeconds = math.NaN() },
		"timeout Inf":         func(r *Run) { r.TimeoutSeconds = math.Inf(1) },
		"timeout over 30":     func(r *Run) { r.TimeoutSeconds = 30.001 },
		"output zero":         func(r *Run) { r.MaxOutputBytes = 0 },
		"output over 8192":    func(r *Run) { r.MaxOutputBytes = 8193 },
		"17 files":            func(r *Run) { r.Files = make([]InputFile, 17) },
		"files too big":       func(r *Run) { r.Files = []InputFile{{Name: "a", Content: make([]byte, MaxInputBytes+1)}} },
		"duplicate file":      func(r *Run) { r.Files = []InputFile{{Name: "a"}, {Name: "a"}} },
		"case-only duplicate": func(r *Run) { r.Files = []InputFile{{Name: "Data.csv"}, {Name: "data.csv"}} },
	}
	for name, mutate := range bad {
		r := goodRun()
		mutate(r)
		if err := r.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := CheckCode("print(1)\nprint('\x00')"); err == nil || !strings.Contains(err.Error(), "NUL character (U+0000) on line 2") {
		t.Errorf("a NUL: %v", err)
	}
	r := goodRun()
	r.Code = strings.Repeat("é", MaxCodeBytes/2)
	r.TimeoutSeconds = 30
	r.MaxOutputBytes = 8192
	r.Files = []InputFile{{Name: "a", Content: make([]byte, MaxInputBytes)}}
	if err := r.Check(); err != nil {
		t.Errorf("a run exactly at every limit was refused: %v", err)
	}
}

func TestCheckFileName(t *testing.T) {
	for _, name := range []string{"", ".", "..", "../../etc/passwd", "/etc/passwd", "a/b", `a\b`, "a\x00b", "a\nb", "a\tb", "\x7f", "a\u0085b", "\xff", strings.Repeat("n", 256)} {
		if CheckFileName(name) == nil {
			t.Errorf("CheckFileName(%q) accepted", name)
		}
	}
	for _, name := range []string{"sales.csv", "a..b", ".hidden", "ünïcode.txt", "space name.txt", strings.Repeat("n", 255)} {
		if err := CheckFileName(name); err != nil {
			t.Errorf("CheckFileName(%q) = %v", name, err)
		}
	}
}

func TestEscapeName(t *testing.T) {
	cases := map[string]string{
		"plain.txt":       "plain.txt",
		"a\nb":            `a\u{a}b`,
		"\xffx":           `\xffx`,
		`back\slash`:      `back\\slash`,
		"bidi\u202etxt":   `bidi\u{202e}txt`,
		"ünïcode":         "ünïcode",
		"\x1b[31mred":     `\u{1b}[31mred`,
		"zero\u200bwidth": `zero\u{200b}width`,
	}
	for in, want := range cases {
		if got := EscapeName(in); got != want {
			t.Errorf("EscapeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzEscapeName(f *testing.F) {
	for _, s := range []string{"a", "\n", "\xff\xfe", strings.Repeat("é", 200), strings.Repeat("\x01", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := EscapeName(name)
		if !utf8.ValidString(got) {
			t.Fatalf("EscapeName(%q) = %q is not valid UTF-8", name, got)
		}
		if len(got) > maxEscapedName+len("…") {
			t.Fatalf("EscapeName gave %d bytes", len(got))
		}
		for _, r := range got {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("EscapeName(%q) = %q keeps a control character", name, got)
			}
		}
	})
}

func payload(typ string, id uint64, body string) []byte { return EncodeRaw(typ, id, []byte(body)) }

func TestDecode(t *testing.T) {
	good := [][]byte{
		payload(TypePing, 1, ""),
		payload(TypeHello, 0, `{"protocol":1}`),
		payload(TypeCancel, 3, `{"run_id":"r1"}`),
		payload(TypePong, 4, ""),
		payload(TypePong, 4, `{"health":"healthy"}`),
		payload(TypeFacts, 5, `{"data":[{"name":"sales","host_path":"/x"}]}`),
	}
	for _, p := range good {
		if _, err := Decode(p); err != nil {
			t.Errorf("Decode(%q) = %v", p, err)
		}
	}
	bad := [][]byte{
		nil, {}, []byte(`{"type":"ping","id":1}`), payload(TypePing, 1, "")[:8], {0, 0, 0, 0, 0, 0, 0, 0, 1}, {99, 0, 0, 0, 0, 0, 0, 0, 1},
		payload(TypePing, 1, "{}"), payload(TypeRun, 1, ""), payload(TypeReceipt, 1, ""), payload(TypeRun, 1, "null"),
		payload(TypeHello, 1, `{"protocol":1,"shell":true}`), payload(TypeHello, 1, `{"Protocol":1}`),
		payload(TypeHello, 1, `{"protocol":1}{}`), payload(TypeCancel, 1, `{"run_id":"a","run_id":"b"}`),
		payload(TypeCancel, 1, `[]`),
	}
	for _, p := range bad {
		if _, err := Decode(p); err == nil {
			t.Errorf("Decode(%q) accepted", p)
		}
	}
}

// Encode and Decode agree, and the header alone says the type and ID.
func TestEncodeDecodePeek(t *testing.T) {
	for _, m := range []*Message{
		{Type: TypePing, ID: 7},
		{Type: TypeRun, ID: 1 << 40, Run: goodRun()},
		{Type: TypePong, ID: 2, Status: &AgentStatus{Health: "healthy", Memory: &GuestMemory{Total: 1}}},
		{Type: TypeError, ID: 3, Error: &Error{Code: ErrBusy, Message: "m", Cleanup: &Cleanup{Status: CleanupNotAttempted}}},
		{Type: TypeFacts, ID: 4, Facts: &HostFacts{Data: []DataFolder{{Name: "a", Files: 2}}}},
	} {
		p, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		typ, id, err := Peek(p)
		if err != nil || typ != m.Type || id != m.ID {
			t.Errorf("Peek: %s %d %v, want %s %d", typ, id, err, m.Type, m.ID)
		}
		SetID(p, 99)
		back, err := Decode(p)
		if err != nil || back.ID != 99 || back.Type != m.Type {
			t.Fatalf("Decode: %+v %v", back, err)
		}
		m.ID = 99
		a, _ := json.Marshal(m)
		b, _ := json.Marshal(back)
		if !bytes.Equal(a, b) {
			t.Errorf("%s came back as %s", a, b)
		}
	}
	if _, err := Encode(&Message{Type: TypeRun, ID: 1}); err == nil {
		t.Error("a run without its body was encoded")
	}
	if _, err := Encode(&Message{Type: "launch"}); err == nil {
		t.Error("an unknown type was encoded")
	}
}

// An older peer's hello, and its refusal of ours, are read for what they
// say; nothing else of the old framing is.
func TestLegacyHello(t *testing.T) {
	if _, _, err := Peek([]byte(`{"type":"hello","id":1,"hello":{"protocol":2}}`)); err != ErrLegacy {
		t.Errorf("Peek of an old frame: %v", err)
	}
	m, ok := LegacyHello([]byte(`{"type":"hello","id":1,"hello":{"protocol":2}}`))
	if !ok || m.Hello.Protocol != 2 {
		t.Errorf("old hello: %+v %v", m, ok)
	}
	m, ok = LegacyHello(EncodeLegacyRefusal(5, "rebuild"))
	if !ok || m.Type != TypeError || m.ID != 5 || m.Error.Code != ErrProtocol || m.Error.Message != "rebuild" {
		t.Errorf("old refusal: %+v %v", m, ok)
	}
	for _, p := range []string{`{"type":"ping","id":1}`, `{"type":"hello","id":1}`, `[`, ""} {
		if m, ok := LegacyHello([]byte(p)); ok {
			t.Errorf("LegacyHello(%s) = %+v", p, m)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(payload(TypePing, 1, ""))
	f.Add(payload(TypeReceipt, 9, `{"receipt":{"status":"ok","cleanup":{"status":"REMOVED"}}}`))
	if p, err := Encode(&Message{Type: TypeRun, ID: 2, Run: fullRun()}); err == nil {
		f.Add(p)
	}
	f.Add([]byte(`{"type":"hello","id":1,"hello":{"protocol":2}}`))
	f.Add(EncodeRaw(TypeNetData, 3, []byte{0, 0, 0, 1, 'x'}))
	f.Add(EncodeRaw(TypeNetWindow, 3, []byte{0, 0, 0, 1, 0, 0, 16, 0}))
	f.Fuzz(func(t *testing.T, p []byte) {
		LegacyHello(p)
		m, err := Decode(p)
		if err != nil {
			return
		}
		if err := m.check(); err != nil {
			t.Fatalf("Decode returned a message that fails its own check: %v", err)
		}
		back, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode of a decoded message: %v", err)
		}
		if _, err := Decode(back); err != nil {
			t.Fatalf("re-decoding %q: %v", back, err)
		}
	})
}

// FuzzCheckFileName: every name CheckFileName accepts is a plain name,
// never a path, never a control character, and unique only up to case.
func FuzzCheckFileName(f *testing.F) {
	for _, s := range []string{"a.csv", "..", "a/b", `a\b`, "a\x00", "\u0085", "\xff", "ünï"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if CheckFileName(name) != nil {
			return
		}
		if name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") || !utf8.ValidString(name) || len(name) > MaxFileNameBytes {
			t.Fatalf("CheckFileName accepted %q", name)
		}
		for _, r := range name {
			if r < 0x20 || (r >= 0x7f && r < 0xa0) {
				t.Fatalf("CheckFileName accepted %q with a control character", name)
			}
		}
	})
}

func TestDecodeImageAbout(t *testing.T) {
	a, err := DecodeImageAbout([]byte(`{"python":"3.13.5","suite":"trixie"}`))
	if err != nil || a != (ImageAbout{Python: "3.13.5", Suite: "trixie"}) {
		t.Fatalf("got %+v, %v", a, err)
	}
	for _, bad := range []string{
		`{"python":"3.13","suite":"trixie"}`,
		`{"python":"3.13.5rc1","suite":"trixie"}`,
		`{"python":"3..5","suite":"trixie"}`,
		`{"python":"3.13.5","suite":"Trixie"}`,
		`{"python":"3.13.5","suite":"trixie-security"}`,
		`{"python":"3.13.5","suite":""}`,
		`{"python":"3.13.5"}`,
		`{"python":"3.13.5","suite":"trixie","extra":1}`,
		`{"python":"3.13.5","suite":"trixie","Suite":"sid"}`,
		`{"python":"3.13.5","suite":"trixie"} {}`,
		`{"python":"1.2.` + strings.Repeat("9", 20) + `","suite":"trixie"}`,
		`{"python":"3.13.5","suite":"` + strings.Repeat("x", 33) + `"}`,
		`{"python":"3.13.5","suite":"trixie","pad":"` + strings.Repeat(" ", MaxImageAboutBytes) + `"}`,
	} {
		if a, err := DecodeImageAbout([]byte(bad)); err == nil {
			t.Errorf("%.80s: accepted as %+v", bad, a)
		}
	}
}

// SumFiles's digest is sha256 over "SHA256 BYTES NAME\n" lines, so a user
// can check a list against the files themselves.
func TestSumFiles(t *testing.T) {
	files := []FileDigest{{Name: "a.csv", Bytes: 3, SHA256: strings.Repeat("1", 64)}, {Name: "b.png", Bytes: 5, SHA256: strings.Repeat("2", 64)}}
	lines := strings.Repeat("1", 64) + " 3 a.csv\n" + strings.Repeat("2", 64) + " 5 b.png\n"
	sum := sha256.Sum256([]byte(lines))
	got := SumFiles(files)
	if got.Files != 2 || got.Bytes != 8 || got.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("SumFiles = %+v", got)
	}
	if e := SumFiles(nil); e.Files != 0 || e.SHA256 != hex.EncodeToString(func() []byte { s := sha256.Sum256(nil); return s[:] }()) {
		t.Errorf("SumFiles(nil) = %+v", e)
	}
}
