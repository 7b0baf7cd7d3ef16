//go:build linux

package box

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"pybox/guest/imagefs"
	"pybox/shared/mountinfo"
	"pybox/shared/wire"
)

// Caps of the box's /tmp.
const (
	tmpBytes  = wire.DefaultTmpBytes
	tmpInodes = wire.DefaultTmpInodes
)

// mplSeed is where an image keeps a prebuilt matplotlib cache, copied
// into MPLCONFIGDIR so that the first import does not spend seconds
// building a font list. It is read through imagefs and bounded: the
// image's maker is not trusted, and the copy lands in the run's tmpfs.
const (
	mplSeed      = "usr/share/pybox/mplconfig"
	mplSeedFiles = 64 // entries of any kind; matplotlib writes one or two files
	mplSeedBytes = 4 << 20
	mplConfig    = ".config/matplotlib" // under the box's /tmp; MPLCONFIGDIR
)

// staging is the tmpfs that becomes the box's /tmp:
// <root>/<run_id>/tmp in the agent.
type staging struct {
	base string // <root>/<run_id>
	tmp  string // base/tmp, the mount point
	ids  hostIDs
}

// makeStaging mounts the run's tmpfs and fills it: input/ with the
// request's files, read-only to the program, output/ owned by it, and
// MPLCONFIGDIR seeded from the image.
func makeStaging(root, runID, image string, files []wire.InputFile, ids hostIDs) (*staging, error) {
	s := &staging{base: filepath.Join(root, runID), ids: ids}
	s.tmp = filepath.Join(s.base, "tmp")
	// The box's root walks these directories to bind the tmpfs: it is
	// "other" to them, so they need o+x.
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, err
	}
	if err := os.Mkdir(s.base, 0o711); err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	if err := os.Mkdir(s.tmp, 0o700); err != nil {
		return s, err
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777,uid=%d,gid=%d", tmpBytes, tmpInodes, ids.root, ids.root)
	if err := unix.Mount("pybox-tmp", s.tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return s, fmt.Errorf("mount the staging tmpfs: %w", err)
	}
	steps := []func() error{
		func() error { return s.writeInput(files) },
		func() error { return mkdirOwned(filepath.Join(s.tmp, "output"), 0o755, ids.program) },
		func() error { return s.seedMPL(image) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return s, err
		}
	}
	return s, nil
}

// writeInput writes the request's files into input/, 0444 in a 0555
// directory, both owned by the box's root: the program reads them and
// can neither change nor remove them. Names were checked by wire.Run.Check.
func (s *staging) writeInput(files []wire.InputFile) error {
	dir := filepath.Join(s.tmp, "input")
	if err := mkdirOwned(dir, 0o755, s.ids.root); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeOwned(filepath.Join(dir, f.Name), f.Content, 0o444, s.ids.root); err != nil {
			return fmt.Errorf("input file %q: %w", f.Name, err)
		}
	}
	return os.Chmod(dir, 0o555)
}

// seedMPL makes MPLCONFIGDIR and copies the image's prebuilt cache into it.
func (s *staging) seedMPL(image string) error {
	cfg := filepath.Join(s.tmp, ".config")
	if err := mkdirOwned(cfg, 0o755, s.ids.program); err != nil {
		return err
	}
	mpl := filepath.Join(s.tmp, mplConfig)
	if err := mkdirOwned(mpl, 0o755, s.ids.program); err != nil {
		return err
	}
	files, err := readMPLSeed(image)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := writeOwned(filepath.Join(mpl, f.Name), f.Data, 0o644, s.ids.program); err != nil {
			return err
		}
	}
	return nil
}

// readMPLSeed reads the regular files of the image's mplSeed; an image
// without one (without matplotlib), or no image at all, has none. A seed that is a link,
// lies under one, or holds too much refuses the box: a link could lead to
// a data folder's mount in the agent, and copy its files into every box
// of the image.
func readMPLSeed(image string) ([]imagefs.File, error) {
	img, err := imagefs.Open(image)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer img.Close()
	files, err := img.ReadDir(mplSeed, mplSeedFiles, mplSeedBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the matplotlib seed: %w", err)
	}
	return files, nil
}

func mkdirOwned(dir string, mode os.FileMode, id int) error {
	if err := os.Mkdir(dir, mode); err != nil {
		return err
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		return err
	}
	return os.Lchown(dir, id, id)
}

func writeOwned(path string, content []byte, mode os.FileMode, id int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if err == nil {
		err = f.Chown(id, id)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// busyUnmountWait is the longest wait between tries of an unmount that
// finds the tmpfs busy: about 1.3 s in all.
const busyUnmountWait = 640 * time.Millisecond

// remove unmounts the tmpfs and removes the staging directories.
func (s *staging) remove() error {
	err := unix.Unmount(s.tmp, 0)
	// Another box being started holds, for a moment, a copy of every
	// descriptor the agent has open (this box's output files among them,
	// while it is collected): the child of clone keeps them until its
	// execve, which waits for the parent to write its id maps. That
	// keeps the tmpfs busy for a few milliseconds, longer under an
	// emulated CPU; it is let go without anyone's help.
	for wait := 10 * time.Millisecond; errors.Is(err, unix.EBUSY) && wait <= busyUnmountWait; wait *= 2 {
		time.Sleep(wait)
		err = unix.Unmount(s.tmp, 0)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: not mounted
		return fmt.Errorf("unmount %s: %w", s.tmp, err)
	}
	for _, dir := range []string{s.tmp, s.base} {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("rmdir %s: %w", dir, err)
		}
	}
	return nil
}

// leftovers says what of the staging is still there: mounts at or below
// base in the agent's mount table, and the directory itself.
func (s *staging) leftovers() []string {
	var left []string
	mounts, err := mountsUnder("/proc/self/mountinfo", s.base)
	if err != nil {
		left = append(left, "mount table unreadable: "+err.Error())
	}
	for _, m := range mounts {
		left = append(left, "mount "+m)
	}
	if _, err := os.Lstat(s.base); !errors.Is(err, os.ErrNotExist) {
		left = append(left, "directory "+s.base)
	}
	return left
}

// mountsUnder lists the mount points in the mount table at path that are
// at or below dir.
func mountsUnder(path, dir string) ([]string, error) {
	points, err := mountinfo.Read(path)
	return mountinfo.Under(points, dir), err
}

// digestInputs names each input file with its size and sha256.
func digestInputs(files []wire.InputFile) []wire.FileDigest {
	out := make([]wire.FileDigest, 0, len(files))
	for _, f := range files {
		sum := sha256.Sum256(f.Content)
		out = append(out, wire.FileDigest{Name: f.Name, Bytes: int64(len(f.Content)), SHA256: hex.EncodeToString(sum[:])})
	}
	return out
}
