package escape

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// What a hostile program prints to act on the terminal that shows it.
var attacks = map[string]string{
	"OSC 52 clipboard":   "\x1b]52;c;cm0gLXJmIH4K\x07",
	"SGR 8 hidden text":  "\x1b[8mhidden\x1b[0m",
	"OSC 8 link":         "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",
	"clear and home":     "\x1b[2J\x1b[H",
	"8-bit CSI (C1)":     "\u009b2J",
	"bidi override":      "file\u202etxt.exe",
	"bidi isolate":       "a\u2066b\u2069c",
	"carriage return":    "real\rfake",
	"DEL":                "x\x7fy",
	"invalid UTF-8 C1":   "\x9b2J",
	"arabic letter mark": "\u061c",
}

func TestTerminalEscapesEveryAttack(t *testing.T) {
	for name, s := range attacks {
		got := Terminal(s)
		if Controls(got, "\t\n") != 0 {
			t.Errorf("%s: %q still holds controls", name, got)
		}
		if got == s {
			t.Errorf("%s: %q passed unchanged", name, s)
		}
	}
	if got := Terminal("\x1b[31mred"); got != `\x1b[31mred` {
		t.Errorf("ESC shown as %q", got)
	}
	if got := Terminal("a\u202eb"); got != `a\u{202e}b` {
		t.Errorf("RLO shown as %q", got)
	}
	if got := Terminal("\xffz"); got != `\xffz` {
		t.Errorf("an invalid byte shown as %q", got)
	}
}

func TestTerminalKeepsText(t *testing.T) {
	for _, s := range []string{"", "plain\ttext\nnext line\n", "ünïcödé, 中文, עברית, emoji 🧪 and 👩‍🔬", `C:\path\n not a newline`} {
		if got := Terminal(s); got != s {
			t.Errorf("Terminal(%q) = %q", s, got)
		}
	}
	if got := Line("a\nb\tc"); got != `a\x0ab\x09c` {
		t.Errorf("Line = %q", got)
	}
}

// JSON keeps the value and removes the raw characters from the text.
func TestJSON(t *testing.T) {
	in := map[string]string{"stdout": "x\u0085y\u202ez\u2067w\x7f\x1b", "ok": "plain ü"}
	b, _ := json.Marshal(in)
	got := JSON(b)
	for _, raw := range []string{"\u0085", "\u202e", "\u2067", "\x7f", "\x1b"} {
		if bytes.Contains(got, []byte(raw)) {
			t.Errorf("%q left raw in %s", raw, got)
		}
	}
	if !bytes.Contains(got, []byte(`\u0085`)) || !bytes.Contains(got, []byte(`\u202e`)) {
		t.Errorf("not escaped as \\uXXXX: %s", got)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["stdout"] != in["stdout"] || back["ok"] != in["ok"] {
		t.Errorf("the value changed: %q (%v)", back, err)
	}
	if plain := []byte(`{"a":"ü and 中"}`); !bytes.Equal(JSON(plain), plain) {
		t.Error("JSON changed text without controls")
	}
}

// The console writer escapes across write boundaries, keeping what a
// line-based console needs.
func TestWriterSplitsCharacters(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	stream := []byte("pybox> status\r\nok\t1\b\x1b[2J\u202e\u009b done\xff\n")
	for i := range stream { // one byte at a time: every split there is
		w.Write(stream[i : i+1])
	}
	want := "pybox> status\r\nok\t1\b" + `\x1b[2J\u{202e}\u{9b} done\xff` + "\n"
	if out.String() != want {
		t.Errorf("got  %q\nwant %q", out.String(), want)
	}
}

func FuzzTerminal(f *testing.F) {
	for _, s := range attacks {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Terminal(s)
		if Controls(got, "\t\n") != 0 {
			t.Fatalf("Terminal(%q) = %q holds controls", s, got)
		}
		if Controls(s, "\t\n") == 0 && got != s {
			t.Fatalf("Terminal changed %q without controls", s)
		}
		var out bytes.Buffer
		NewWriter(&out).Write([]byte(s))
		if Controls(out.String(), consoleKeeps) != 0 || strings.ContainsRune(out.String(), 0x1b) {
			t.Fatalf("Writer(%q) = %q holds controls", s, out.String())
		}
	})
}
