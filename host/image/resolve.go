package image

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"pybox/shared/archs"
)

// Attached is an image the VM attaches: its name, file and digest (hex).
type Attached struct {
	Name   string
	Path   string
	Digest string
	// Note says what to do about an image built by an older pybox.
	Note string
}

// Resolve finds and verifies the images a VM of architecture arch
// (x86_64 or arm64) should attach: each name's build for arch. With no
// names it picks the built-in images that are built for arch (stdlib,
// data). An image the store has only for another architecture is an
// error (wrapping ErrNotBuilt) that says so and how to build it for
// arch. Each image is checked whole (VerifyFile), so a corrupt or
// truncated file stops the start with an error that says what to
// rebuild.
func Resolve(home, arch string, names []string) ([]Attached, error) {
	if err := CheckArch(arch); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		var err error
		if names, err = DefaultNames(home, arch); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	var out []Attached
	for _, name := range names {
		if seen[name] {
			return nil, fmt.Errorf("image: %s is named twice", name)
		}
		seen[name] = true
		m, err := Inspect(home, name, arch)
		if errors.Is(err, ErrNotBuilt) {
			if others := builtFor(home, name, arch); len(others) > 0 {
				return nil, fmt.Errorf("%w: image %s is built for %s, this VM is %s: %s",
					ErrNotBuilt, name, strings.Join(others, " and "), arch, buildAdvice(name, arch, others[0]))
			}
		}
		if err != nil {
			return nil, err
		}
		p, digest, err := Lookup(home, name, arch)
		if err != nil {
			return nil, err
		}
		if err := VerifyFile(p, digest); err != nil {
			return nil, fmt.Errorf("image %s: %w: rebuild it with `%s`", name, err, buildCommand(name, arch))
		}
		out = append(out, Attached{Name: name, Path: p, Digest: digest, Note: outdated(m)})
	}
	return out, nil
}

// DefaultNames returns the built-in images that the store has for arch.
func DefaultNames(home, arch string) ([]string, error) {
	var names, elsewhere []string
	for _, n := range BuiltInNames {
		_, err := os.Stat(Path(home, n, arch))
		if err == nil {
			names = append(names, n)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("image: %w", err)
		} else if others := builtFor(home, n, arch); len(others) > 0 {
			elsewhere = append(elsewhere, n+" for "+strings.Join(others, " and "))
		}
	}
	switch {
	case len(names) > 0:
		return names, nil
	case arch == archs.Host():
		return nil, fmt.Errorf("%w: no image is built: run `make images`, or `pybox image build stdlib`", ErrNotBuilt)
	case len(elsewhere) > 0:
		return nil, fmt.Errorf("%w: no image is built for %s (the store has %s): run `make images ARCH=%s`, or `%s`",
			ErrNotBuilt, arch, strings.Join(elsewhere, ", "), arch, buildCommand("stdlib", arch))
	}
	return nil, fmt.Errorf("%w: no image is built for %s: run `make images ARCH=%s`, or `%s`", ErrNotBuilt, arch, arch, buildCommand("stdlib", arch))
}

// outdated says what to do about an image that an older pybox built: it
// still mounts, but lacks whatever the newer build pipeline adds.
func outdated(m *Meta) string {
	if m.Builder >= BuilderVersion {
		return ""
	}
	how := fmt.Sprintf("import the one from this pybox's release bundle (`pybox image import --force images/%s%s`) or rebuild it (`%s`)", m.Name, ExportExt, buildCommand(m.Name, m.Arch))
	if !IsBuiltIn(m.Name) {
		inspect := "pybox image inspect " + m.Name
		if m.Arch != archs.Host() {
			inspect += " --arch " + m.Arch
		}
		how = fmt.Sprintf("rebuild it (`%s` shows its recipe) with `%s ...`", inspect, buildCommand(m.Name, m.Arch))
	}
	return fmt.Sprintf("image %s was built by an older pybox (image builder %d; this pybox's is %d), so it may lack what newer builds add: %s",
		m.Name, m.Builder, BuilderVersion, how)
}
