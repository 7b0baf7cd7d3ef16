package guestfiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"pybox/shared/archs"
)

// The variables that name the guest files.
const (
	EnvKernel    = "PYBOX_KERNEL"
	EnvInitramfs = "PYBOX_INITRAMFS"
)

// InitramfsName is the initramfs's file name wherever guest files sit.
const InitramfsName = "initramfs.cpio"

// KernelName is the kernel's file name for arch: the kernel builds a
// bzImage on x86_64 and an Image on arm64.
func KernelName(arch string) string {
	if arch == archs.X86_64 {
		return "bzImage"
	}
	return "Image"
}

// InstallDir is where the guest files of arch sit under an install
// prefix: PREFIX/lib/pybox/ARCH.
func InstallDir(prefix, arch string) string { return filepath.Join(prefix, "lib", "pybox", arch) }

// File is one guest file and the place that named it.
type File struct {
	Path string `json:"path"`
	// From is the place: "--kernel", "$PYBOX_KERNEL", "installed" or
	// "build tree" (and the same for the initramfs).
	From string `json:"from"`
}

// Files are the kernel and initramfs a VM start uses.
type Files struct {
	Arch      string `json:"arch"`
	Kernel    File   `json:"kernel"`
	Initramfs File   `json:"initramfs"`
}

// NotFoundError says that no place had a guest file, listing each place
// and what was there.
type NotFoundError struct {
	What   string // "kernel (bzImage)"
	Arch   string // "x86_64"
	Flag   string // "--kernel"
	Looked []string
}

func (e *NotFoundError) Error() string {
	if e.Arch != archs.Host() {
		return fmt.Sprintf("no %s guest %s for this pybox; looked at:\n  %s\n"+
			"fix: build them in a checkout with `make guest kernel ARCH=%s`, or pass %s FILE",
			e.Arch, e.What, strings.Join(e.Looked, "\n  "), e.Arch, e.Flag)
	}
	return fmt.Sprintf("no guest %s for this pybox; looked at:\n  %s\n"+
		"fix: install pybox with its guest files (`make install` in a checkout; a release bundle keeps them in lib/pybox/ beside its bin/pybox), "+
		"build them in a checkout with `make`, or pass %s FILE",
		e.What, strings.Join(e.Looked, "\n  "), e.Flag)
}

// Find finds the guest files for a VM start of the host's architecture.
// kernelFlag and initramfsFlag are the flags' values, "" when not given.
func Find(kernelFlag, initramfsFlag string) (*Files, error) {
	return FindArch(archs.Host(), kernelFlag, initramfsFlag)
}

// FindArch finds the guest files of a guest architecture, x86_64 or arm64.
func FindArch(arch, kernelFlag, initramfsFlag string) (*Files, error) {
	exe, err := executable()
	return find(search{exe: exe, exeErr: err, getenv: os.Getenv, arch: arch}, kernelFlag, initramfsFlag)
}

// executable is the real path of this program, links resolved: a pybox
// linked into ~/bin from an unpacked bundle finds the bundle's lib/.
func executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(exe)
}

// search is what Find looks with; tests give their own.
type search struct {
	exe    string
	exeErr error
	getenv func(string) string
	arch   string
}

func find(s search, kernelFlag, initramfsFlag string) (*Files, error) {
	k, err := s.one(KernelName(s.arch), "kernel", "--kernel", EnvKernel, kernelFlag)
	if err != nil {
		return nil, err
	}
	i, err := s.one(InitramfsName, "initramfs", "--initramfs", EnvInitramfs, initramfsFlag)
	if err != nil {
		return nil, err
	}
	return &Files{Arch: s.arch, Kernel: k, Initramfs: i}, nil
}

// place is one place a guest file may be named.
type place struct {
	from string // "--kernel", "$PYBOX_KERNEL", "installed", "build tree"
	path string // "" when this place names nothing
	// explicit places are what a person asked for: a missing file there
	// is an error rather than a reason to look further.
	explicit bool
	unset    string // why path is "", for the error
}

func (s search) places(name, flag, env, flagValue string) []place {
	ps := []place{{from: flag, path: flagValue, explicit: true, unset: "not given"}}
	// The variables name the host architecture's files: a VM of another
	// (an arm64 guest emulated on x86-64) does not take them.
	if s.arch == archs.Host() {
		ps = append(ps, place{from: "$" + env, path: s.getenv(env), explicit: true, unset: "not set"})
	}
	for _, p := range []struct{ from, dir string }{
		{"installed", filepath.Join("lib", "pybox", s.arch)},
		{"build tree", filepath.Join("build", s.arch)},
	} {
		pl := place{from: p.from, unset: fmt.Sprintf("unknown: cannot find this program (%v)", s.exeErr)}
		if s.exeErr == nil {
			pl.path = filepath.Join(filepath.Dir(filepath.Dir(s.exe)), p.dir, name)
		}
		ps = append(ps, pl)
	}
	return ps
}

// one finds one file: the first place that names it.
func (s search) one(name, what, flag, env, flagValue string) (File, error) {
	var looked []string
	for _, p := range s.places(name, flag, env, flagValue) {
		if p.path == "" {
			looked = append(looked, p.from+": "+p.unset)
			continue
		}
		abs, err := filepath.Abs(p.path)
		if err != nil {
			return File{}, fmt.Errorf("guestfiles: %w", err)
		}
		err = regular(abs)
		switch {
		case err == nil:
			return File{Path: abs, From: p.from}, nil
		case p.explicit:
			return File{}, fmt.Errorf("guestfiles: %s names the guest %s %s, which %v: name an existing file, or leave %s out to use the installed or built one",
				p.from, what, abs, err, p.from)
		}
		looked = append(looked, fmt.Sprintf("%s: %s: %v", p.from, abs, err))
	}
	return File{}, &NotFoundError{What: fmt.Sprintf("%s (%s)", what, name), Arch: s.arch, Flag: flag, Looked: looked}
}

func regular(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("does not exist")
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return errors.New("is not a regular file")
	}
	return nil
}
