package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// strictSample has a field of every kind DecodeStrict reads.
type strictSample struct {
	Name   string        `json:"name" strict:"required"`
	N      int           `json:"n"`
	Small  int8          `json:"small"`
	U      uint16        `json:"u"`
	F      float64       `json:"f"`
	B      bool          `json:"b"`
	Raw    []byte        `json:"raw"`
	Opt    *string       `json:"opt,omitempty"`
	Code   *int          `json:"code"`
	List   []strictInner `json:"list"`
	Quiet  []string      `json:"quiet,omitempty"`
	Nested *strictInner  `json:"nested,omitempty"`
	Deep   *strictSample `json:"deep,omitempty"`
}

type strictInner struct {
	K string `json:"k" strict:"required"`
}

func TestDecodeStrictReads(t *testing.T) {
	var s strictSample
	err := DecodeStrict([]byte(`{"name":"a","n":1e3,"small":-128,"u":65535,"f":-0.5,"b":true,"raw":"AAEC","opt":"o",
		"code":null,"list":[{"k":"x"}],"quiet":[],"nested":{"k":"y"}}`), &s, "the sample")
	if err != nil {
		t.Fatal(err)
	}
	want := strictSample{Name: "a", N: 1000, Small: -128, U: 65535, F: -0.5, B: true, Raw: []byte{0, 1, 2}, Opt: new("o"),
		List: []strictInner{{K: "x"}}, Quiet: []string{}, Nested: &strictInner{K: "y"}}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	// What Encode writes of an empty value reads back: null where it
	// writes null.
	b, _ := json.Marshal(strictSample{Name: "z"})
	if err := DecodeStrict(b, &s, "the sample"); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

func TestDecodeStrictRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`null`, "the sample must be an object, not null"},
		{`[]`, "the sample must be an object, not an array"},
		{`{}`, `key "name" is missing`},
		{`{"name":"a","list":[{}]}`, `key "k" is missing in list[0]`},
		{`{"Name":"a"}`, `unknown key "Name"`},
		{`{"name":"a","nested":{"k":"a","K":"b"}}`, `unknown key "K" in nested`},
		{`{"name":"a","name":"b"}`, `key "name" appears twice`},
		{`{"name":null}`, "name must be a string, not null"},
		{`{"name":1}`, "name must be a string, not a number"},
		{`{"name":"a","n":"1"}`, "n must be a number, not a string"},
		{`{"name":"a","n":1.5}`, "n must be a whole number, not 1.5"},
		{`{"name":"a","n":1e300}`, "n must be a whole number from"},
		{`{"name":"a","small":128}`, "small must be a whole number from -128 to 127, not 128"},
		{`{"name":"a","u":-1}`, "u must be a whole number from 0 to 65535, not -1"},
		{`{"name":"a","f":1e400}`, "f must be a finite number"},
		{`{"name":"a","b":"true"}`, "b must be true or false, not a string"},
		{`{"name":"a","raw":"***"}`, "raw is not standard base64"},
		{`{"name":"a","raw":[1]}`, "raw must be a base64 string, not an array"},
		{`{"name":"a","opt":null}`, "opt must be a string, not null"},
		{`{"name":"a","quiet":null}`, "quiet must be an array, not null"},
		{`{"name":"a","nested":null}`, "nested must be an object, not null"},
		{`{"name":"a","list":{}}`, "list must be an array, not an object"},
		{`{"name":"a","list":["k"]}`, "list[0] must be an object, not a string"},
		{`{"name":"a"} {}`, "trailing data after the sample"},
		{`{"name":"a"} x`, "trailing data after the sample"},
		{`{"name":"a"`, "not valid JSON: unexpected EOF"},
		{`{"name" "a"}`, "not valid JSON"},
		{"{\"name\":\"\xff\"}", "not valid UTF-8"},
		{strings.Repeat(`{"name":"a","deep":`, 20), "nested more than 16 deep"},
	} {
		var s strictSample
		err := DecodeStrict([]byte(tc.in), &s, "the sample")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60s: %v; want %q", tc.in, err, tc.want)
		}
	}
	var ke *KeyError
	if err := DecodeStrict([]byte(`{"name":"a","list":[{"k":"x","j":1}]}`), new(strictSample), "s"); !errors.As(err, &ke) ||
		*ke != (KeyError{In: "list[0]", Key: "j", Problem: KeyUnknown}) {
		t.Errorf("a key error: %#v", err)
	}
}

// FuzzDecodeStrict: whatever it reads, DecodeStrict refuses it or reads
// a value that encoding/json writes back in a form it reads again, to the
// same value.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","n":1e3,"raw":"AAEC","code":null,"list":[{"k":"x"}],"quiet":[]}`,
		`{"name":"a","small":-129}`, `{"name":"a","f":-0}`, `{"name":"a","nested":{"k":"\u00e9"}}`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		var s strictSample
		if DecodeStrict(p, &s, "s") != nil {
			return
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back strictSample
		if err := DecodeStrict(b, &back, "s"); err != nil {
			t.Fatalf("%s read back: %v", b, err)
		}
		if b2, _ := json.Marshal(back); string(b2) != string(b) {
			t.Fatalf("%s read back as %s", b, b2)
		}
	})
}
