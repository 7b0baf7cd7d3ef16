package image

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pybox/shared/archs"
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
			if len(r.Strip.Packages)+len(r.Strip.PerArch) > 0 && r.Strip.Why == "" {
				t.Errorf("%s/%s strips packages without saying why", suite, name)
			}
			// Every built-in recipe builds for every architecture, and
			// names only architectures there are.
			for _, a := range archs.All {
				if _, err := r.Strip.For(a); err != nil {
					t.Errorf("%s/%s for %s: %v", suite, name, a, err)
				}
			}
			for a := range r.Strip.PerArch {
				if err := CheckArch(a); err != nil {
					t.Errorf("%s/%s: strip per_arch: %v", suite, name, err)
				}
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
	k := key(t, base(), archs.X86_64, digest, sources)
	if len(k) != 64 {
		t.Fatalf("key %q is not a sha256", k)
	}
	if key(t, base(), archs.X86_64, digest, sources) != k {
		t.Error("the same recipe gave two keys")
	}
	reordered := base()
	reordered.Apt = []string{"python3-yaml", "python3-tabulate", "python3-yaml"}
	if key(t, reordered, archs.X86_64, digest, sources) != k {
		t.Error("the apt list's order or a repeat changed the key")
	}
	summary := base()
	summary.Summary = "words"
	if key(t, summary, archs.X86_64, digest, sources) != k {
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
		if key(t, r, archs.X86_64, d, s) == k {
			t.Errorf("changing the %s kept the key", what)
		}
	}
	wheelA := base()
	wheelA.Wheels = []Wheel{{File: "a.whl", SHA256: "1", Path: "/one/a.whl"}}
	wheelB := base()
	wheelB.Wheels = []Wheel{{File: "a.whl", SHA256: "1", Path: "/two/a.whl"}}
	if key(t, wheelA, archs.X86_64, digest, sources) != key(t, wheelB, archs.X86_64, digest, sources) {
		t.Error("where a wheel lies changed the key; only its content should")
	}
}

// A strip list's per-architecture names join its common ones for the
// architecture built; a list that leaves out the architecture built
// fails, as a name that matches nothing does.
func TestStripPerArch(t *testing.T) {
	s := Strip{Why: "test", Packages: []string{"gcc", "binutils"},
		PerArch: map[string][]string{archs.X86_64: {"binutils-x86-64-linux-gnu"}, archs.Arm64: {"libhwasan0", "binutils-aarch64-linux-gnu", "gcc"}}}
	for arch, want := range map[string][]string{
		archs.X86_64: {"binutils", "binutils-x86-64-linux-gnu", "gcc"},
		archs.Arm64:  {"binutils", "binutils-aarch64-linux-gnu", "gcc", "libhwasan0"},
	} {
		if got, err := s.For(arch); err != nil || !slices.Equal(got, want) {
			t.Errorf("For(%s) = %v, %v; want %v", arch, got, err, want)
		}
	}
	// An architecture the list does not name: a clear error, not a
	// build that leaves that architecture's packages in.
	s.PerArch = map[string][]string{archs.X86_64: {"binutils-x86-64-linux-gnu"}}
	_, err := s.For(archs.Arm64)
	if err == nil || !strings.Contains(err.Error(), "for x86_64 but not for arm64") || !strings.Contains(err.Error(), `add an "arm64" list`) {
		t.Errorf("For(arm64) without an arm64 list: %v", err)
	}
	// An empty list says the architecture strips nothing of its own.
	s.PerArch[archs.Arm64] = []string{}
	if got, err := s.For(archs.Arm64); err != nil || !slices.Equal(got, []string{"binutils", "gcc"}) {
		t.Errorf("For(arm64) with an empty list: %v, %v", got, err)
	}
	// Without per_arch the list is the same on every architecture.
	plain := Strip{Packages: []string{"perl", "usrmerge"}}
	if got, err := plain.For(archs.Arm64); err != nil || !slices.Equal(got, []string{"perl", "usrmerge"}) {
		t.Errorf("For(arm64) of a plain list: %v, %v", got, err)
	}

	// The names and architectures are checked like any recipe field.
	for _, bad := range []map[string][]string{{"arm64": {"--force-all"}}, {"../x": {"gcc"}}, {"ARM": {"gcc"}}} {
		r := &Recipe{Name: "stdlib", Strip: Strip{PerArch: bad}}
		if err := r.Validate(); err == nil {
			t.Errorf("per_arch %v was accepted", bad)
		}
	}

	// The key follows the architecture's list; it fails with For.
	r := &Recipe{Name: "data", From: "stdlib", Strip: s}
	kx, ka := key(t, r, archs.X86_64, "d", "s"), key(t, r, archs.Arm64, "d", "s")
	if kx == ka {
		t.Error("two architectures gave one key")
	}
	r.Strip.PerArch[archs.Arm64] = []string{"libhwasan0"}
	if key(t, r, archs.Arm64, "d", "s") == ka || key(t, r, archs.X86_64, "d", "s") != kx {
		t.Error("arm64's strip list changed x86_64's key, or not arm64's")
	}
	delete(r.Strip.PerArch, archs.Arm64)
	if _, err := r.Key(archs.Arm64, "d", "s"); err == nil {
		t.Error("a key for an architecture the strip list leaves out")
	}
}

// x86_64's keys are those of the images built before images had an
// architecture, so those stay cache hits: the same as a recipe whose
// strip list is all common names.
func TestRecipeKeyX86Unchanged(t *testing.T) {
	common := &Recipe{Name: "data", From: "stdlib", Strip: Strip{Packages: []string{"gcc", "binutils-x86-64-linux-gnu"}}}
	perArch := &Recipe{Name: "data", From: "stdlib", Strip: Strip{Packages: []string{"gcc"},
		PerArch: map[string][]string{archs.X86_64: {"binutils-x86-64-linux-gnu"}, archs.Arm64: {"binutils-aarch64-linux-gnu"}}}}
	if key(t, common, archs.X86_64, "d", "s") != key(t, perArch, archs.X86_64, "d", "s") {
		t.Error("moving a name into per_arch changed x86_64's key")
	}
	in := keyInput{Name: "x"}
	if b, _ := json.Marshal(in); strings.Contains(string(b), `"arch"`) {
		t.Errorf("an x86_64 key input names its architecture: %s", b)
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
	if key(t, a, archs.X86_64, "d", "s") == key(t, b, archs.X86_64, "d", "s") {
		t.Error("the preload list is not part of the key")
	}
}

// key is r.Key, failing the test on an error.
func key(t *testing.T, r *Recipe, arch, baseDigest, sources string) string {
	t.Helper()
	k, err := r.Key(arch, baseDigest, sources)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
