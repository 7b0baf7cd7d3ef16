package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"pybox/shared/archs"
	"pybox/shared/wire"
)

// CheckArch checks an architecture asked for by name.
func CheckArch(a string) error {
	if err := archs.Check(a); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}

// checkArchName holds an architecture read from a meta.json or a recipe
// to a grammar, not to archs.All: an image a newer pybox built for an
// architecture this one does not know still imports (and says what it
// is), as an image of an unknown suite does. The name becomes part of a
// store directory's name (see dirName), so it must be a plain word.
func checkArchName(a string) error {
	ok := a != "" && len(a) <= 16 && a[0] >= 'a' && a[0] <= 'z' &&
		strings.Trim(a, "abcdefghijklmnopqrstuvwxyz0123456789_") == ""
	if !ok {
		return fmt.Errorf("architecture %.40q: want a name such as %s (lower-case letters, digits and '_', at most 16)", a, strings.Join(archs.All, " or "))
	}
	return nil
}

// debianArch is Debian's name of an architecture (mmdebstrap --arch, dpkg).
func debianArch(a string) string {
	if a == archs.X86_64 {
		return "amd64"
	}
	return a
}

// qemuArch is qemu-user's name of an architecture, as its binfmt_misc
// entry (qemu-NAME) has it.
func qemuArch(a string) string {
	if a == archs.Arm64 {
		return "aarch64"
	}
	return a
}

// The store keeps an image of each architecture apart: x86_64's in
// images/NAME, as every image was before images recorded their
// architecture (so those stay where they are, and keep working), and
// another's in images/NAME@ARCH. '@' is never part of an image name, so
// the two cannot meet.
func dirName(name, arch string) string {
	if arch == archs.X86_64 {
		return name
	}
	return name + "@" + arch
}

// parseDirName is dirName's inverse; ok is false for a directory that is
// no image's (the store's .tmp-* and .old-* work files).
func parseDirName(s string) (name, arch string, ok bool) {
	name, arch, found := strings.Cut(s, "@")
	if !found {
		arch = archs.X86_64
	} else if checkArchName(arch) != nil || arch == archs.X86_64 {
		return "", "", false
	}
	return name, arch, wire.CheckImageName(name) == nil
}

// buildCommand is the command that builds image name for arch, for the
// advice in errors: with --arch only when it is not this machine's.
func buildCommand(name, arch string) string {
	c := "pybox image build " + name
	if arch != archs.Host() {
		c += " --arch " + arch
	}
	return c
}

// binfmtDir is where the kernel lists the interpreters binfmt_misc runs
// foreign programs with.
const binfmtDir = "/proc/sys/fs/binfmt_misc"

// emulation says whether this machine can build images for arch, and
// what to do when it cannot. Another architecture's image is built by
// running its programs (dpkg's scripts, python3 for byte-compiling and
// the checks) in the tree, through qemu-user, which the kernel starts
// by itself through binfmt_misc; mmdebstrap also wants arch-test to see
// that it works. Checked before anything is built, rather than fail deep
// inside mmdebstrap. dir is binfmtDir (tests give another); lookPath
// finds programs.
func emulation(arch, dir string, lookPath func(string) (string, error)) error {
	if arch == archs.Host() {
		return nil
	}
	install := "apt-get install qemu-user-static binfmt-support arch-test (or `make deps`)"
	q := "qemu-" + qemuArch(arch)
	if _, err := os.Stat(filepath.Join(dir, "status")); err != nil {
		return fmt.Errorf("building %s images on this %s machine runs their programs through qemu-user, but binfmt_misc is not mounted (%s has no status file): "+
			"mount it with `mount -t binfmt_misc binfmt_misc %s`, then `update-binfmts --enable %s`; if qemu-user-static is not installed: %s",
			arch, archs.Host(), dir, binfmtDir, q, install)
	}
	b, err := os.ReadFile(filepath.Join(dir, q))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("building %s images on this %s machine runs their programs through qemu-user, but binfmt_misc has no %s entry: "+
			"%s; if it is installed, register it with `update-binfmts --enable %s`", arch, archs.Host(), q, install, q)
	}
	if err != nil {
		return fmt.Errorf("building %s images: %w", arch, err)
	}
	lines := strings.Split(string(b), "\n")
	if lines[0] != "enabled" {
		return fmt.Errorf("building %s images on this %s machine runs their programs through qemu-user, but binfmt_misc's %s entry is %s: enable it with `update-binfmts --enable %s`",
			arch, archs.Host(), q, lines[0], q)
	}
	// Without the F flag the kernel looks for the interpreter inside the
	// tree being built, where there is none.
	for _, l := range lines {
		if flags, ok := strings.CutPrefix(l, "flags: "); ok && !strings.Contains(flags, "F") {
			return fmt.Errorf("building %s images: binfmt_misc's %s entry lacks the F flag (flags %q), so programs in the tree being built cannot find qemu: "+
				"register the entry qemu-user-static ships: `update-binfmts --disable %s`, then `update-binfmts --enable %s`", arch, q, flags, q, q)
		}
	}
	if _, err := lookPath("arch-test"); err != nil {
		return fmt.Errorf("building %s images on this %s machine: mmdebstrap needs arch-test to build for another architecture: apt-get install arch-test (or `make deps`)", arch, archs.Host())
	}
	return nil
}

// checkEmulation is emulation on this machine.
func checkEmulation(arch string) error { return emulation(arch, binfmtDir, exec.LookPath) }
