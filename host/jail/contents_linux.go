package jail

import (
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// kind is what the program may do with something the jail holds.
type kind int

const (
	tree    kind = iota // a directory of programs and libraries: read and run them
	file                // read it
	program             // read and run it
	device              // read and write its data, never its inode
	folder              // a data folder: read it; the very directory the supervisor opened
)

// entry is one thing a jail holds: a host path, where the program finds
// it, and what it may do with it.
type entry struct {
	host, jail string
	kind       kind
	folder     Folder // a folder's identity, for kind folder
}

// contents lists what a jail of spec holds: the same for a root of its
// own (buildRoot) and under Landlock (restrict), so the two modes give
// the program the same things. links are the host's system directories
// that are links (/lib -> usr/lib on a merged /usr).
func contents(spec *Spec) (entries []entry, links []string) {
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			// this host has none
		case fi.Mode()&fs.ModeSymlink != 0:
			links = append(links, d)
		default:
			entries = append(entries, entry{host: d, jail: d, kind: tree})
		}
	}
	for _, f := range systemFiles {
		if _, err := os.Stat(f); err == nil {
			entries = append(entries, entry{host: f, jail: f, kind: file})
		}
	}
	for _, d := range append(append([]string(nil), basicDevices...), spec.Devices...) {
		entries = append(entries, entry{host: d, jail: d, kind: device})
	}
	if !under(spec.Program, systemDirs) {
		// A QEMU outside /usr (PYBOX_QEMU): the program file alone.
		entries = append(entries, entry{host: spec.Program, jail: spec.Program, kind: program})
	}
	for _, f := range spec.Files {
		entries = append(entries, entry{host: f.Host, jail: f.Jail, kind: file})
	}
	for _, f := range spec.Folders {
		entries = append(entries, entry{host: f.Host, jail: f.Jail, kind: folder, folder: f})
	}
	return entries, links
}

// open opens e's host path (O_PATH: nothing is read), a folder only if
// it is the directory the supervisor opened.
func (e entry) open() (int, error) {
	if e.kind == folder {
		return sameDir(e.folder)
	}
	fd, err := unix.Open(e.host, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", e.host, err)
	}
	return fd, nil
}
