package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"pybox/host/jail"
)

// pipDir is where pip's jail finds its work directory: the
// requirements, the report, the wheels (under the tree's /tmp, which the
// trim step empties).
const pipDir = "/tmp/pybox-pip"

// pipReport is the part of pip's installation report (pip install
// --report) the build reads.
type pipReport struct {
	Install []struct {
		Metadata struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"metadata"`
		DownloadInfo struct {
			URL         string `json:"url"`
			ArchiveInfo struct {
				Hashes map[string]string `json:"hashes"`
			} `json:"archive_info"`
		} `json:"download_info"`
	} `json:"install"`
}

// pipInstall resolves the recipe's requirements with pip in a jail that
// has the network (pass one: a dry run that reports what it would
// install, against what the tree already holds), downloads exactly
// those files, by URL and hash (pass two), checks each wheel's sha256,
// and installs them with the builder's own installer.
func (bd *build) pipInstall(ctx context.Context) error {
	minor, err := bd.pyMinor(ctx)
	if err != nil {
		return err
	}
	pip, err := bd.pipProgram()
	if err != nil {
		return err
	}
	work := filepath.Join(bd.work, "pip")
	if err := os.MkdirAll(filepath.Join(work, "home"), 0o755); err != nil {
		return err
	}
	var reqArgs []string
	for i, q := range bd.r.Requirements {
		name := fmt.Sprintf("requirements-%d.txt", i)
		if err := os.WriteFile(filepath.Join(work, name), []byte(q.Text), 0o644); err != nil {
			return err
		}
		reqArgs = append(reqArgs, "-r", pipDir+"/"+name)
	}
	if err := chownTree(work, buildUser); err != nil {
		return err
	}
	j, undo, err := bd.pipJail(work)
	defer undo()
	if err != nil {
		return err
	}
	common := append(pipPython(pip, minor), "--only-binary=:all:", "--progress-bar", "off", "--cache-dir", pipDir+"/cache")
	common = append(common, bd.r.Index.args()...)
	if bd.r.Index.RequireHashes {
		common = append(common, "--require-hashes")
	}
	if _, err := os.Stat(hostCABundle); err == nil {
		common = append(common, "--cert", pipDir+"/ca.pem")
	}

	var lines []string
	j.onLine = func(l string) {
		lines = append(lines, l)
		// What pip is at, for a long resolve or a large download.
		t := strings.TrimSpace(l)
		for _, p := range []string{"Collecting ", "Downloading ", "Would install ", "Saved "} {
			if strings.HasPrefix(t, p) {
				bd.p.Status("%s", shorten(redact(t), 70))
			}
		}
	}
	args := append(slices.Clone(common[:pipPythonArgs]), "install", "--dry-run", "--break-system-packages", "-vv", "--report", pipDir+"/report.json")
	args = append(append(append(args, common[pipPythonArgs:]...), reqArgs...), bd.r.Pip...)
	if err := bd.inJail(ctx, j, "/usr/bin/python3", args...); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return bd.explainPip(lines, err)
	}
	var rep pipReport
	b, err := os.ReadFile(filepath.Join(work, "report.json"))
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		return fmt.Errorf("pip's report: %w", err)
	}
	if len(rep.Install) == 0 {
		bd.p.Say("pip: everything asked for is in the image already (its Debian packages): nothing to install")
		return nil
	}
	// Each file by its URL, and by its hash where pip reported one (an
	// older pip, Debian 12's, reports none when the index gives none:
	// then PyBox takes the hash of what it downloaded).
	hashed := true
	for _, it := range rep.Install {
		u := it.DownloadInfo.URL
		if !strings.HasSuffix(strings.SplitN(u, "#", 2)[0], ".whl") {
			return fmt.Errorf("pip chose %s %s from %s, which is not a wheel; only binary wheels install", it.Metadata.Name, it.Metadata.Version, redact(u))
		}
		hashed = hashed && sha256Hex.MatchString(it.DownloadInfo.ArchiveInfo.Hashes["sha256"])
	}
	var pinned []string
	for _, it := range rep.Install {
		line := it.Metadata.Name + " @ " + it.DownloadInfo.URL
		if hashed {
			line += " --hash=sha256:" + it.DownloadInfo.ArchiveInfo.Hashes["sha256"]
		}
		pinned = append(pinned, line)
	}
	if err := os.WriteFile(filepath.Join(work, "pinned.txt"), []byte(strings.Join(pinned, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	lines = nil
	args = append(slices.Clone(common[:pipPythonArgs]), "download", "--no-deps", "-d", pipDir+"/wheels")
	args = append(args, slices.DeleteFunc(slices.Clone(common[pipPythonArgs:]), func(a string) bool { return a == "--require-hashes" })...)
	if hashed {
		args = append(args, "--require-hashes")
	}
	args = append(args, "-r", pipDir+"/pinned.txt")
	if err := bd.inJail(ctx, j, "/usr/bin/python3", args...); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return bd.explainPip(lines, err)
	}

	root, err := os.OpenRoot(bd.tree)
	if err != nil {
		return err
	}
	defer root.Close()
	for i, it := range rep.Install {
		u, sum := it.DownloadInfo.URL, it.DownloadInfo.ArchiveInfo.Hashes["sha256"]
		file := path.Base(strings.SplitN(u, "#", 2)[0])
		if unescaped, err := url.PathUnescape(file); err == nil {
			file = unescaped
		}
		local := filepath.Join(work, "wheels", filepath.Base(file))
		got, err := fileSHA256(local)
		if err != nil {
			return fmt.Errorf("pip downloaded no %s: %w", file, err)
		}
		if sum == "" {
			sum = got
		} else if got != sum {
			return fmt.Errorf("%s: its sha256 is %s, pip reported %s: the file changed between pip's two passes", file, got, sum)
		}
		wh, err := openAnyWheel(local, file+" (from "+redact(u)+")", true)
		if err != nil {
			return err
		}
		err = wh.install(root, localScheme(minor))
		if err == nil {
			for _, m := range wh.topLevel() {
				bd.imports = append(bd.imports, [2]string{it.Metadata.Name, m})
			}
		}
		wh.Close()
		if err != nil {
			return err
		}
		bd.indexed = append(bd.indexed, IndexPackage{Name: it.Metadata.Name, Version: it.Metadata.Version, Wheel: file, SHA256: sum,
			URL: bd.r.Index.hostURL(u), Index: bd.r.Index.source(u)})
		bd.p.Status("%d/%d installed: %s %s", i+1, len(rep.Install), it.Metadata.Name, it.Metadata.Version)
	}
	return nil
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// pipPython is how python3 runs pip, the arguments before pip's own: no
// site module (-S), so that no .pth file of a site directory runs (a
// base's packages from an index are there, and this jail has the
// network), and the site directories appended after the standard
// library, so that pip still sees what is installed and nothing there
// can stand in for a module of the standard library.
func pipPython(pip, minor string) []string {
	sites := []string{"/usr/local/lib/python" + minor + "/dist-packages", "/usr/lib/python3/dist-packages", "/usr/lib/python" + minor + "/dist-packages"}
	code := fmt.Sprintf("import sys, runpy; sys.path += %s; sys.argv[0] = 'pip'; runpy.run_path(%s, run_name='__main__')", pyList(sites), pyString(pip))
	return []string{"-I", "-S", "-c", code}
}

// pipPythonArgs is how many arguments pipPython gives.
const pipPythonArgs = 4

// pyString is s as a Python string literal (s holds no quote or
// backslash: a path the build made).
func pyString(s string) string { return "'" + s + "'" }

func pyList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = pyString(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// hostCABundle is this machine's certificate bundle: pip trusts what the
// machine trusts (a company's proxy, say), not only its own list.
const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// pipProgram is the path, in the tree, of the pip wheel pip runs from.
func (bd *build) pipProgram() (string, error) {
	m, _ := filepath.Glob(filepath.Join(bd.tree, "usr/share/python-wheels/pip-*.whl"))
	if len(m) == 0 {
		return "", fmt.Errorf("no pip in the image (%s installs it): the apt step did not run", pipWheelPackage)
	}
	slices.Sort(m)
	return "/" + strings.TrimPrefix(m[len(m)-1], bd.tree+"/") + "/pip", nil
}

// pipJail is the jail pip runs in: the network, the work directory at
// pipDir, the --find-links directories read-only under it, this
// machine's resolver and CA files, and the proxy settings of this
// process's environment; nothing else of this machine. undo removes the
// mount points it had to make in the tree.
func (bd *build) pipJail(work string) (jailRun, func(), error) {
	var made []string
	undo := func() {
		for _, f := range made {
			os.Remove(f)
		}
	}
	binds, giveBack, err := bd.lend(nil)
	giveBack()
	if err != nil {
		return jailRun{}, undo, err
	}
	if err := os.MkdirAll(filepath.Join(bd.tree, pipDir), 0o755); err != nil {
		return jailRun{}, undo, err
	}
	binds = append(binds, jail.Bind{Host: work, Jail: pipDir, Write: true})
	for i, d := range bd.r.Index.FindLinks {
		if !isURL(d) {
			binds = append(binds, jail.Bind{Host: d, Jail: pipDir + "/links/" + strconv.Itoa(i)})
		}
	}
	if _, err := os.Stat(hostCABundle); err == nil {
		binds = append(binds, jail.Bind{Host: hostCABundle, Jail: pipDir + "/ca.pem"})
	}
	for _, f := range []string{"/etc/resolv.conf", "/etc/hosts"} {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		in := filepath.Join(bd.tree, f)
		if _, err := os.Lstat(in); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(in, nil, 0o644); err != nil {
				return jailRun{}, undo, err
			}
			made = append(made, in)
		} else if err != nil {
			return jailRun{}, undo, err
		}
		binds = append(binds, jail.Bind{Host: f, Jail: f})
	}
	// No keyring: it would be imported from the site directories.
	env := bd.chrootEnv("HOME="+pipDir+"/home", "PIP_CONFIG_FILE=/dev/null", "PIP_NO_INPUT=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_COLOR=1",
		"PIP_KEYRING_PROVIDER=disabled")
	for _, v := range os.Environ() {
		name, _, _ := strings.Cut(v, "=")
		if slices.Contains(proxyVars, strings.ToLower(name)) {
			env = append(env, v)
		}
	}
	return jailRun{network: true, binds: binds, env: env}, undo, nil
}

var proxyVars = []string{"http_proxy", "https_proxy", "no_proxy", "all_proxy"}

// args are pip's options for ix, with --find-links directories at their
// places in the jail.
func (ix *PipIndex) args() []string {
	var a []string
	if ix.NoIndex {
		a = append(a, "--no-index")
	}
	if ix.URL != "" {
		a = append(a, "--index-url", ix.URL)
	}
	for _, u := range ix.Extra {
		a = append(a, "--extra-index-url", u)
	}
	for i, d := range ix.FindLinks {
		if !isURL(d) {
			d = pipDir + "/links/" + strconv.Itoa(i)
		}
		a = append(a, "--find-links", d)
	}
	return a
}

// pypi is pip's default index.
const pypi = "https://pypi.org/simple"

// source says which of ix's sources a file pip chose came from: the
// --find-links directory it lies in, else the index or link page on the
// same host, else every index it may have been (PyPI serves its files
// from another host than its pages).
func (ix *PipIndex) source(fileURL string) string {
	for i, d := range ix.FindLinks {
		if !isURL(d) && strings.HasPrefix(fileURL, "file://"+pipDir+"/links/"+strconv.Itoa(i)+"/") {
			return d
		}
	}
	var all []string
	if !ix.NoIndex {
		all = append(all, orDefault(ix.URL, pypi))
		all = append(all, ix.Extra...)
	}
	for _, d := range ix.FindLinks {
		if isURL(d) {
			all = append(all, d)
		}
	}
	fu, err := url.Parse(fileURL)
	if err == nil {
		for _, s := range all {
			if su, err := url.Parse(s); err == nil && su.Host == fu.Host {
				return redact(s)
			}
		}
	}
	for i := range all {
		all[i] = redact(all[i])
	}
	if len(all) == 1 {
		return all[0]
	}
	return strings.Join(all, " or ")
}

// hostURL is a file's URL as this machine knows it: a --find-links
// directory's file by its path here, not in the jail; no credentials.
func (ix *PipIndex) hostURL(fileURL string) string {
	for i, d := range ix.FindLinks {
		if rest, ok := strings.CutPrefix(fileURL, "file://"+pipDir+"/links/"+strconv.Itoa(i)+"/"); ok && !isURL(d) {
			return (&url.URL{Scheme: "file", Path: filepath.Join(d, rest)}).String()
		}
	}
	return redact(fileURL)
}

func orDefault(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// redact drops a URL's user and password: an index's credentials are
// not recorded in an image's meta.json.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}

// Lines of pip -vv that say why it found no wheel.
var (
	pipNoSources   = regexp.MustCompile(`Skipping link: No sources permitted for ([^:]+): (\S+)`)
	pipWrongTags   = regexp.MustCompile(`Skipping link: none of the wheel's tags .* are compatible.*: (\S+\.whl)`)
	pipNoVersion   = regexp.MustCompile(`Could not find a version that satisfies the requirement (\S+)`)
	pipUnreachable = regexp.MustCompile(`(?i)(Failed to establish a new connection: [^')]*|Name or service not known|Temporary failure in name resolution|Connection refused|Read timed out|Could not fetch URL[^;]*|SSLError[^')]*|certificate verify failed)`)
)

// explainPip turns pip's failure into what to do about it: a package
// with source distributions only, an index that cannot be reached, or
// else pip's own last words.
func (bd *build) explainPip(lines []string, err error) error {
	sources := map[string][]string{}
	var wrongTags []string
	var missing []string
	unreachable := ""
	for _, l := range lines {
		if m := pipNoSources.FindStringSubmatch(l); m != nil {
			name := strings.ToLower(m[1])
			sources[name] = append(sources[name], path.Base(strings.SplitN(m[2], "#", 2)[0]))
		} else if m := pipWrongTags.FindStringSubmatch(l); m != nil {
			wrongTags = append(wrongTags, path.Base(strings.SplitN(m[1], "#", 2)[0]))
		} else if m := pipNoVersion.FindStringSubmatch(l); m != nil {
			missing = append(missing, m[1])
		} else if m := pipUnreachable.FindString(l); unreachable == "" && m != "" {
			unreachable = m
		}
	}
	tail := ""
	if said := pipErrors(lines); len(said) > 0 {
		tail = "\npip said:\n    " + strings.Join(said, "\n    ")
	}
	var parts []string
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range sources {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s has only source distributions there (%s)", n, strings.Join(firstFew(sources[n]), ", ")))
	}
	if len(parts) > 0 {
		return fmt.Errorf("found no wheel for this image: %s. PyBox installs binary wheels only, since building a source distribution runs its code and no compiler runs in an image build: "+
			"build a wheel yourself (pip wheel NAME) and give its directory with --find-links DIR, or use Debian's package (--apt python3-NAME)%s", strings.Join(parts, "; "), tail)
	}
	if len(wrongTags) > 0 && len(missing) > 0 {
		return fmt.Errorf("found no wheel of %s for this image's Python %s on %s (there are wheels for other Pythons or platforms: %s)%s",
			strings.Join(missing, ", "), bd.pyver, bd.arch, strings.Join(firstFew(wrongTags), ", "), tail)
	}
	if unreachable != "" {
		return fmt.Errorf("could not reach the index (%s): %s; check the address and this machine's network or proxy (http_proxy and https_proxy are passed to pip)%s",
			strings.Join(bd.r.Index.describe(), ", "), unreachable, tail)
	}
	if tail == "" {
		return fmt.Errorf("could not install what was asked (%s): %w", strings.Join(bd.r.Index.describe(), ", "), err)
	}
	return fmt.Errorf("could not install what was asked (%s)%s", strings.Join(bd.r.Index.describe(), ", "), tail)
}

// pipErrors are pip's ERROR lines, each with the indented lines that
// follow it (what a hash mismatch expected and got), without the
// traceback -vv adds.
func pipErrors(lines []string) []string {
	var out []string
	in := false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "ERROR:"):
			in = true
		case !in || t == "" || !strings.HasPrefix(l, " ") || strings.HasPrefix(t, "Traceback") || strings.HasPrefix(t, "File \""):
			in = false
			continue
		}
		if len(out) < 12 {
			out = append(out, l)
		}
	}
	return out
}

// describe lists ix's sources, for a message.
func (ix *PipIndex) describe() []string {
	var d []string
	if !ix.NoIndex {
		d = append(d, "index "+redact(orDefault(ix.URL, pypi)))
		for _, u := range ix.Extra {
			d = append(d, "extra index "+redact(u))
		}
	}
	for _, l := range ix.FindLinks {
		d = append(d, "links "+redact(l))
	}
	return d
}

func firstFew(s []string) []string {
	s = slices.Compact(s)
	if len(s) > 3 {
		return append(slices.Clone(s[:3]), fmt.Sprintf("and %d more", len(s)-3))
	}
	return s
}

// topLevel lists the modules a wheel puts at the top of the site
// directory: those of its top_level.txt that it has files for, else
// what its files say (a package directory, a .py or an extension
// module). Directories of tests and examples some wheels ship there are
// left out.
func (w *wheel) topLevel() []string {
	dataDir := strings.TrimSuffix(w.distInfo, ".dist-info") + ".data/"
	roots := map[string]bool{}
	for _, f := range w.zr.File {
		if strings.HasPrefix(f.Name, w.distInfo+"/") || strings.HasPrefix(f.Name, dataDir) {
			continue
		}
		top, rest, dir := strings.Cut(f.Name, "/")
		switch {
		case dir && rest != "":
			roots[top] = true
		case strings.HasSuffix(top, ".py") || strings.HasSuffix(top, ".so"):
			name, _, _ := strings.Cut(top, ".")
			roots[name] = true
		}
	}
	var names []string
	if b, err := w.read(w.distInfo + "/top_level.txt"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if first, _, _ := strings.Cut(l, "/"); l != "" && roots[first] {
				names = append(names, strings.ReplaceAll(l, "/", "."))
			}
		}
	}
	if len(names) == 0 {
		for r := range roots {
			names = append(names, r)
		}
	}
	var mods []string
	for _, n := range names {
		if dottedName.MatchString(n) && !slices.Contains(notModules, n) && !slices.Contains(mods, n) {
			mods = append(mods, n)
		}
	}
	slices.Sort(mods)
	return mods
}

var notModules = []string{"__pycache__", "test", "tests", "testing", "docs", "examples", "benchmarks"}

// importScript imports each module of PYBOX_IMPORTS, a JSON list of
// [distribution, module], and names each that fails and why.
const importScript = `import importlib, json, os, sys
bad = 0
for dist, mod in json.loads(os.environ["PYBOX_IMPORTS"]):
    try:
        importlib.import_module(mod)
    except BaseException as e:
        bad += 1
        print("IMPORT-FAILED %s: import %s: %s: %s" % (dist, mod, type(e).__name__, str(e).replace("\n", " ")[:300]), flush=True)
sys.exit(1 if bad else 0)
`

// checkImports imports every top-level module of every distribution
// pip installed, in a jail as a box would (no network, not root): a
// wheel that does not import in this image fails the build, naming it.
func (bd *build) checkImports(ctx context.Context, env []string) error {
	if len(bd.imports) == 0 {
		return nil
	}
	b, err := json.Marshal(bd.imports)
	if err != nil {
		return err
	}
	bd.p.Status("importing %d modules of %d distributions from the index", len(bd.imports), len(bd.indexed))
	var failed []string
	err = bd.python3(ctx, func(l string) {
		if f, ok := strings.CutPrefix(l, "IMPORT-FAILED "); ok {
			failed = append(failed, f)
		}
	}, append(slices.Clone(env), "PYBOX_IMPORTS="+string(b)), []string{"/tmp/.config"}, "-I", "-c", importScript)
	if len(failed) > 0 && ctx.Err() == nil {
		return fmt.Errorf("%d module(s) from the index do not import in this image:\n    %s", len(failed), strings.Join(failed, "\n    "))
	}
	return err
}

// pipRequested says whether a distribution is one the --pip flags name
// (its name leads one of them), as opposed to a dependency pip added.
func pipRequested(specs []string, name string) bool {
	norm := func(s string) string { return strings.NewReplacer("_", "-", ".", "-").Replace(strings.ToLower(s)) }
	for _, s := range specs {
		end := strings.IndexAny(s, " <>=!~;[@")
		if end < 0 {
			end = len(s)
		}
		if norm(s[:end]) == norm(name) {
			return true
		}
	}
	return false
}

// redacted is r without an index's credentials, for meta.json: an image
// exported to someone else must not carry them.
func (r *Recipe) redacted() Recipe {
	out := *r
	if r.Index != nil {
		ix := *r.Index
		ix.URL = redact(ix.URL)
		ix.Extra = slices.Clone(ix.Extra)
		for i := range ix.Extra {
			ix.Extra[i] = redact(ix.Extra[i])
		}
		ix.FindLinks = slices.Clone(ix.FindLinks)
		for i := range ix.FindLinks {
			ix.FindLinks[i] = redact(ix.FindLinks[i])
		}
		out.Index = &ix
	}
	return out
}

// redactArgs is args with every URL's credentials dropped, for the log.
func redactArgs(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		out[i] = redact(a)
	}
	return out
}
