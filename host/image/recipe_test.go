package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuiltInRecipes(t *testing.T) {
	for _, name := range BuiltInNames {
		r, ok := BuiltIn(name)
		if !ok {
			t.Fatalf("no built-in recipe %s", name)
		}
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if r.Name != name || len(r.Apt) == 0 || len(r.Check) == 0 || len(r.Main) == 0 {
			t.Errorf("%s: incomplete recipe %+v", name, r)
		}
		if len(r.Strip.Packages) > 0 && r.Strip.Why == "" {
			t.Errorf("%s strips packages without saying why", name)
		}
	}
	stdlib, _ := BuiltIn("stdlib")
	data, _ := BuiltIn("data")
	if stdlib.From != "" || stdlib.SourceDateEpoch == 0 {
		t.Errorf("stdlib must be bootstrapped with a fixed SOURCE_DATE_EPOCH: %+v", stdlib)
	}
	if data.From != "stdlib" {
		t.Errorf("data must start from stdlib, not %q", data.From)
	}
	if _, ok := BuiltIn("tools"); ok {
		t.Error("tools is not built in")
	}
}

func TestImageNames(t *testing.T) {
	for _, bad := range []string{"", "../stdlib", "a/b", "Tools", ".hidden", "-x", "1abc", "tools ", "tools\n", "tööls", strings.Repeat("a", 65)} {
		if _, err := UserRecipe(bad, "", nil, nil, nil); err == nil {
			t.Errorf("name %q was accepted", bad)
		}
	}
	for _, bad := range []string{"../data", "a/b", ""} {
		if bad == "" {
			continue // empty --from means stdlib
		}
		if _, err := UserRecipe("tools", bad, nil, nil, nil); err == nil {
			t.Errorf("--from %q was accepted", bad)
		}
	}
	if _, err := UserRecipe("tools", "tools", nil, nil, nil); err == nil {
		t.Error("an image built from itself was accepted")
	}
	for _, name := range BuiltInNames {
		if _, err := UserRecipe(name, "", []string{"python3-tabulate"}, nil, nil); err == nil {
			t.Errorf("a user image named %s was accepted", name)
		}
	}
	for _, good := range []string{"tools", "my_tools-2", "x"} {
		if _, err := UserRecipe(good, "data", nil, nil, nil); err != nil {
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
