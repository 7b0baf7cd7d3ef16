package image

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Packages from a Python package index. pip resolves them: the real
// resolver, run by the image's own python3 in the tree, so that the
// Python version, ABI, platform tags (the image's glibc) and environment
// markers are the image's, whatever machine builds it. Binary wheels
// only: a source distribution would run its build code, and no compiler
// runs in an image build. pip runs in a build jail (see jail.Build): as
// an ordinary user, with the network but none of this machine's files.
// PyBox then checks each wheel against the hash pip reported, unpacks it
// itself, and byte-compiles and imports it in a jail with no network.

// PipIndex is where pip looks, as pip's own options say it.
type PipIndex struct {
	URL       string   `json:"index_url,omitempty"`        // --index-url (pip's default, PyPI, when empty)
	Extra     []string `json:"extra_index_urls,omitempty"` // --extra-index-url
	FindLinks []string `json:"find_links,omitempty"`       // --find-links: a local directory (absolute) or a URL
	NoIndex   bool     `json:"no_index,omitempty"`         // --no-index: only FindLinks
	// RequireHashes is pip's --require-hashes: every requirement pinned
	// with its --hash.
	RequireHashes bool `json:"require_hashes,omitempty"`
}

// Requirements is a requirements file, by content: the same lines make
// the same image wherever the file was.
type Requirements struct {
	File string `json:"file"` // its base name, for messages
	Text string `json:"text"`
}

// IndexPackage is a distribution an image got from a package index.
type IndexPackage struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Wheel   string `json:"wheel"`
	SHA256  string `json:"sha256"`
	URL     string `json:"url"`   // where pip found it
	Index   string `json:"index"` // which of the recipe's sources that is
}

// PipInput is what `pybox image build` was given for pip.
type PipInput struct {
	Specs, RequirementFiles []string
	Index                   PipIndex
}

// pipWheelPackage is Debian's package of pip as a wheel: the image's
// suite's own pip, which its Python runs (an older pip may not run on a
// newer Python). It is installed with the image's apt packages.
const pipWheelPackage = "python3-pip-whl"

// usesIndex says whether the recipe installs anything with pip.
func (r *Recipe) usesIndex() bool { return len(r.Pip)+len(r.Requirements) > 0 }

// AddPip adds what pip installs to r, checked.
func (r *Recipe) AddPip(in PipInput) error {
	for _, s := range in.Specs {
		if err := checkPipLine(s, "--pip"); err != nil {
			return err
		}
	}
	r.Pip = append(r.Pip, in.Specs...)
	for _, f := range in.RequirementFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("image: --requirements: %w", err)
		}
		req := Requirements{File: filepath.Base(f), Text: string(b)}
		if err := req.check(); err != nil {
			return err
		}
		r.Requirements = append(r.Requirements, req)
	}
	ix := in.Index
	for i, d := range ix.FindLinks {
		if isURL(d) {
			continue
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return fmt.Errorf("image: --find-links %s: %w", d, err)
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return fmt.Errorf("image: --find-links %s: not a directory (give a directory of wheels, or an http(s) URL)", d)
		}
		ix.FindLinks[i] = abs
	}
	if !r.usesIndex() {
		if ix.URL != "" || len(ix.Extra)+len(ix.FindLinks) > 0 || ix.NoIndex || ix.RequireHashes {
			return fmt.Errorf("image: --index-url, --extra-index-url, --find-links, --no-index and --require-hashes say where --pip and --requirements come from: give one of those too")
		}
		return nil
	}
	r.Index = &ix
	return r.Index.check()
}

func (ix *PipIndex) check() error {
	for _, u := range append([]string{ix.URL}, ix.Extra...) {
		if u == "" {
			continue
		}
		if !isURL(u) {
			return fmt.Errorf("image: index %q: give an http:// or https:// URL", u)
		}
	}
	if ix.NoIndex {
		if ix.URL != "" || len(ix.Extra) > 0 {
			return fmt.Errorf("image: --no-index with --index-url or --extra-index-url: pick one")
		}
		if len(ix.FindLinks) == 0 {
			return fmt.Errorf("image: --no-index needs --find-links DIR: pip has nowhere else to look")
		}
	}
	for _, d := range ix.FindLinks {
		if !isURL(d) && !filepath.IsAbs(d) {
			return fmt.Errorf("image: --find-links %s: give an absolute directory or an http(s) URL", d)
		}
	}
	return nil
}

func isURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// checkPipLine checks a requirement given on the command line: one
// specifier, not an option (those have flags of their own).
func checkPipLine(s, flag string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return fmt.Errorf("image: %s: an empty requirement", flag)
	case strings.ContainsAny(s, "\n\r\x00"):
		return fmt.Errorf("image: %s %q: one requirement per flag", flag, s)
	case strings.HasPrefix(strings.TrimSpace(s), "-"):
		return fmt.Errorf("image: %s %q: a requirement such as polars or 'duckdb>=1.1', not an option (--index-url and the others are flags of image build)", flag, s)
	}
	return nil
}

// pipFileOptions are the options a requirements file may not carry: where
// packages come from is said on the command line, so the recipe (and the
// receipt of what was installed) says it; other files are not read;
// editable and source installs run a build.
var pipFileOptions = []string{"-r", "--requirement", "-c", "--constraint", "-e", "--editable",
	"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--no-index", "--trusted-host",
	"--no-binary", "--only-binary", "--prefer-binary", "--pre", "--use-feature"}

func (q Requirements) check() error {
	for i, line := range strings.Split(q.Text, "\n") {
		l := strings.TrimSpace(line)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for _, o := range pipFileOptions {
			if l == o || strings.HasPrefix(l, o+" ") || strings.HasPrefix(l, o+"=") || (len(o) == 2 && strings.HasPrefix(l, o) && !strings.HasPrefix(l, "--")) {
				return fmt.Errorf("image: --requirements %s line %d: %q: image build takes %s as its own flag (or not at all), not from a requirements file", q.File, i+1, l, o)
			}
		}
	}
	return nil
}
