package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	fakeOnce sync.Once
	fakeBin  string
	fakeErr  error
)

// fakeServer builds testdata/fakemcp once: a run_python server with
// canned receipts and one flaw chosen by -flaw.
func fakeServer(t *testing.T) string {
	t.Helper()
	fakeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pybox-check-fake")
		if err != nil {
			fakeErr = err
			return
		}
		fakeBin = filepath.Join(dir, "fakemcp")
		if out, err := exec.Command("go", "build", "-o", fakeBin, "./testdata/fakemcp").CombinedOutput(); err != nil {
			fakeErr = err
			fakeBin = string(out)
		}
	})
	if fakeErr != nil {
		t.Fatalf("building the fake server: %v\n%s", fakeErr, fakeBin)
	}
	return fakeBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeBin != "" && fakeErr == nil {
		os.RemoveAll(filepath.Dir(fakeBin))
	}
	os.Exit(code)
}

// fakeOptions check the fake with the given flaw, quickly: the fake
// answers at once, so patience can be short.
func fakeOptions(t *testing.T, flaw string) Options {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYBOX_HOME=") { // the fake reads an empty PYBOX_HOME as no VM
			env = append(env, kv)
		}
	}
	return Options{
		Server:     []string{fakeServer(t), "-flaw", flaw, "-images", "stdlib,data", "-max-timeout", "1"},
		Env:        env,
		Images:     []string{"stdlib", "data"},
		MaxTimeout: 1,
		VMDown:     true,
		Patience:   3 * time.Second,
		RunSlack:   4 * time.Second,
	}
}

func runChecks(t *testing.T, o Options) (failed []string, results []Result) {
	Run(context.Background(), o, func(r Result) {
		results = append(results, r)
		if !r.Pass {
			failed = append(failed, r.Name)
		}
	})
	return failed, results
}

// Each flaw of the fake must be caught by exactly the check that is
// there for it, and by no other.
func TestEachCheckCatchesItsFlaw(t *testing.T) {
	for _, tc := range []struct {
		flaw string
		want []string
	}{
		{"", nil},
		{"old-protocol", []string{"discover", "initialize"}},
		{"no-discover", []string{"discover"}},
		{"older-schema", []string{"initialize"}},
		{"older-differs", []string{"initialize"}},
		{"schema", []string{"tools-list"}},
		{"no-ttl", []string{"tools-list"}},
		{"text-differs", []string{"stdlib-run"}},
		{"memory-sampled", []string{"memory-final"}},
		{"wrong-image", []string{"image:data"}},
		{"files-corrupt", []string{"files"}},
		{"no-image", []string{"chart"}},
		{"reused-process", []string{"fresh"}},
		{"unknown-args", []string{"unknown-argument"}},
		{"ignore-ceiling", []string{"timeout-ceiling"}},
		{"echo-999", []string{"output-is-data"}},
		{"crash-on-forge", []string{"output-is-data"}},
		{"never-busy", []string{"busy"}},
		{"answers-cancelled", []string{"cancel"}},
		{"cancel-leaves-box", []string{"cancel"}},
		{"timeout-leaves-box", []string{"timeout"}},
		{"hang-timeout", []string{"timeout"}},
		{"no-trim", []string{"trimmed"}},
		{"oversize-ignored", []string{"oversize-message"}},
		{"vm-down-runs", []string{"vm-down"}},
		{"stray-line", []string{"stdout-protocol-only"}},
	} {
		name := tc.flaw
		if name == "" {
			name = "healthy"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			failed, results := runChecks(t, fakeOptions(t, tc.flaw))
			if !slices.Equal(failed, tc.want) {
				var b bytes.Buffer
				for _, r := range results {
					(&Printer{W: &b, Verbose: true}).Print(r)
				}
				t.Fatalf("failed %q, want %q:\n%s", failed, tc.want, b.String())
			}
			for _, r := range results {
				if !r.Pass && (r.Expected == "" || r.Got == "" || r.Hint == "") {
					t.Errorf("%s failed without expected, got and hint: %+v", r.Name, r)
				}
			}
		})
	}
}

// Every check runs, in order, whatever happens; with no server at all,
// each fails saying so.
func TestNoServer(t *testing.T) {
	o := fakeOptions(t, "")
	o.Server = []string{filepath.Join(t.TempDir(), "no-such-server")}
	failed, results := runChecks(t, o)
	if len(failed) != len(results) || len(results) != 20 {
		t.Fatalf("%d results, %d failed: %q", len(results), len(failed), failed)
	}
	if !strings.Contains(results[0].Got, "cannot start") || !strings.Contains(results[1].Got, "did not start (see discover)") {
		t.Errorf("discover: %+v\ninitialize: %+v", results[0], results[1])
	}
}

// A server of the older revisions only fails discover, saying which
// revision it speaks and what to do, and every other check runs on the
// session it negotiated, and passes.
func TestOlderServer(t *testing.T) {
	failed, results := runChecks(t, fakeOptions(t, "no-discover"))
	if len(results) != 20 || !slices.Equal(failed, []string{"discover"}) {
		t.Fatalf("%d results, failed %q", len(results), failed)
	}
	d := results[0]
	if d.Name != "discover" || !strings.Contains(d.Got, "2025-11-25") || !strings.Contains(d.Got, "server/discover") ||
		!strings.Contains(d.Hint, "not 2026-07-28") || !strings.Contains(d.Hint, "update pybox") || !strings.Contains(d.Hint, "--server") {
		t.Errorf("%+v", d)
	}
	if tl := results[2]; tl.Name != "tools-list" || !strings.Contains(tl.Detail, "no ttlMs under MCP 2025-11-25") {
		t.Errorf("%+v", tl)
	}
}

func TestSchemaProblems(t *testing.T) {
	o := Options{Images: []string{"stdlib", "data"}, MaxTimeout: 30}
	var schema map[string]any
	json.Unmarshal([]byte(`{"additionalProperties":false,"properties":{
		"timeout_s":{"maximum":30},"image":{"enum":["data","stdlib"]},
		"max_output_bytes":{"minimum":1,"maximum":8192},"files":{"maxItems":16},"code":{"maxLength":65536}}}`), &schema)
	if p := schemaProblems(schema, o); len(p) != 0 {
		t.Errorf("a matching schema: %q", p)
	}
	o.MaxTimeout, o.Images = 2, []string{"stdlib"}
	delete(schema, "additionalProperties")
	p := schemaProblems(schema, o)
	if len(p) != 3 || !strings.Contains(p[0], "additionalProperties is missing") || !strings.Contains(p[1], "maximum is 30") {
		t.Errorf("%q", p)
	}
}

func TestJSONDiff(t *testing.T) {
	var a, b map[string]any
	json.Unmarshal([]byte(`{"x":{"max":2,"enum":["a"]},"only_a":1,"same":true}`), &a)
	json.Unmarshal([]byte(`{"x":{"max":1,"enum":["a"]},"only_b":null,"same":true}`), &b)
	got := jsonDiff("", a, b)
	want := []string{"only_a: 1, (none)", "x.max: 2, 1", "only_b: (none), null"}
	if !slices.Equal(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
	if d := jsonDiff("", a, a); d != nil {
		t.Errorf("a value and itself: %q", d)
	}
}

func TestTapHoldsBackWhatTheClientCannotTake(t *testing.T) {
	tp := newTap()
	w := &tapWriter{t: tp, w: nopWriteCloser{}}
	w.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}` + "\n"))
	w.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}` + "\n"))
	w.Write([]byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n"))
	for _, line := range []string{
		"a debug line",
		`{"jsonrpc":"2.0","id":999,"result":{}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":2.0,"result":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`,
	} {
		tp.fromServer([]byte(line), false)
	}
	snap := tp.snapshot()
	if len(snap.stray) != 1 || len(snap.got) != 4 || !snap.got[0].Unasked || !snap.got[1].Late || snap.got[2].ID != "2" {
		t.Fatalf("%+v", snap)
	}
	tp.eof = true
	var got bytes.Buffer
	got.ReadFrom(tp)
	want := `{"jsonrpc":"2.0","id":2.0,"result":{}}` + "\n" + `{"jsonrpc":"2.0","method":"notifications/message","params":{}}` + "\n"
	if got.String() != want {
		t.Errorf("the client read %q", got.String())
	}
}

type nopWriteCloser struct{}

func (nopWriteCloser) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriteCloser) Close() error                { return nil }

func TestPrinter(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{W: &b}
	p.Print(Result{Name: "busy", Pass: true, Detail: "d"})
	p.Print(Result{Name: "cancel", Expected: "e", Got: "g", Hint: "h"})
	want := "PASS busy\nFAIL cancel               expected: e; got: g; hint: h\n"
	if b.String() != want {
		t.Errorf("%q", b.String())
	}
	b.Reset()
	p.JSON = true
	p.Print(Result{Name: "busy", Pass: true, MS: 3})
	if b.String() != `{"name":"busy","pass":true,"ms":3}`+"\n" {
		t.Errorf("%q", b.String())
	}
}
