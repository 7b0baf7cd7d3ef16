package image

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"pybox/host/jail"
)

// The test binary is its own build jail helper: run with jailHelperEnv
// set, it is `pybox vm _jail`.
const jailHelperEnv = "PYBOX_IMAGE_TEST_JAIL_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(jailHelperEnv) == "1" {
		os.Exit(jail.Main())
	}
	os.Exit(m.Run())
}

// testJailHelper makes b's build jail run through this test binary.
func testJailHelper(t testing.TB, b *Builder) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b.JailHelper, b.JailHelperEnv = []string{exe}, []string{jailHelperEnv + "=1"}
}

// What pip is given is checked before anything runs, and says what to do.
func TestAddPipRefuses(t *testing.T) {
	dir := t.TempDir()
	n := 0
	req := func(text string) string {
		n++
		p := filepath.Join(dir, strconv.Itoa(n), "requirements.txt")
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		in   PipInput
		want string
	}{
		{"an option as a requirement", PipInput{Specs: []string{"--index-url=http://x"}}, "not an option"},
		{"an empty requirement", PipInput{Specs: []string{" "}}, "empty requirement"},
		{"two lines in one flag", PipInput{Specs: []string{"a\nb"}}, "one requirement per flag"},
		{"an index in the file", PipInput{RequirementFiles: []string{req("polars\n--index-url http://evil/simple\n")}}, "line 2"},
		{"another file from the file", PipInput{RequirementFiles: []string{req("-r other.txt\n")}}, "-r"},
		{"an editable install", PipInput{RequirementFiles: []string{req("-e ./src\n")}}, "-e"},
		{"a file that is not there", PipInput{RequirementFiles: []string{filepath.Join(dir, "none.txt")}}, "no such file"},
		{"an index but nothing to install", PipInput{Index: PipIndex{URL: "https://pypi.example.com/simple"}}, "give one of those too"},
		{"an index that is not a URL", PipInput{Specs: []string{"a"}, Index: PipIndex{URL: "pypi.example.com"}}, "http:// or https://"},
		{"no index and no links", PipInput{Specs: []string{"a"}, Index: PipIndex{NoIndex: true}}, "needs --find-links"},
		{"no index and an index", PipInput{Specs: []string{"a"}, Index: PipIndex{NoIndex: true, URL: "https://x/simple", FindLinks: []string{dir}}}, "pick one"},
		{"links that are not a directory", PipInput{Specs: []string{"a"}, Index: PipIndex{FindLinks: []string{filepath.Join(dir, "nowhere")}}}, "not a directory"},
	} {
		r := &Recipe{Name: "mine", From: "stdlib"}
		err := r.AddPip(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	r := &Recipe{Name: "mine", From: "stdlib"}
	if err := r.AddPip(PipInput{Specs: []string{"polars", "duckdb>=1.1; python_version >= '3.10'"}, RequirementFiles: []string{req("# pinned\nnumpy==2.2.4 --hash=sha256:0123\n")},
		Index: PipIndex{FindLinks: []string{"."}}}); err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(r.Index.FindLinks[0]) || len(r.Requirements) != 1 || r.Requirements[0].File != "requirements.txt" {
		t.Errorf("recipe: %+v, index %+v", r, r.Index)
	}
}

// The requirements, their files' lines and where they come from are in
// the recipe's key: a change of any is another image.
func TestPipInKey(t *testing.T) {
	base := Recipe{Name: "mine", From: "stdlib", Suite: "trixie"}
	key := func(r Recipe) string {
		k, err := r.Key("x86_64", "digest", "sources")
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	plain := key(base)
	with := base
	with.Pip, with.Index = []string{"polars"}, &PipIndex{}
	other := with
	other.Index = &PipIndex{URL: "https://mirror.example/simple"}
	file := with
	file.Requirements = []Requirements{{File: "r.txt", Text: "duckdb\n"}}
	seen := map[string]string{plain: "none"}
	for name, r := range map[string]Recipe{"pip": with, "another index": other, "a requirements file": file} {
		k := key(r)
		if prev, ok := seen[k]; ok {
			t.Errorf("%s has the key of %s", name, prev)
		}
		seen[k] = name
	}
}

// Which of the recipe's sources a file came from, with no credentials.
func TestPipSource(t *testing.T) {
	ix := &PipIndex{URL: "https://user:secret@pkgs.example.com/simple/", Extra: []string{"https://extra.example.org/simple/"}, FindLinks: []string{"/home/me/wheels"}}
	for url, want := range map[string]string{
		"https://pkgs.example.com/files/a-1.0-py3-none-any.whl": "https://pkgs.example.com/simple/",
		"https://extra.example.org/b/b-2.0-py3-none-any.whl":    "https://extra.example.org/simple/",
		"file://" + pipDir + "/links/0/c-1.0-py3-none-any.whl":  "/home/me/wheels",
		"https://cdn.example.net/d-1.0-py3-none-any.whl":        "https://pkgs.example.com/simple/ or https://extra.example.org/simple/",
	} {
		if got := ix.source(url); got != want {
			t.Errorf("source(%s) = %q, want %q", url, got, want)
		}
	}
	if got := ix.hostURL("file://" + pipDir + "/links/0/c-1.0-py3-none-any.whl"); got != "file:///home/me/wheels/c-1.0-py3-none-any.whl" {
		t.Errorf("a --find-links file's URL here: %q", got)
	}
	if got := (&PipIndex{}).source("https://files.pythonhosted.org/packages/x.whl"); got != pypi {
		t.Errorf("a file of PyPI's: %q", got)
	}
	if got := redact("https://user:secret@pkgs.example.com/a.whl"); strings.Contains(got, "secret") {
		t.Errorf("redact kept the password: %s", got)
	}
}

// pip's failures become what to do: the package with source
// distributions only, named; the index that cannot be reached; else
// pip's own ERROR lines, without the traceback -vv adds.
func TestExplainPip(t *testing.T) {
	bd := &build{r: &Recipe{Index: &PipIndex{URL: "http://127.0.0.1:1/simple/"}}, pyver: "3.13.5", arch: "x86_64"}
	fail := &exitError{cmd: "python3", err: errors.New("exit status 1")}
	for _, c := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"source only", []string{
			"  Skipping link: No sources permitted for pbxsrc: http://127.0.0.1:8765/pbxsrc/pbxsrc-1.0.tar.gz (from http://127.0.0.1:8765/pbxsrc/)",
			"ERROR: Could not find a version that satisfies the requirement pbxsrc (from versions: none)",
			"Traceback (most recent call last):", `  File "x.py", line 1`,
		}, []string{"pbxsrc has only source distributions there (pbxsrc-1.0.tar.gz)", "--find-links", "ERROR: Could not find"}},
		{"unreachable", []string{
			"WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError('<obj>: Failed to establish a new connection: [Errno 111] Connection refused')': /pbxa/",
			"ERROR: No matching distribution found for pbxa",
		}, []string{"could not reach the index (index http://127.0.0.1:1/simple/)", "[Errno 111] Connection refused", "http_proxy"}},
		{"wrong tags", []string{
			"  Skipping link: none of the wheel's tags (cp312-cp312-win_amd64) are compatible (run pip debug --verbose to show compatible tags): http://x/w/w-1.0-cp312-cp312-win_amd64.whl (from http://x/w/)",
			"ERROR: Could not find a version that satisfies the requirement w (from versions: none)",
		}, []string{"no wheel of w for this image's Python 3.13.5 on x86_64", "w-1.0-cp312-cp312-win_amd64.whl"}},
		{"a hash", []string{
			"ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.",
			"    pbxb==2.0 from http://x/pbxb-2.0-py3-none-any.whl:",
			"        Expected sha256 0000",
			"             Got        7045",
			"Traceback (most recent call last):",
		}, []string{"DO NOT MATCH THE HASHES", "Expected sha256 0000", "Got        7045"}},
	} {
		got := bd.explainPip(c.lines, fail).Error()
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q does not say %q", c.name, got, w)
			}
		}
		if strings.Contains(got, "Traceback") {
			t.Errorf("%s: the traceback is in the message: %q", c.name, got)
		}
	}
}

// A wheel's top-level modules: its top_level.txt, else its files; never
// its tests.
func TestWheelTopLevel(t *testing.T) {
	dir := t.TempDir()
	di := "pbxc-1.0.dist-info/"
	for _, c := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"pbxc/__init__.py": "", "pbxc/_pbxc.abi3.so": "elf", "tests/test_x.py": "", "_pbxc_helper.cpython-313-x86_64-linux-gnu.so": "elf",
			"single.py": "", "pbxc-hook.pth": "import pbxc", di + "top_level.txt": "\n"}, "_pbxc_helper pbxc single"},
		{map[string]string{"pbxc/__init__.py": "", "other.py": "", "pbxc.pth": "import pbxc", di + "top_level.txt": "pbxc\nother\nnot_here\npbxc.pth\n"}, "other pbxc"},
	} {
		c.files[di+"METADATA"] = "Metadata-Version: 2.1\nName: pbxc\nVersion: 1.0\n"
		c.files[di+"WHEEL"] = "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-abi3-manylinux_2_17_x86_64\n"
		p := makeWheel(t, dir, testWheel{file: "pbxc-1.0-cp311-abi3-manylinux_2_17_x86_64.whl", files: c.files})
		w, err := openAnyWheel(p, "pbxc", true)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(w.topLevel(), " "); got != c.want {
			t.Errorf("top level %q, want %q", got, c.want)
		}
		w.Close()
		if _, err := openWheel(p); err == nil {
			t.Error("--wheel took a binary wheel")
		}
		os.Remove(p)
	}
}
