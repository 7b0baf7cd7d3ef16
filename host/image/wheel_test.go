package image

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// testWheel describes a wheel for makeWheel.
type testWheel struct {
	file   string            // file name, e.g. hello-1.0-py3-none-any.whl
	files  map[string]string // member name → content (RECORD is added)
	tamper string            // a member whose RECORD hash is made wrong
	skip   string            // a member left out of RECORD
	mode   map[string]os.FileMode
}

// helloWheel is a tiny pure-Python distribution: a module, a script in
// .data/scripts and a console script.
func helloWheel() testWheel {
	di := "hello_pybox-1.0.dist-info/"
	return testWheel{
		file: "hello_pybox-1.0-py3-none-any.whl",
		files: map[string]string{
			"hello_pybox/__init__.py":                "def greet():\n    return 'hello from a wheel'\n\ndef main():\n    print(greet())\n",
			"hello_pybox-1.0.data/scripts/hello-raw": "#!python\nprint('raw')\n",
			di + "METADATA":                          "Metadata-Version: 2.1\nName: hello-pybox\nVersion: 1.0\n",
			di + "WHEEL":                             "Wheel-Version: 1.0\nGenerator: pybox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
			di + "entry_points.txt":                  "[console_scripts]\nhello-pybox = hello_pybox:main\n",
			di + "top_level.txt":                     "hello_pybox\n",
		},
	}
}

// makeWheel writes the wheel into dir with a RECORD, deterministically
// (fixed times, sorted members), and returns its path.
func makeWheel(t testing.TB, dir string, w testWheel) string {
	t.Helper()
	p := filepath.Join(dir, w.file)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	var names []string
	distInfo := ""
	for n := range w.files {
		names = append(names, n)
		if d, _, ok := strings.Cut(n, "/"); ok && strings.HasSuffix(d, ".dist-info") {
			distInfo = d
		}
	}
	sort.Strings(names)
	var record strings.Builder
	for _, n := range names {
		content := w.files[n]
		sum := sha256.Sum256([]byte(content))
		if n == w.tamper {
			sum[0] ^= 0xff
		}
		if n != w.skip {
			fmt.Fprintf(&record, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(sum[:]), len(content))
		}
		writeMember(t, zw, n, content, w.mode[n])
	}
	if distInfo != "" {
		fmt.Fprintf(&record, "%s/RECORD,,\n", distInfo)
		writeMember(t, zw, distInfo+"/RECORD", record.String(), 0)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeMember(t testing.TB, zw *zip.Writer, name, content string, mode os.FileMode) {
	t.Helper()
	h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
	if mode == 0 {
		mode = 0o644
	}
	h.SetMode(mode)
	fw, err := zw.CreateHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
}

func TestWheelInstall(t *testing.T) {
	p := makeWheel(t, t.TempDir(), helloWheel())
	tree := t.TempDir()
	root, err := os.OpenRoot(tree)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	w, err := openWheel(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := localScheme("3.11")
	if err := w.install(root, s); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(tree, "usr/local/lib/python3.11/dist-packages")
	want := map[string]string{
		filepath.Join(site, "hello_pybox/__init__.py"):                    "hello from a wheel",
		filepath.Join(site, "hello_pybox-1.0.dist-info/INSTALLER"):        "pybox",
		filepath.Join(site, "hello_pybox-1.0.dist-info/METADATA"):         "Name: hello-pybox",
		filepath.Join(tree, "usr/local/bin/hello-raw"):                    "#!/usr/bin/python3\nprint('raw')",
		filepath.Join(tree, "usr/local/bin/hello-pybox"):                  "from hello_pybox import main",
		filepath.Join(site, "hello_pybox-1.0.dist-info/entry_points.txt"): "console_scripts",
	}
	for f, s := range want {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Errorf("missing %s: %v", f, err)
			continue
		}
		if !strings.Contains(string(b), s) {
			t.Errorf("%s = %q, want it to contain %q", f, b, s)
		}
	}
	for _, f := range []string{"usr/local/bin/hello-raw", "usr/local/bin/hello-pybox"} {
		fi, err := os.Stat(filepath.Join(tree, f))
		if err == nil && fi.Mode().Perm() != 0o755 {
			t.Errorf("%s has mode %v, want 0755", f, fi.Mode().Perm())
		}
	}
	if _, err := os.Stat(filepath.Join(site, "hello_pybox-1.0.data")); err == nil {
		t.Error("the .data directory was installed as a package")
	}
	// Installing the same wheel again claims the same files.
	if err := w.install(root, s); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second install: %v, want an 'already exists' error", err)
	}
}

func TestWheelRefused(t *testing.T) {
	cases := []struct {
		name   string
		change func(*testWheel)
		want   string
	}{
		{"platform tag", func(w *testWheel) { w.file = "hello_pybox-1.0-cp311-cp311-manylinux_2_17_x86_64.whl" }, "not a pure-Python wheel"},
		{"not purelib", func(w *testWheel) {
			w.files["hello_pybox-1.0.dist-info/WHEEL"] = "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n"
		}, "Root-Is-Purelib"},
		{"compiled code", func(w *testWheel) { w.files["hello_pybox/_speed.so"] = "\x7fELF" }, "compiled code"},
		{"path escape", func(w *testWheel) { w.files["../evil.py"] = "x = 1\n" }, "member"},
		{"absolute path", func(w *testWheel) { w.files["/etc/evil"] = "x" }, "not a relative path"},
		{"tampered", func(w *testWheel) { w.tamper = "hello_pybox/__init__.py" }, "does not match its RECORD"},
		{"not recorded", func(w *testWheel) { w.skip = "hello_pybox/__init__.py" }, "not in RECORD"},
		{"symlink", func(w *testWheel) {
			w.files["hello_pybox/link"] = "/etc/passwd"
			w.mode = map[string]os.FileMode{"hello_pybox/link": os.ModeSymlink | 0o777}
		}, "not a file"},
		{"bad name", func(w *testWheel) { w.file = "hello.zip" }, "not a wheel file name"},
		{"bad entry point", func(w *testWheel) {
			w.files["hello_pybox-1.0.dist-info/entry_points.txt"] = "[console_scripts]\nx = os; import os:system\n"
		}, "entry point"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := helloWheel()
			c.change(&w)
			p := makeWheel(t, t.TempDir(), w)
			wh, err := openWheel(p)
			if err == nil {
				root, rerr := os.OpenRoot(t.TempDir())
				if rerr != nil {
					t.Fatal(rerr)
				}
				err = wh.install(root, localScheme("3.11"))
				root.Close()
				wh.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestUserRecipeWheel(t *testing.T) {
	dir := t.TempDir()
	p := makeWheel(t, dir, helloWheel())
	r, err := UserRecipe("tools", "", "", []string{"python3-tabulate"}, []string{p}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.From != "stdlib" || len(r.Wheels) != 1 || r.Wheels[0].File != filepath.Base(p) || len(r.Wheels[0].SHA256) != 64 {
		t.Errorf("recipe = %+v", r)
	}
	bad := helloWheel()
	bad.file = "hello_pybox-1.0-cp311-cp311-linux_x86_64.whl"
	if _, err := UserRecipe("tools", "", "", nil, []string{makeWheel(t, dir, bad)}, nil, nil); err == nil {
		t.Error("a platform wheel was accepted")
	}
}
