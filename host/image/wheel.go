package image

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
)

// A wheel is a zip (PEP 427). Installing a pure-Python one needs no
// network and no pip: unpack it into the site directory the way pip
// would, move its .data directories to their schemes, write the console
// scripts, and mark the installer. The tree's python3 byte-compiles it
// later with the rest of the image.

// wheelFile is the name of a wheel: distribution-version(-build)?-python-abi-platform.whl.
var wheelFile = regexp.MustCompile(`^([A-Za-z0-9_.]+)-([A-Za-z0-9_.!+]+)(-[0-9][A-Za-z0-9_.]*)?-([A-Za-z0-9_.]+)-([A-Za-z0-9_.]+)-([A-Za-z0-9_.]+)\.whl$`)

// dottedName is a Python module path or attribute path.
var dottedName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// scriptName is a console script's file name.
var scriptName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]*$`)

// wheel is an opened, checked wheel.
type wheel struct {
	path     string
	what     string // how messages name it: "--wheel PATH", or the index's file name
	binary   bool   // chosen by pip for the image: any tags, compiled code
	dist     string // distribution name as in the file name
	version  string
	distInfo string // NAME-VERSION.dist-info
	zr       *zip.ReadCloser
}

// openWheel opens a wheel given with --wheel and checks it: a
// pure-Python wheel (platform "any", abi "none", Root-Is-Purelib true, no
// compiled code), with safe member names, no links, and every file
// matching its RECORD hash.
func openWheel(p string) (*wheel, error) {
	return openAnyWheel(p, "--wheel "+p, false)
}

// openAnyWheel opens a wheel and checks it as openWheel does; a binary
// one (pip chose it for the image's Python and platform) may hold
// compiled code and be tagged for them.
func openAnyWheel(p, what string, binary bool) (*wheel, error) {
	base := path.Base(p)
	m := wheelFile.FindStringSubmatch(base)
	if m == nil {
		return nil, fmt.Errorf("image: %s: not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)", what)
	}
	w := &wheel{path: p, what: what, binary: binary, dist: m[1], version: m[2]}
	if abi, plat := m[5], m[6]; !binary && (abi != "none" || plat != "any") {
		return nil, notPure(p, fmt.Sprintf("its tags say abi %s, platform %s", abi, plat))
	}
	zr, err := zip.OpenReader(p)
	if err != nil {
		return nil, fmt.Errorf("image: %s: %w", what, err)
	}
	w.zr = zr
	if err := w.check(); err != nil {
		zr.Close()
		return nil, err
	}
	return w, nil
}

func notPure(p, why string) error {
	return fmt.Errorf("image: --wheel %s is not a pure-Python wheel (%s): only …-none-any.whl wheels install without a compiler; use the distribution's package with --apt (e.g. python3-NAME) instead", p, why)
}

func (w *wheel) Close() error { return w.zr.Close() }

func (w *wheel) check() error {
	infos := map[string]bool{}
	for _, f := range w.zr.File {
		if err := checkMember(f); err != nil {
			return fmt.Errorf("image: %s: %w", w.what, err)
		}
		top, _, _ := strings.Cut(f.Name, "/")
		if strings.HasSuffix(top, ".dist-info") {
			infos[top] = true
		}
		if ext := path.Ext(f.Name); !w.binary && (ext == ".so" || ext == ".pyd" || ext == ".dylib") {
			return notPure(w.path, "it holds compiled code: "+f.Name)
		}
	}
	if len(infos) != 1 {
		return fmt.Errorf("image: %s: %d .dist-info directories; a wheel has exactly one", w.what, len(infos))
	}
	for k := range infos {
		w.distInfo = k
	}
	meta, err := w.read(w.distInfo + "/WHEEL")
	if err != nil {
		return fmt.Errorf("image: %s: %w", w.what, err)
	}
	if !w.binary && !bytes.Contains(bytes.ToLower(meta), []byte("root-is-purelib: true")) {
		return notPure(w.path, "its WHEEL file does not say Root-Is-Purelib: true")
	}
	return w.checkRecord()
}

// checkMember refuses names that could land outside the target and
// members that are not plain files or directories.
func checkMember(f *zip.File) error {
	n := f.Name
	switch {
	case n == "" || strings.HasPrefix(n, "/") || strings.ContainsAny(n, "\\\x00"):
		return fmt.Errorf("member %q: not a relative path", n)
	case path.Clean(strings.TrimSuffix(n, "/")) != strings.TrimSuffix(n, "/"):
		return fmt.Errorf("member %q: not a clean path", n)
	case n == ".." || strings.HasPrefix(n, "../"):
		return fmt.Errorf("member %q: points outside the wheel", n)
	}
	mode := f.Mode()
	if mode&fs.ModeSymlink != 0 || mode&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeCharDevice) != 0 {
		return fmt.Errorf("member %q: a %s, not a file", n, mode.Type())
	}
	return nil
}

func (w *wheel) read(name string) ([]byte, error) {
	f, err := w.zr.Open(name)
	if err != nil {
		return nil, fmt.Errorf("no %s in the wheel", name)
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 16<<20))
}

// checkRecord checks every file against RECORD (PEP 376 hashes). A file
// RECORD does not list, or a wrong hash, means the wheel was altered.
func (w *wheel) checkRecord() error {
	rec, err := w.read(w.distInfo + "/RECORD")
	if err != nil {
		return fmt.Errorf("image: %s: %w", w.what, err)
	}
	rows, err := csv.NewReader(bytes.NewReader(rec)).ReadAll()
	if err != nil {
		return fmt.Errorf("image: %s: RECORD: %w", w.what, err)
	}
	hashes := map[string]string{}
	for _, row := range rows {
		if len(row) >= 2 {
			hashes[row[0]] = row[1]
		}
	}
	for _, f := range w.zr.File {
		if strings.HasSuffix(f.Name, "/") || isRecordFile(w.distInfo, f.Name) {
			continue
		}
		want, ok := hashes[f.Name]
		if !ok {
			return fmt.Errorf("image: %s: %s is not in RECORD: the wheel was altered or is broken", w.what, f.Name)
		}
		got, err := memberHash(f)
		if err != nil {
			return fmt.Errorf("image: %s: %s: %w", w.what, f.Name, err)
		}
		if want != got {
			return fmt.Errorf("image: %s: %s does not match its RECORD hash: the wheel was altered or is broken", w.what, f.Name)
		}
	}
	return nil
}

func isRecordFile(distInfo, name string) bool {
	switch name {
	case distInfo + "/RECORD", distInfo + "/RECORD.jws", distInfo + "/RECORD.p7s":
		return true
	}
	return false
}

func memberHash(f *zip.File) (string, error) {
	r, err := f.Open()
	if err != nil {
		return "", err
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return "sha256=" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}

// wheelScheme is where a wheel's parts go in the tree, as paths relative
// to the tree's root (pip's "posix_local" scheme on Debian).
type wheelScheme struct {
	site, scripts, data, headers string
}

func localScheme(pyver string) wheelScheme {
	return wheelScheme{
		site:    "usr/local/lib/python" + pyver + "/dist-packages",
		scripts: "usr/local/bin",
		data:    "usr/local",
		headers: "usr/local/include/python" + pyver,
	}
}

// install unpacks the wheel into root. A file that already exists is an
// error: two wheels (or a wheel and an added file) claim the same path.
func (w *wheel) install(root *os.Root, s wheelScheme) error {
	dataDir := strings.TrimSuffix(w.distInfo, ".dist-info") + ".data/"
	for _, f := range w.zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		dest, script := s.site+"/"+f.Name, false
		if rest, ok := strings.CutPrefix(f.Name, dataDir); ok {
			kind, sub, _ := strings.Cut(rest, "/")
			switch kind {
			case "purelib", "platlib":
				dest = s.site + "/" + sub
			case "scripts":
				dest, script = s.scripts+"/"+sub, true
			case "data":
				dest = s.data + "/" + sub
			case "headers":
				dest = s.headers + "/" + w.dist + "/" + sub
			default:
				return fmt.Errorf("image: %s: unknown data directory %s", w.what, f.Name)
			}
		}
		if err := installMember(root, f, dest, script); err != nil {
			return fmt.Errorf("image: %s: %w", w.what, err)
		}
	}
	if err := w.writeEntryPoints(root, s); err != nil {
		return err
	}
	return writeNew(root, s.site+"/"+w.distInfo+"/INSTALLER", []byte("pybox\n"), 0o644)
}

func installMember(root *os.Root, f *zip.File, dest string, script bool) error {
	r, err := f.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if script || f.Mode()&0o111 != 0 {
		mode = 0o755
	}
	if script && bytes.HasPrefix(b, []byte("#!python")) {
		// The wheel spec's placeholder for "the interpreter that installs me".
		b = append([]byte("#!/usr/bin/python3"), b[len("#!python"):]...)
	}
	return writeNew(root, dest, b, mode)
}

// writeEntryPoints writes a launcher for each console and GUI script in
// entry_points.txt, as pip does.
func (w *wheel) writeEntryPoints(root *os.Root, s wheelScheme) error {
	ep, err := w.read(w.distInfo + "/entry_points.txt")
	if err != nil {
		return nil // no entry points
	}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(ep))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.TrimSpace(line[1 : len(line)-1])
			continue
		}
		if section != "console_scripts" && section != "gui_scripts" || line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		name, target, ok := strings.Cut(line, "=")
		name, target = strings.TrimSpace(name), strings.TrimSpace(target)
		target, _, _ = strings.Cut(target, "[") // extras do not change the launcher
		mod, attr, ok2 := strings.Cut(strings.TrimSpace(target), ":")
		mod, attr = strings.TrimSpace(mod), strings.TrimSpace(attr)
		if !ok || !ok2 || !scriptName.MatchString(name) || !dottedName.MatchString(mod) || !dottedName.MatchString(attr) {
			return fmt.Errorf("image: %s: entry point %q is not NAME = module:attr", w.what, line)
		}
		head, _, _ := strings.Cut(attr, ".")
		launcher := fmt.Sprintf("#!/usr/bin/python3\nimport sys\nfrom %s import %s\nif __name__ == \"__main__\":\n    sys.exit(%s())\n", mod, head, attr)
		if err := writeNew(root, s.scripts+"/"+name, []byte(launcher), 0o755); err != nil {
			return fmt.Errorf("image: %s: %w", w.what, err)
		}
	}
	return sc.Err()
}

// writeNew creates a file (and its directories) inside root; it fails if
// the file exists. os.Root keeps every path, links included, inside the tree.
func writeNew(root *os.Root, name string, b []byte, mode fs.FileMode) error {
	return copyNew(root, name, bytes.NewReader(b), mode)
}

// copyNew is writeNew from a reader, streamed: a large file added to an
// image is never held in memory whole.
func copyNew(root *os.Root, name string, r io.Reader, mode fs.FileMode) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("/%s already exists in the image: two wheels or added files claim it", name)
	}
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Chmod(name, mode) // the umask must not decide an image's modes
}
