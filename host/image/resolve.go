package image

import (
	"errors"
	"fmt"
	"os"
)

// Attached is an image the VM attaches: its name, file and digest (hex).
type Attached struct {
	Name   string
	Path   string
	Digest string
	// Note says what to do about an image built by an older pybox.
	Note string
}

// Resolve finds and verifies the images the VM should attach. With no
// names it picks the built-in images that are built (stdlib, data).
// Each image is checked whole (VerifyFile), so a corrupt or truncated
// file stops the start with an error that says what to rebuild.
func Resolve(home string, names []string) ([]Attached, error) {
	if len(names) == 0 {
		var err error
		if names, err = DefaultNames(home); err != nil {
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
		m, err := Inspect(home, name)
		if err != nil {
			return nil, err
		}
		p, digest, err := Lookup(home, name)
		if err != nil {
			return nil, err
		}
		if err := VerifyFile(p, digest); err != nil {
			return nil, fmt.Errorf("image %s: %w: rebuild it with `pybox image build %s`", name, err, name)
		}
		out = append(out, Attached{Name: name, Path: p, Digest: digest, Note: outdated(m)})
	}
	return out, nil
}

// DefaultNames returns the built-in images that are in the store.
func DefaultNames(home string) ([]string, error) {
	var names []string
	for _, n := range BuiltInNames {
		_, err := os.Stat(Path(home, n))
		if err == nil {
			names = append(names, n)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no image is built: run `make images`, or `pybox image build stdlib`", ErrNotBuilt)
	}
	return names, nil
}

// outdated says what to do about an image that an older pybox built: it
// still mounts, but lacks whatever the newer build pipeline adds.
func outdated(m *Meta) string {
	if m.Builder >= BuilderVersion {
		return ""
	}
	how := fmt.Sprintf("import the one from this pybox's release bundle (`pybox image import --force images/%s%s`) or rebuild it (`pybox image build %s`)", m.Name, ExportExt, m.Name)
	if !IsBuiltIn(m.Name) {
		how = fmt.Sprintf("rebuild it (`pybox image inspect %s` shows its recipe) with `pybox image build %s ...`", m.Name, m.Name)
	}
	return fmt.Sprintf("image %s was built by an older pybox (image builder %d; this pybox's is %d), so it may lack what newer builds add: %s",
		m.Name, m.Builder, BuilderVersion, how)
}
