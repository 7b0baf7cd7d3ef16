package typecheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Config says where to look and for which system to check.
type Config struct {
	Dir    string // go list runs here (inside the module); errors name files relative to it
	GOOS   string
	GOARCH string
	// Overlay replaces the content of files, by absolute path, as if the
	// file on disk said so: for `go list` (its -overlay) and the parser.
	Overlay map[string][]byte
}

// Package is one checked package of the patterns.
type Package struct {
	Path  string
	Files []string // absolute paths of the files the system picks
	Types *types.Package
}

// Errors is every problem found, one per line.
type Errors []error

func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, err := range e {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

// listed is what `go list -json` says of one package.
type listed struct {
	ImportPath string
	Dir        string
	Standard   bool
	DepOnly    bool
	GoFiles    []string
	CgoFiles   []string
	ImportMap  map[string]string
	Imports    []string
	Module     *struct{ GoVersion string }
	Error      *struct{ Err string }
}

const listFields = "ImportPath,Dir,Standard,DepOnly,GoFiles,CgoFiles,ImportMap,Imports,Module,Error"

// Check loads the packages matching patterns for cfg's system with all
// they import, and type-checks them. It returns the matched packages, and
// an Errors when any package has a type error or cannot be loaded.
func Check(cfg Config, patterns ...string) ([]*Package, error) {
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	pkgs, err := goList(cfg, patterns)
	if err != nil {
		return nil, err
	}
	c := &checker{cfg: cfg, done: map[string]*types.Package{}, cached: map[string]bool{}}
	var matched []*Package
	// go list -deps lists every package after the packages it imports.
	for _, p := range pkgs {
		files := c.check(p)
		if !p.DepOnly {
			matched = append(matched, &Package{Path: p.ImportPath, Files: files, Types: c.done[p.ImportPath]})
		}
	}
	if len(c.errs) > 0 {
		return matched, c.errs
	}
	return matched, nil
}

// goList asks the go command which packages and files cfg's system builds.
func goList(cfg Config, patterns []string) ([]*listed, error) {
	args := []string{"list", "-e", "-deps", "-json=" + listFields}
	if len(cfg.Overlay) > 0 {
		dir, err := os.MkdirTemp("", "typecheck-overlay-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		overlay, err := writeOverlay(dir, cfg.Overlay)
		if err != nil {
			return nil, err
		}
		args = append(args, "-overlay="+overlay)
	}
	cmd := exec.Command(goTool(), append(args, patterns...)...)
	cmd.Dir = cfg.Dir
	// CGO_ENABLED=1: without it go list drops every file that imports "C",
	// which is all of vz. Listing runs no C compiler.
	cmd.Env = append(os.Environ(), "GOOS="+cfg.GOOS, "GOARCH="+cfg.GOARCH, "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("typecheck: go list %s for %s/%s: %v: %s", strings.Join(patterns, " "), cfg.GOOS, cfg.GOARCH, err, strings.TrimSpace(stderr.String()))
	}
	var pkgs []*listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		p := new(listed)
		if err := dec.Decode(p); err == io.EOF {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("typecheck: reading go list's output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// writeOverlay writes go list's -overlay file: each replaced file's new
// content in its own file in dir.
func writeOverlay(dir string, files map[string][]byte) (string, error) {
	replace := map[string]string{}
	i := 0
	for path, content := range files {
		i++
		name := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(path)))
		if err := os.WriteFile(name, content, 0o600); err != nil {
			return "", err
		}
		replace[path] = name
	}
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	name := filepath.Join(dir, "overlay.json")
	return name, os.WriteFile(name, b, 0o600)
}

// goTool is the go command: the one on PATH, else the one in $GOROOT.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

// A package checked for its declarations only, with nothing overlaid in
// it or below it, is the same in every Check of one process: the standard
// library above all, which is most of the work. It is kept here.
var cache = struct {
	sync.Mutex
	pkgs map[string]*types.Package
	fset *token.FileSet
}{pkgs: map[string]*types.Package{}, fset: token.NewFileSet()}

type checker struct {
	cfg    Config
	done   map[string]*types.Package // by import path, resolved
	cached map[string]bool           // packages taken from cache (or put in it)
	errs   Errors
}

// check type-checks one package whose imports are done, and returns its
// files.
func (c *checker) check(p *listed) []string {
	var files []string
	for _, name := range append(append([]string(nil), p.GoFiles...), p.CgoFiles...) {
		files = append(files, filepath.Join(p.Dir, name))
	}
	if p.Error != nil {
		c.errs = append(c.errs, fmt.Errorf("%s: %s", p.ImportPath, strings.TrimSpace(p.Error.Err)))
	}
	key := c.cfg.GOOS + "/" + c.cfg.GOARCH + " " + p.ImportPath
	cacheable := p.DepOnly && !c.overlaid(files) && c.importsCached(p)
	if cacheable {
		cache.Lock()
		tp := cache.pkgs[key]
		cache.Unlock()
		if tp != nil {
			c.done[p.ImportPath], c.cached[p.ImportPath] = tp, true
			return files
		}
	}
	tp := c.typeCheck(p, files)
	c.done[p.ImportPath] = tp
	if cacheable && tp != nil {
		cache.Lock()
		cache.pkgs[key] = tp
		cache.Unlock()
		c.cached[p.ImportPath] = true
	}
	return files
}

func (c *checker) overlaid(files []string) bool {
	for _, f := range files {
		if _, ok := c.cfg.Overlay[f]; ok {
			return true
		}
	}
	return false
}

// importsCached reports whether every import of p came from the cache:
// only then do p's cached types refer to the very packages this Check uses.
func (c *checker) importsCached(p *listed) bool {
	for _, path := range p.Imports {
		if path != "C" && path != "unsafe" && !c.cached[path] {
			return false
		}
	}
	return true
}

func (c *checker) typeCheck(p *listed, files []string) *types.Package {
	var syntax []*ast.File
	cgo := map[string]bool{}
	for _, name := range p.CgoFiles {
		cgo[filepath.Join(p.Dir, name)] = true
	}
	for _, name := range files {
		src, ok := c.cfg.Overlay[name]
		if !ok {
			var err error
			if src, err = os.ReadFile(name); err != nil {
				c.errs = append(c.errs, err)
				return nil
			}
		}
		f, err := parser.ParseFile(cache.fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			c.errs = append(c.errs, err)
			return nil
		}
		syntax = append(syntax, f)
	}
	conf := types.Config{
		Importer:    importer{p, c.done},
		FakeImportC: true,
		// Dependencies are known to compile on their system; what matters
		// is their API, so their function bodies are skipped (and with
		// them the unused-import check, which needs the bodies).
		IgnoreFuncBodies: p.DepOnly,
		Sizes:            types.SizesFor("gc", c.cfg.GOARCH),
		Error: func(err error) {
			if !fromC(err, cgo) {
				c.errs = append(c.errs, c.relative(err))
			}
		},
	}
	if p.Module != nil && p.Module.GoVersion != "" {
		conf.GoVersion = "go" + p.Module.GoVersion
	}
	tp, _ := conf.Check(p.ImportPath, cache.fset, syntax, nil)
	return tp
}

// fromC reports whether err is about a value whose type came from C. With
// FakeImportC every C.name has an invalid type, and go/types skips most
// errors about it, but not all: converting a *C.char (a pointer to an
// invalid type, not itself invalid) to a Go type is one. Such errors are
// dropped only in files that import "C".
func fromC(err error, cgoFiles map[string]bool) bool {
	var te types.Error
	if !errors.As(err, &te) || !cgoFiles[te.Fset.Position(te.Pos).Filename] {
		return false
	}
	return strings.Contains(te.Msg, "invalid type")
}

// relative shortens a type error's file name to the part below Dir's
// module tree, when it is there.
func (c *checker) relative(err error) error {
	var te types.Error
	if !errors.As(err, &te) {
		return err
	}
	pos := te.Fset.Position(te.Pos)
	if rel, rerr := filepath.Rel(c.cfg.Dir, pos.Filename); rerr == nil && !strings.HasPrefix(rel, "..") {
		pos.Filename = rel
	}
	return fmt.Errorf("%s: %s", pos, te.Msg)
}

// importer hands go/types the packages already checked, resolving import
// paths as go list did (vendored standard-library packages).
type importer struct {
	p    *listed
	done map[string]*types.Package
}

func (im importer) Import(path string) (*types.Package, error) {
	if path == "unsafe" {
		return types.Unsafe, nil
	}
	if resolved, ok := im.p.ImportMap[path]; ok {
		path = resolved
	}
	if tp := im.done[path]; tp != nil {
		return tp, nil
	}
	return nil, fmt.Errorf("typecheck: %s imports %s, which did not load", im.p.ImportPath, path)
}
