package supervisor

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// tryLock takes the VM lock if nobody holds it. The supervisor holds it for
// its whole life, so a free lock means no supervisor, whatever files say.
func tryLock(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, &os.SyscallError{Syscall: "flock", Err: err}
	}
	return f, true, nil
}

// held reports whether a supervisor holds the lock.
func held(path string) (bool, error) {
	f, ok, err := tryLock(path)
	if err != nil {
		return false, fmt.Errorf("supervisor: %w", err)
	}
	if ok {
		f.Close()
	}
	return !ok, nil
}
