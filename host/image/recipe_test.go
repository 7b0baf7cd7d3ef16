package image

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBuiltInRecipes(t *testing.T) {
	for _, suite := range Suites {
		for _, name := range BuiltInNames {
			r, ok := BuiltIn(name, suite)
			if !ok {
				t.Fatalf("no built-in recipe %s for %s", name, suite)
			}
			if err := r.Validate(); err != nil {
				t.Errorf("%s/%s: %v", suite, name, err)
			}
			if r.Name != name || r.Suite != suite || len(r.Apt) == 0 || len(r.Check) == 0 || len(r.Main) == 0 {
				t.Errorf("%s/%s: incomplete recipe %+v", suite, name, r)
			}
			if len(r.Strip.Packages) > 0 && r.Strip.Why == "" {
				t.Errorf("%s/%s strips packages without saying why", suite, name)
			}
		}
		stdlib, _ := BuiltIn("stdlib", suite)
		data, _ := BuiltIn("data", suite)
		if stdlib.From != "" || stdlib.SourceDateEpoch == 0 {
			t.Errorf("%s: stdlib must be bootstrapped with a fixed SOURCE_DATE_EPOCH: %+v", suite, stdlib)
		}
		if data.From != "stdlib" {
			t.Errorf("%s: data must start from stdlib, not %q", suite, data.From)
		}
		// The build checks the versions the README promises.
		checks := strings.Join(data.Check, "\n")
		for _, mod := range []string{"numpy", "pandas", "matplotlib"} {
			if !strings.Contains(checks, "assert "+mod+".__version__.split('.')[0] == ") {
				t.Errorf("%s: data does not check %s's major version", suite, mod)
			}
		}
		if !strings.Contains(strings.Join(stdlib.Check, "\n"), "sys.version_info[:2] == ") {
			t.Errorf("%s: stdlib does not check Python's version", suite)
		}
	}
	if r, ok := BuiltIn("stdlib", ""); !ok || r.Suite != DefaultSuite {
		t.Errorf("BuiltIn(stdlib, \"\") = %+v, want the %s recipe", r, DefaultSuite)
	}
	if _, ok := BuiltIn("tools", ""); ok {
		t.Error("tools is not built in")
	}
	if _, ok := BuiltIn("stdlib", "sid"); ok {
		t.Error("a built-in recipe for sid")
	}
}

func TestImageNames(t *testing.T) {
	for _, bad := range []string{"", "../stdlib", "a/b", "Tools", ".hidden", "-x", "1abc", "tools ", "tools\n", "tööls", strings.Repeat("a", 65)} {
		if _, err := UserRecipe(bad, "", "", nil, nil, nil, nil); err == nil {
			t.Errorf("name %q was accepted", bad)
		}
	}
	for _, bad := range []string{"../data", "a/b", ""} {
		if bad == "" {
			continue // empty --from means stdlib
		}
		if _, err := UserRecipe("tools", bad, "", nil, nil, nil, nil); err == nil {
			t.Errorf("--from %q was accepted", bad)
		}
	}
	if _, err := UserRecipe("tools", "tools", "", nil, nil, nil, nil); err == nil {
		t.Error("an image built from itself was accepted")
	}
	for _, name := range BuiltInNames {
		if _, err := UserRecipe(name, "", "", []string{"python3-tabulate"}, nil, nil, nil); err == nil {
			t.Errorf("a user image named %s was accepted", name)
		}
	}
	for _, good := range []string{"tools", "my_tools-2", "x"} {
		if _, err := UserRecipe(good, "data", "", nil, nil, nil, nil); err != nil {
			t.Errorf("name %q: %v", good, err)
		}
	}
}

func TestAptNames(t *testing.T) {
	for _, good := range []string{"python3-tabulate", "libc6", "g++-12", "python3-numpy=1:1.24.2-1"} {
		if err := CheckAptName(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{"", "-o", "--yes", "Python3", "a", "x;rm -rf /", "$(id)", "pkg/bookworm", "?essential", "p q"} {
		if err := CheckAptName(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func TestCheckDest(t *testing.T) {
	for _, good := range []string{"/opt/tools", "/usr/local/lib/python3.11/dist-packages/x.py", "/etc/pybox.conf"} {
		if err := CheckDest(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{"", "opt/x", "/", "/opt/../etc", "/opt/./x", "/opt//x", "/opt/x/", "/tmp/x", "/tmp", "/proc/x", "/dev/x", "/run/x", "/sys", "/opt/x\x00"} {
		if err := CheckDest(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func TestRecipeKey(t *testing.T) {
	base := func() *Recipe {
		return &Recipe{Name: "tools", From: "data", Apt: []string{"python3-tabulate", "python3-yaml"}, SourceDateEpoch: 1}
	}
	const digest, sources = "aa", "bb"
	k := base().Key(digest, sources)
	if len(k) != 64 {
		t.Fatalf("key %q is not a sha256", k)
	}
	if base().Key(digest, sources) != k {
		t.Error("the same recipe gave two keys")
	}
	reordered := base()
	reordered.Apt = []string{"python3-yaml", "python3-tabulate", "python3-yaml"}
	if reordered.Key(digest, sources) != k {
		t.Error("the apt list's order or a repeat changed the key")
	}
	summary := base()
	summary.Summary = "words"
	if summary.Key(digest, sources) != k {
		t.Error("the summary changed the key")
	}
	changes := map[string]func(*Recipe) (string, string){
		"apt list":    func(r *Recipe) (string, string) { r.Apt = append(r.Apt, "python3-toml"); return digest, sources },
		"base digest": func(r *Recipe) (string, string) { return "cc", sources },
		"apt sources": func(r *Recipe) (string, string) { return digest, "dd" },
		"wheel": func(r *Recipe) (string, string) {
			r.Wheels = []Wheel{{File: "a.whl", SHA256: "1"}}
			return digest, sources
		},
		"added file": func(r *Recipe) (string, string) {
			r.Adds = []Add{{Dest: "/opt/a", SHA256: "1"}}
			return digest, sources
		},
		"strip list": func(r *Recipe) (string, string) { r.Strip.Packages = []string{"gcc"}; return digest, sources },
		"epoch":      func(r *Recipe) (string, string) { r.SourceDateEpoch = 2; return digest, sources },
		"check":      func(r *Recipe) (string, string) { r.Check = []string{"import x"}; return digest, sources },
		"image name": func(r *Recipe) (string, string) { r.Name = "tools2"; return digest, sources },
		"suite":      func(r *Recipe) (string, string) { r.Suite = "bookworm"; return digest, sources },
	}
	for what, change := range changes {
		r := base()
		d, s := change(r)
		if r.Key(d, s) == k {
			t.Errorf("changing the %s kept the key", what)
		}
	}
	wheelA := base()
	wheelA.Wheels = []Wheel{{File: "a.whl", SHA256: "1", Path: "/one/a.whl"}}
	wheelB := base()
	wheelB.Wheels = []Wheel{{File: "a.whl", SHA256: "1", Path: "/two/a.whl"}}
	if wheelA.Key(digest, sources) != wheelB.Key(digest, sources) {
		t.Error("where a wheel lies changed the key; only its content should")
	}
}

func TestParseAdd(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "lib/sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "lib/a.py"), []byte("a = 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "lib/sub/b.txt"), []byte("b\n"), 0o644)
	a, err := ParseAdd(filepath.Join(dir, "lib") + ":/opt/lib")
	if err != nil {
		t.Fatal(err)
	}
	if a.Dest != "/opt/lib" || len(a.SHA256) != 64 {
		t.Errorf("add = %+v", a)
	}
	os.WriteFile(filepath.Join(dir, "lib/sub/b.txt"), []byte("changed\n"), 0o644)
	b, err := ParseAdd(filepath.Join(dir, "lib") + ":/opt/lib")
	if err != nil {
		t.Fatal(err)
	}
	if a.SHA256 == b.SHA256 {
		t.Error("changing a file did not change the hash")
	}
	for _, bad := range []string{"nocolon", ":/opt/x", filepath.Join(dir, "lib") + ":relative", filepath.Join(dir, "missing") + ":/opt/x", filepath.Join(dir, "lib") + ":/tmp/x"} {
		if _, err := ParseAdd(bad); err == nil {
			t.Errorf("--add %q was accepted", bad)
		}
	}
}

func TestUpstreamVersion(t *testing.T) {
	for in, want := range map[string]string{
		"1:1.24.2-3": "1.24.2", "1.5.3+dfsg-2": "1.5.3", "3.11.2-1+b1": "3.11.2", "6.4": "6.4",
		"0.8.9-1": "0.8.9", "2026f-0+deb12u1": "2026f", "1.0+ds1-2": "1.0",
	} {
		if got := UpstreamVersion(in); got != want {
			t.Errorf("UpstreamVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAptSources(t *testing.T) {
	got := aptSources("trixie", DefaultMirror)
	want := `Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`
	if got != want {
		t.Errorf("aptSources =\n%s\nwant\n%s", got, want)
	}
	if aptSources("bookworm", DefaultMirror) == got || aptSources("trixie", "http://mirror.example/debian") == got {
		t.Error("the suite or the mirror did not change the sources")
	}
}

func TestCheckMirror(t *testing.T) {
	for _, good := range []string{DefaultMirror, "https://mirror.example.org/debian", "http://127.0.0.1:3142/debian"} {
		if err := CheckMirror(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{"", "deb.debian.org/debian", "ftp://x/debian", "http:///debian", "http://x/debian/",
		"http://x/debian\nSuites: sid", "http://x/de bian", "http://x/debian?a=b", "file:///srv/debian"} {
		if err := CheckMirror(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func TestCheckSuite(t *testing.T) {
	for _, s := range Suites {
		if err := CheckSuite(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, bad := range []string{"", "sid", "Trixie", "trixie-security", "bullseye"} {
		if err := CheckSuite(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	if _, err := UserRecipe("tools", "data", "sid", nil, nil, nil, nil); err == nil {
		t.Error("a user image from sid was accepted")
	}
}

// apt's own words for a missing package or key become errors a person
// can act on (see build.mmdebstrap).
func TestAptCounterFindsFailures(t *testing.T) {
	c := &aptCounter{}
	for _, l := range []string{
		"E: Unable to locate package python3-nosuch",
		"W: GPG error: http://deb.debian.org/debian trixie InRelease: The following signatures couldn't be verified because the public key is not available: NO_PUBKEY 762F67A0B2C39DE4 NO_PUBKEY 225629DF75B188BD",
		"W: GPG error: http://deb.debian.org/debian-security trixie-security InRelease: NO_PUBKEY 762F67A0B2C39DE4",
	} {
		c.line(l)
	}
	if !slices.Equal(c.notFound, []string{"python3-nosuch"}) || !slices.Equal(c.noKey, []string{"762F67A0B2C39DE4"}) {
		t.Errorf("not found %v, no key %v", c.notFound, c.noKey)
	}
}

func TestPreloadNames(t *testing.T) {
	if _, err := UserRecipe("tools", "data", "", nil, nil, nil, []string{"pandas", "matplotlib.pyplot", "_csv"}); err != nil {
		t.Errorf("good names refused: %v", err)
	}
	for _, bad := range []string{"", "os; import x", "a..b", "1abc", "a-b", ".x", "x."} {
		if _, err := UserRecipe("tools", "data", "", nil, nil, nil, []string{bad}); err == nil {
			t.Errorf("preload %q accepted", bad)
		}
	}
	a, _ := UserRecipe("tools", "data", "", nil, nil, nil, nil)
	b, _ := UserRecipe("tools", "data", "", nil, nil, nil, []string{"pandas"})
	if a.Key("d", "s") == b.Key("d", "s") {
		t.Error("the preload list is not part of the key")
	}
}
