package image

import (
	"os"

	"golang.org/x/sys/unix"
)

// mountProc mounts a proc filesystem at dir, for Python run in a tree
// being built.
func mountProc(dir string) error {
	if err := unix.Mount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return &os.SyscallError{Syscall: "mount proc", Err: err}
	}
	return nil
}

// detach unmounts mp lazily; what is left is checked by the caller.
func detach(mp string) { unix.Unmount(mp, unix.MNT_DETACH) }

// exchange swaps two paths in one step (renameat2 RENAME_EXCHANGE).
func exchange(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
