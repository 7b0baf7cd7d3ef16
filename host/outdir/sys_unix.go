//go:build unix

package outdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// lockWait bounds how long admission waits for the folder's lock. Holders
// keep it for a read and a write, or one walk of the folder: seconds for
// a folder of a million entries.
const lockWait = 30 * time.Second

// lockLedger opens the folder's ledger (making it when create is set) and
// takes flock(2) on it, exclusive. The lock belongs to the open file, not
// the name: a ledger deleted by hand and made anew while this waited is
// another file, so the name is looked up again once the lock is held.
func lockLedger(dir string, create bool) (*os.File, error) {
	path := filepath.Join(dir, ledgerName)
	deadline := time.Now().Add(lockWait)
	flags := os.O_RDWR | unix.O_NOFOLLOW
	if create {
		flags |= os.O_CREATE
	}
	for {
		f, err := os.OpenFile(path, flags, 0o644)
		if err != nil {
			return nil, err
		}
		if err := flock(f, deadline); err != nil {
			f.Close()
			return nil, err
		}
		same, err := stillNamed(f, path)
		switch {
		case err != nil:
			f.Close()
			return nil, err
		case same:
			return f, nil
		}
		f.Close()
	}
}

// flock takes f's lock, trying until deadline: a blocking flock cannot be
// given up, and a server stuck on a folder must still answer its agent.
func flock(f *os.File, deadline time.Time) error {
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			return &os.SyscallError{Syscall: "flock", Err: err}
		case time.Now().After(deadline):
			return fmt.Errorf("another pybox has held the lock on %s for over %v: wait for it, or end the pybox process that holds it (fuser %[1]s names it)", f.Name(), lockWait)
		}
		time.Sleep(wait)
	}
}

// stillNamed reports whether path still names the open file f.
func stillNamed(f *os.File, path string) (bool, error) {
	var open, named unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &open); err != nil {
		return false, &os.SyscallError{Syscall: "fstat", Err: err}
	}
	if err := unix.Lstat(path, &named); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return open.Dev == named.Dev && open.Ino == named.Ino, nil
}

// unlock lets the next one in; closing the file drops its flock.
func unlock(f *os.File) { f.Close() }

// stampOf is the folder's own stat, which changes whenever an entry is
// added to it, removed from it or renamed in it.
func stampOf(dir string) (stamp, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return stamp{}, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	return stamp{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Nlink: uint64(st.Nlink),
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}, nil
}

// fileUsage is what the open file f takes, as du counts it.
func fileUsage(f *os.File) (Usage, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return Usage{}, &os.SyscallError{Syscall: "fstat", Err: err}
	}
	return Usage{Bytes: st.Blocks * 512, Entries: 1}, nil
}

// alive reports whether process pid of this host may still run: EPERM is
// a process of another user, alive.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
