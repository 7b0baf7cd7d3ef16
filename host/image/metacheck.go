package image

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"pybox/host/escape"
	"pybox/shared/wire"
)

// checkMeta holds an imported meta.json (m, decoded from raw) to the rules
// its strings follow where pybox makes them: the guest's for the Python
// version and the suite, the image name's, an architecture's name (any,
// not only those this pybox builds: see checkArchName), Debian's grammar
// for package names and versions, a recipe's own. Beyond those, no string anywhere in
// raw, keys and fields this pybox does not know included, may hold a
// terminal control but tab and newline (recipe checks are Python code):
// an image's strings are shown by `pybox image list` and `image inspect`.
func checkMeta(m *Meta, raw []byte) error {
	for _, f := range metaFields(m) {
		if err := f.check(f.value); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	// A newer pybox may build from a suite this one does not know: the
	// image still runs, so its suite is held to the guest's rule (above),
	// not to the list of suites this pybox builds from.
	r := m.Recipe
	r.Suite = ""
	if err := r.Validate(); err != nil {
		return fmt.Errorf("recipe: %w", err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	return plainText("", v)
}

// metaField is one string of meta.json and the rule it must meet.
type metaField struct {
	name  string // where it is in meta.json, for the error
	value string
	check func(string) error
}

// metaFields are meta.json's strings that have a grammar.
func metaFields(m *Meta) []metaField {
	fs := []metaField{
		{"name", m.Name, wire.CheckImageName},
		{"digest", m.Digest, checkSHA256},
		{"recipe_hash", m.RecipeHash, checkSHA256},
		{"python", m.Python, wire.CheckPythonVersion},
		{"suite", m.Suite, optional(wire.CheckSuite)}, // "" from a pybox that did not record it
		{"arch", m.Arch, optional(checkArchName)},     // "" from a pybox that did not record it: x86_64
		{"recipe.suite", m.Recipe.Suite, optional(wire.CheckSuite)},
	}
	if m.Base != nil {
		fs = append(fs, metaField{"base.name", m.Base.Name, wire.CheckImageName}, metaField{"base.digest", m.Base.Digest, checkSHA256})
	}
	fs = append(fs, packageFields("main_packages", m.Main, true)...)
	fs = append(fs, packageFields("packages", m.Packages, false)...)
	fs = append(fs, each("apt_packages", m.AptPackages, CheckAptName)...)
	fs = append(fs, each("stripped", m.Stripped, checkDebName)...)
	fs = append(fs, each("preload", m.Preload, CheckModule)...)
	fs = append(fs, each("recipe.main", m.Recipe.Main, checkDebName)...)
	fs = append(fs, wheelFields("wheels", m.Wheels)...)
	fs = append(fs, wheelFields("recipe.wheels", m.Recipe.Wheels)...)
	for i, a := range m.Recipe.Adds {
		fs = append(fs, metaField{fmt.Sprintf("recipe.adds[%d].sha256", i), a.SHA256, checkSHA256})
	}
	return fs
}

func each(field string, vs []string, check func(string) error) []metaField {
	fs := make([]metaField, len(vs))
	for i, v := range vs {
		fs[i] = metaField{fmt.Sprintf("%s[%d]", field, i), v, check}
	}
	return fs
}

// packageFields are the name and version of each package. With wheels, a
// package named "wheel:DIST" is a wheel's distribution and version, as
// mainPackages records them.
func packageFields(field string, ps []Package, wheels bool) []metaField {
	var fs []metaField
	for i, p := range ps {
		at := fmt.Sprintf("%s[%d]", field, i)
		if dist, ok := strings.CutPrefix(p.Name, "wheel:"); ok && wheels {
			fs = append(fs, metaField{at, dist, func(d string) error { return checkWheelName(d, p.Version) }})
			continue
		}
		fs = append(fs, metaField{at + ".name", p.Name, checkDebName}, metaField{at + ".version", p.Version, checkDebVersion})
	}
	return fs
}

func wheelFields(field string, ws []Wheel) []metaField {
	var fs []metaField
	for i, w := range ws {
		at := fmt.Sprintf("%s[%d]", field, i)
		fs = append(fs, metaField{at + ".file", w.File, checkWheelFile}, metaField{at + ".sha256", w.SHA256, checkSHA256})
	}
	return fs
}

// optional lets "" through check.
func optional(check func(string) error) func(string) error {
	return func(s string) error {
		if s == "" {
			return nil
		}
		return check(s)
	}
}

func checkSHA256(s string) error {
	if len(s) != 64 || strings.Trim(s, "0123456789abcdef") != "" {
		return fmt.Errorf("%.80q is not a sha256 (64 lower-case hex digits)", s)
	}
	return nil
}

// Debian's grammar for package names and versions (Debian Policy 5.6.1
// and 5.6.12): a version is [EPOCH:]UPSTREAM[-REVISION].
var (
	debName    = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	debVersion = regexp.MustCompile(`^([0-9]+:)?[A-Za-z0-9][A-Za-z0-9.+~-]*$`)
)

func checkDebName(s string) error {
	if !debName.MatchString(s) {
		return fmt.Errorf("%.80q is not a Debian package name (lower-case letters, digits, '+', '-' and '.')", s)
	}
	return nil
}

func checkDebVersion(s string) error {
	if !debVersion.MatchString(s) {
		return fmt.Errorf("%.80q is not a Debian package version ([EPOCH:]UPSTREAM[-REVISION])", s)
	}
	return nil
}

func checkWheelFile(s string) error {
	if !wheelFile.MatchString(s) {
		return fmt.Errorf("%.80q is not a wheel file name (DIST-VERSION-PYTHON-ABI-PLATFORM.whl)", s)
	}
	return nil
}

// checkWheelName checks a wheel's distribution and version by the rule
// for the file name they were read from.
func checkWheelName(dist, version string) error {
	m := wheelFile.FindStringSubmatch(dist + "-" + version + "-py3-none-any.whl")
	if m == nil || m[1] != dist || m[2] != version {
		return fmt.Errorf("%.80q version %.80q is not a wheel's distribution and version", dist, version)
	}
	return nil
}

// plainText refuses a string anywhere in v, a key included, that holds a
// terminal control (see host/escape) other than tab and newline; at is
// where v is in meta.json.
func plainText(at string, v any) error {
	switch v := v.(type) {
	case string:
		if escape.Controls(v, "\t\n") > 0 {
			return fmt.Errorf("%s: %.80q holds a control character", at, v)
		}
	case []any:
		for i, e := range v {
			if err := plainText(fmt.Sprintf("%s[%d]", at, i), e); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if escape.Controls(k, "") > 0 {
				return fmt.Errorf("the key %.80q%s holds a control character", k, strings.TrimSuffix(" in "+at, " in "))
			}
			if err := plainText(strings.TrimPrefix(at+"."+k, "."), v[k]); err != nil {
				return err
			}
		}
	}
	return nil
}
