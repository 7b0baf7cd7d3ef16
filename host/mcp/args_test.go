package mcp

import (
	"encoding/base64"
	"strings"
	"testing"

	"pybox/host/client"
	"pybox/host/egress"
	"pybox/shared/wire"
)

func testOptions() Options {
	return Options{Images: []string{"stdlib", "data"}, MaxTimeout: 10}
}

// admit takes a call's arguments as the server does: parseArgs (the
// tool's rules and the server's ceilings), then client.CheckRun (the
// product's rules, the host's one check of a run).
func admit(raw []byte, o *Options) (*wire.Run, error) {
	r, _, err := admitNet(raw, o)
	return r, err
}

// admitNet is admit that also returns the hosts the run may reach.
func admitNet(raw []byte, o *Options) (*wire.Run, egress.Allow, error) {
	r, allow, err := parseArgs(raw, o)
	if err != nil {
		return nil, allow, err
	}
	r.RunID = wire.NewRunID("mcp-")
	c, err := client.CheckRun(r)
	if err != nil {
		return nil, allow, err
	}
	run := c.Run()
	return &run, allow, nil
}

func TestParseArgsAccepts(t *testing.T) {
	o := testOptions()
	for _, tc := range []struct {
		name, args string
		check      func(*wire.Run) bool
	}{
		{"defaults", `{"code":"print(1)"}`, func(r *wire.Run) bool {
			return r.Code == "print(1)" && r.Image == "stdlib" && r.TimeoutSeconds == 2 && r.MaxOutputBytes == 4096 && !r.ReturnFiles
		}},
		{"everything", `{"code":"x","image":"data","timeout_s":10,"max_output_bytes":8192,"return_files":true,
			"files":[{"name":"a.csv","content":"a,b\n"},{"name":"b.bin","content":"AAEC","encoding":"base64"},{"name":"e","content":""}]}`,
			func(r *wire.Run) bool {
				return r.Image == "data" && r.TimeoutSeconds == 10 && r.MaxOutputBytes == 8192 && r.ReturnFiles &&
					len(r.Files) == 3 && string(r.Files[1].Content) == "\x00\x01\x02" && len(r.Files[2].Content) == 0
			}},
		{"fractional timeout", `{"code":"x","timeout_s":0.5}`, func(r *wire.Run) bool { return r.TimeoutSeconds == 0.5 }},
		{"integral float", `{"code":"x","max_output_bytes":1e3}`, func(r *wire.Run) bool { return r.MaxOutputBytes == 1000 }},
		{"empty code", `{"code":""}`, func(r *wire.Run) bool { return r.Code == "" }},
		{"code at the byte limit", `{"code":"` + strings.Repeat("é", wire.MaxCodeBytes/2) + `"}`, func(r *wire.Run) bool { return len(r.Code) == wire.MaxCodeBytes }},
		{"16 files, 256 KiB", filesArgs(16, wire.MaxInputBytes/16), func(r *wire.Run) bool { return len(r.Files) == 16 }},
		{"unicode file name", `{"code":"x","files":[{"name":"données.csv","content":"1"}]}`, func(r *wire.Run) bool { return r.Files[0].Name == "données.csv" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := admit([]byte(tc.args), &o)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.check(r) {
				t.Fatalf("parsed wrong: image %q, timeout %v, max_output_bytes %d, %d files", r.Image, r.TimeoutSeconds, r.MaxOutputBytes, len(r.Files))
			}
		})
	}
}

// filesArgs makes n files holding total bytes between them.
func filesArgs(n, each int) string {
	var b strings.Builder
	b.WriteString(`{"code":"x","files":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"name":"f` + string(rune('a'+i)) + `","content":"` + strings.Repeat("x", each) + `"}`)
	}
	b.WriteString("]}")
	return b.String()
}

// Every class of refused argument a hostile client may send,
// and a few neighbours of each.
func TestParseArgsRefuses(t *testing.T) {
	o := testOptions()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct{ name, args, want string }{
		{"no code", `{}`, "code is required"},
		{"no arguments", ``, "code is required"},
		{"null arguments", `null`, "must be an object"},
		{"arguments an array", `["print(1)"]`, "must be an object"},
		{"unknown argument", `{"code":"x","shell":true}`, `unknown argument "shell"`},
		{"key in another case", `{"Code":"x"}`, `unknown argument "Code"`},
		{"env", `{"code":"x","env":{"A":"1"}}`, `unknown argument "env"`},
		{"duplicate key", `{"code":"x","code":"y"}`, `name "code" twice`},
		{"duplicate timeout", `{"code":"x","timeout_s":1,"timeout_s":100}`, `"timeout_s" twice`},
		{"code a number", `{"code":42}`, "code must be a string, not a number"},
		{"code null", `{"code":null}`, "code must be a string, not null"},
		{"code an object", `{"code":{"a":1}}`, "code must be a string, not an object"},
		{"code over the byte limit", `{"code":"` + strings.Repeat("é", wire.MaxCodeBytes/2+1) + `"}`, "65536"},
		{"code with a NUL", `{"code":"print(1)\u0000"}`, "NUL character (U+0000)"},
		{"files a string", `{"code":"x","files":"a.csv"}`, "files must be an array, not a string"},
		{"files an object", `{"code":"x","files":{"name":"a","content":"b"}}`, "files must be an array, not an object"},
		{"file a string", `{"code":"x","files":["a"]}`, "files[0] must be an object"},
		{"file unknown field", `{"code":"x","files":[{"name":"a","content":"b","mode":"0777"}]}`, `unknown field "mode"`},
		{"file path field", `{"code":"x","files":[{"name":"a","content":"b","path":"/etc"}]}`, `unknown field "path"`},
		{"file without name", `{"code":"x","files":[{"content":"b"}]}`, "has no name"},
		{"file without content", `{"code":"x","files":[{"name":"a"}]}`, "has no content"},
		{"file duplicate key", `{"code":"x","files":[{"name":"a","name":"b","content":""}]}`, `name "name" twice`},
		{"timeout a string", `{"code":"x","timeout_s":"5"}`, "timeout_s must be a number, not a string"},
		{"timeout zero", `{"code":"x","timeout_s":0}`, "more than 0"},
		{"timeout negative", `{"code":"x","timeout_s":-1}`, "more than 0"},
		{"timeout negative zero", `{"code":"x","timeout_s":-0.0}`, "more than 0"},
		{"timeout above ceiling", `{"code":"x","timeout_s":10.001}`, "at most 10"},
		{"timeout not finite", `{"code":"x","timeout_s":1e400}`, "finite"},
		{"timeout null", `{"code":"x","timeout_s":null}`, "must be a number, not null"},
		{"timeout bool", `{"code":"x","timeout_s":true}`, "must be a number, not a boolean"},
		{"max_output_bytes zero", `{"code":"x","max_output_bytes":0}`, "1–8192"},
		{"max_output_bytes over", `{"code":"x","max_output_bytes":8193}`, "1–8192"},
		{"max_output_bytes fraction", `{"code":"x","max_output_bytes":100.5}`, "whole number"},
		{"max_output_bytes huge", `{"code":"x","max_output_bytes":1e300}`, "whole number"},
		{"return_files a string", `{"code":"x","return_files":"true"}`, "true or false"},
		{"image not allowed", `{"code":"x","image":"tools"}`, `image "tools" is not allowed`},
		{"image a path", `{"code":"x","image":"../stdlib"}`, "not allowed"},
		{"image in another case", `{"code":"x","image":"Stdlib"}`, "not allowed"},
		{"17 files", filesArgs(17, 1), "17 files; at most 16"},
		{"256 KiB + 1", strings.Replace(filesArgs(16, wire.MaxInputBytes/16), `"content":"x`, `"content":"xx`, 1), "256 KiB"},
		{"traversal", `{"code":"x","files":[{"name":"../../etc/passwd","content":""}]}`, "path separator"},
		{"absolute", `{"code":"x","files":[{"name":"/etc/passwd","content":""}]}`, "path separator"},
		{"subdirectory", `{"code":"x","files":[{"name":"a/b","content":""}]}`, "path separator"},
		{"backslash", `{"code":"x","files":[{"name":"a\\b","content":""}]}`, "path separator"},
		{"dot dot", `{"code":"x","files":[{"name":"..","content":""}]}`, "not allowed"},
		{"dot", `{"code":"x","files":[{"name":".","content":""}]}`, "not allowed"},
		{"empty name", `{"code":"x","files":[{"name":"","content":""}]}`, "empty"},
		{"NUL in name", `{"code":"x","files":[{"name":"a\u0000b","content":""}]}`, "control character"},
		{"newline in name", `{"code":"x","files":[{"name":"a\nb","content":""}]}`, "control character"},
		{"DEL in name", `{"code":"x","files":[{"name":"a\u007fb","content":""}]}`, "control character"},
		{"name too long", `{"code":"x","files":[{"name":"` + strings.Repeat("n", 256) + `","content":""}]}`, "limit is 255"},
		{"duplicate names", `{"code":"x","files":[{"name":"a","content":""},{"name":"a","content":""}]}`, "appears twice"},
		{"case-only duplicates", `{"code":"x","files":[{"name":"Data.csv","content":""},{"name":"data.CSV","content":""}]}`, "differ only in case"},
		{"unknown encoding", `{"code":"x","files":[{"name":"a","content":"","encoding":"hex"}]}`, `encoding "hex"`},
		{"encoding in another case", `{"code":"x","files":[{"name":"a","content":"","encoding":"BASE64"}]}`, "not known"},
		{"base64 illegal character", `{"code":"x","files":[{"name":"a","content":"AA*=","encoding":"base64"}]}`, "not base64"},
		{"base64 URL-safe", `{"code":"x","files":[{"name":"a","content":"-_8=","encoding":"base64"}]}`, "URL-safe"},
		{"base64 bad padding", `{"code":"x","files":[{"name":"a","content":"AAE","encoding":"base64"}]}`, "padding"},
		{"base64 too much padding", `{"code":"x","files":[{"name":"a","content":"AA===","encoding":"base64"}]}`, "padding"},
		{"base64 newline", `{"code":"x","files":[{"name":"a","content":"` + b64("hello") + `\n","encoding":"base64"}]}`, "whitespace"},
		{"base64 space", `{"code":"x","files":[{"name":"a","content":"AAAA AAAA","encoding":"base64"}]}`, "whitespace"},
		{"base64 non-canonical", `{"code":"x","files":[{"name":"a","content":"AB==","encoding":"base64"}]}`, "padding"},
		{"base64 over the total", `{"code":"x","files":[{"name":"a","content":"` + base64.StdEncoding.EncodeToString(make([]byte, wire.MaxInputBytes+1)) + `","encoding":"base64"}]}`, "256 KiB"},
		{"invalid UTF-8", "{\"code\":\"\xff\"}", "UTF-8"},
		{"trailing data", `{"code":"x"} {"code":"y"}`, "trailing"},
		{"truncated", `{"code":"x"`, "not valid JSON"},
		{"bad JSON", `{"code" "x"}`, "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := admit([]byte(tc.args), &o)
			if err == nil {
				t.Fatalf("accepted: %d bytes of code, image %q, timeout %v, %d files", len(r.Code), r.Image, r.TimeoutSeconds, len(r.Files))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with %q; want it to say %q", err, tc.want)
			}
		})
	}
}

func TestParseArgsFollowsOptions(t *testing.T) {
	o := Options{Images: []string{"data"}, MaxTimeout: 0.5}
	r, _, err := parseArgs([]byte(`{"code":"x"}`), &o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Image != "data" || r.TimeoutSeconds != 0.5 {
		t.Fatalf("defaults under a lower ceiling and no stdlib: image %q, timeout %v", r.Image, r.TimeoutSeconds)
	}
	if _, _, err := parseArgs([]byte(`{"code":"x","image":"stdlib"}`), &o); err == nil {
		t.Fatal("stdlib accepted on a server that allows only data")
	}
	if _, _, err := parseArgs([]byte(`{"code":"x","timeout_s":0.6}`), &o); err == nil {
		t.Fatal("a timeout over the ceiling accepted")
	}
}

// FuzzParseArgs: whatever the client sends, the server either refuses it
// or admits a run within its ceilings (and, by client.CheckRun, within
// every rule of the product).
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		`{"code":"print(1)"}`,
		`{"code":"x","image":"data","timeout_s":10,"max_output_bytes":8192,"return_files":true,"files":[{"name":"a","content":"AAEC","encoding":"base64"}]}`,
		`{"code":"x","files":[{"name":"A","content":""},{"name":"a","content":""}]}`,
		`{"code":"x","timeout_s":1e400}`, `{"code":"x","code":"y"}`, `[]`, `{"files":[[[[[]]]]]}`,
		`{"code":"x","files":[{"name":"a","content":"-_==","encoding":"base64"}]}`,
		`{"code":"x","network":["api.example.com:443","*.pythonhosted.org:443"]}`, `{"code":"x","network":["evil.org"]}`,
		`{"code":"x","network":["[2001:db8::1]:443","a.pythonhosted.org."]}`,
	} {
		f.Add([]byte(s))
	}
	o := netOptions(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, allow, err := admitNet(raw, &o)
		if err != nil {
			if r != nil {
				t.Fatal("a run with an error")
			}
			return
		}
		if err := checkCeilings(r, &o); err != nil {
			t.Fatalf("accepted a run over the server's ceilings: %v", err)
		}
		if r.Net != (allow.String() != "") {
			t.Fatalf("net %v with hosts %q", r.Net, allow)
		}
		if _, err := o.Net.Narrow(allow); err != nil {
			t.Fatalf("a call got more than the server opens: %v", err)
		}
	})
}

// The data argument is there only on a server with data folders, and
// names only those, each once.
func TestParseArgsData(t *testing.T) {
	o := testOptions()
	if _, err := admit([]byte(`{"code":"x","data":[]}`), &o); err == nil || !strings.Contains(err.Error(), `unknown argument "data"`) {
		t.Errorf("data on a server without data folders: %v", err)
	}
	o.Data = []string{"sales", "logs"}
	r, err := admit([]byte(`{"code":"x","data":["logs","sales"]}`), &o)
	if err != nil || len(r.Data) != 2 || r.Data[0].Name != "logs" {
		t.Fatalf("admitted %+v, %v", r, err)
	}
	for args, want := range map[string]string{
		`{"code":"x","data":["secrets"]}`:                                  `data folder "secrets" is not allowed on this server: use one of sales, logs`,
		`{"code":"x","data":["sales","sales"]}`:                            `data folder "sales" is named twice`,
		`{"code":"x","data":null}`:                                         "data must be an array, not null",
		`{"code":"x","data":"sales"}`:                                      "data must be an array, not a string",
		`{"code":"x","data":[1]}`:                                          "data[0] must be a string, not a number",
		`{"code":"x","files":[{"name":"a","content":"","encoding":null}]}`: "files[0].encoding must be a string, not null",
		`{"code":"x","files":[{"name":"a","content":"","encoding":""}]}`:   `encoding "" is not known`,
		`{"code":"x","files":null}`:                                        "files must be an array, not null",
	} {
		if _, err := admit([]byte(args), &o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", args, err, want)
		}
	}
}
