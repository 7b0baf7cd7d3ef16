//go:build linux

package box

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	"pybox/guest/imagefs"
	"pybox/shared/wire"
)

// importLine finds the modules a line of Python imports: "import a.b as
// c, d" or "from a.b import c, d".
var importLine = regexp.MustCompile(`(?m)^[ \t]*(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import[ \t]+\(?([^#\n]*)|import[ \t]+([^#\n]*))`)

// programImports is what the program's import statements name, at any
// depth: modules, and for "from M import x" both M and M.x. Imports made
// some other way (importlib, __import__) are not seen: such a program may
// run in a cold box where a warm one would have done, and in a warm box a
// preloaded module it reaches that way has lost what it set at import
// (warnings filters; the one documented difference, docs/how-it-works.md).
func programImports(code string) []string {
	var names []string
	for _, m := range importLine.FindAllStringSubmatch(code, -1) {
		if m[1] != "" {
			names = append(names, m[1])
			for _, n := range strings.Split(m[2], ",") {
				if f := strings.Fields(strings.Trim(n, " \t()\\")); len(f) > 0 {
					names = append(names, m[1]+"."+f[0])
				}
			}
			continue
		}
		for _, n := range strings.Split(m[3], ",") {
			if f := strings.Fields(n); len(f) > 0 {
				names = append(names, f[0])
			}
		}
	}
	return names
}

// needsModule says whether a program that imports imports needs module
// current of the preload list wanted to be imported: it imports it, one
// of its submodules, or a module listed after it (the list is in the
// order of their dependencies: numpy before pandas).
func needsModule(imports, wanted []string, current string) bool {
	at := slices.Index(wanted, current)
	if at < 0 {
		return false
	}
	for _, n := range imports {
		for _, p := range wanted[at:] {
			if n == p || strings.HasPrefix(n, p+".") {
				return true
			}
		}
	}
	return false
}

// maxPreloadBytes bounds an image's preload list: a few dozen module
// names.
const maxPreloadBytes = 64 << 10

// readPreloadList reads the preload list of the image mounted at image;
// an image without one has none. A list that is not a plain file of the
// image (imagefs) fails the warm box, and says why.
func readPreloadList(image string) ([]string, error) {
	img, err := imagefs.Open(image)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	b, err := img.ReadFile(wire.ImagePreloadFile, maxPreloadBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the preload list: %w", err)
	}
	var list []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			list = append(list, l)
		}
	}
	return list, nil
}
