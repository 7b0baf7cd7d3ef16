package image

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// installedPackages reads the tree's dpkg status file: every package in
// state "install ok installed", by name.
func installedPackages(tree string) ([]Package, error) {
	b, err := os.ReadFile(filepath.Join(tree, "var/lib/dpkg/status"))
	if err != nil {
		return nil, err
	}
	var out []Package
	for _, stanza := range bytes.Split(b, []byte("\n\n")) {
		var name, version, status string
		sc := bufio.NewScanner(bytes.NewReader(stanza))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ": ")
			if !ok {
				continue
			}
			switch k {
			case "Package":
				name = v
			case "Version":
				version = v
			case "Status":
				status = v
			}
		}
		if name != "" && status == "install ok installed" {
			out = append(out, Package{Name: name, Version: version})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func packageMap(pkgs []Package) map[string]string {
	m := make(map[string]string, len(pkgs))
	for _, p := range pkgs {
		m[p.Name] = p.Version
	}
	return m
}

// UpstreamVersion drops a Debian version's epoch, revision and repack
// suffix: "1:1.24.2-3" is "1.24.2", "1.5.3+dfsg-2" is "1.5.3".
func UpstreamVersion(v string) string {
	if _, rest, ok := strings.Cut(v, ":"); ok {
		v = rest
	}
	if i := strings.LastIndexByte(v, '-'); i > 0 {
		v = v[:i]
	}
	for _, suffix := range []string{"+dfsg", "+ds"} {
		if i := strings.Index(v, suffix); i > 0 {
			v = v[:i]
		}
	}
	return v
}

// strippedControl is the control file of the stand-in package for the
// packages a recipe strips: it provides each at the version that was
// installed, so every dependency on them stays satisfied for apt.
func strippedControl(pkg string, provided []Package) []byte {
	var prov []string
	for _, p := range provided {
		prov = append(prov, p.Name+" (= "+p.Version+")")
	}
	var b bytes.Buffer
	b.WriteString("Package: " + pkg + "\n")
	b.WriteString("Version: 1\nArchitecture: all\nMaintainer: PyBox <pybox@localhost>\n")
	b.WriteString("Provides: " + strings.Join(prov, ", ") + "\n")
	b.WriteString("Description: packages PyBox removed from a runtime image\n")
	b.WriteString(" Their files are gone; this package stands in for them so that apt\n")
	b.WriteString(" stays consistent. Ask for one by name to install it for real (the\n")
	b.WriteString(" stripped packages it depends on directly come with it).\n")
	return b.Bytes()
}
