package outdir

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// The cost model: what an entry of the folder takes on the disk.
const (
	// BlockSize is the unit a file's bytes are rounded up to while a run
	// writes: the block of ext4, XFS, btrfs and APFS, and a page of the
	// guest's tmpfs. On a filesystem with larger blocks, the measure at
	// the run's end records what they really took.
	BlockSize = 4096
	// EntryCost is added for every file and directory: its inode (256
	// bytes on ext4, more with extended attributes) and its name in the
	// directory above, which du does not show for a file (an empty file
	// has no blocks) and shows for a directory only once its blocks grow.
	// 4 KiB is more than they take, on purpose: it prices an entry like
	// the smallest file, so that a million empty files cost 4 GiB, not 0.
	EntryCost = 4096
	// DefaultMaxEntries bounds the entries a folder with a bound holds,
	// whatever their cost: filesystems run out of inodes, and a backup or
	// a search over the folder slows with every entry.
	DefaultMaxEntries = 1_000_000
)

// runDirCost is what a run's directory costs before it holds a file: its
// entry and its first block.
const runDirCost = EntryCost + BlockSize

// MaxRunCost is the most a run's directory can cost: all of a run's /tmp
// (a tmpfs, so its files' bytes are already whole pages) and the entry of
// each file it may deliver and of the directory itself.
const MaxRunCost = wire.DefaultTmpBytes + wire.MaxDeliveredFiles*EntryCost + runDirCost

// Usage is what a tree holds: Bytes as du counts them (allocated blocks,
// st_blocks*512) and its Entries, itself included.
type Usage struct {
	Bytes   int64 `json:"bytes"`
	Entries int64 `json:"entries"`
}

// Cost is what the bounds count: du's bytes, and EntryCost for each entry.
func (u Usage) Cost() int64 { return u.Bytes + u.Entries*EntryCost }

func (u *Usage) add(v Usage) {
	u.Bytes += v.Bytes
	u.Entries += v.Entries
}

// blocks is n bytes of a file rounded up to whole blocks.
func blocks(n int64) int64 { return (n + BlockSize - 1) / BlockSize * BlockSize }

// FileCost is what a file of size bytes is predicted to cost.
func FileCost(size int64) int64 { return blocks(size) + EntryCost }

// Measure is what path holds, as du -s would count it (symbolic links not
// followed) and with its entries. A path that does not exist holds
// nothing.
func Measure(path string) (Usage, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return Usage{}, nil // gone since it was listed
		}
		return Usage{}, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return measureFrom(path, &st, nil)
}

// measureFolder is Measure of an output folder, with the names skip says
// true of left out (the directories of runs in progress, whose
// reservations count for them). The folder itself may be a symbolic
// link, as ~/pybox-results may lead to a larger disk: it is followed.
func measureFolder(dir string, skip func(name string) bool) (Usage, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return Usage{}, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	return measureFrom(dir, &st, skip)
}

// measureFrom is what path, whose stat is st, holds.
func measureFrom(path string, st *unix.Stat_t, skip func(name string) bool) (Usage, error) {
	u := Usage{Bytes: st.Blocks * 512, Entries: 1}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return u, nil
	}
	names, err := readNames(path)
	if err != nil {
		return Usage{}, err
	}
	for _, n := range names {
		if skip != nil && skip(n) {
			continue
		}
		c, err := Measure(filepath.Join(path, n))
		if err != nil {
			return Usage{}, err
		}
		u.add(c)
	}
	return u, nil
}

// readNames lists a directory; one removed meanwhile has no names.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err == io.EOF {
		err = nil
	}
	return names, err
}
