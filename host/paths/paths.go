package paths

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// EnvHome overrides the default home directory.
const EnvHome = "PYBOX_HOME"

// maxSocketPath is the longest path a unix socket address holds (sun_path
// is 108 bytes on Linux, 104 on macOS; keep to the smaller, with its NUL).
const maxSocketPath = 103

// Home returns $PYBOX_HOME, or ~/.local/share/pybox, as an absolute path.
func Home() (string, error) {
	if h := os.Getenv(EnvHome); h != "" {
		return filepath.Abs(h)
	}
	u, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("paths: no home directory (set %s): %w", EnvHome, err)
	}
	return filepath.Join(u, ".local", "share", "pybox"), nil
}

// ImagesDir is where the image store keeps images: ImagesDir/NAME/.
func ImagesDir(home string) string { return filepath.Join(home, "images") }

// KVMProbe is the file that caches a failed KVM probe for this host boot.
func KVMProbe(home string) string { return filepath.Join(home, "kvm-probe.json") }

// VM is the layout of the VM's private directory.
type VM struct{ Dir string }

// ForVM returns the VM directory layout under home.
func ForVM(home string) VM { return VM{Dir: filepath.Join(home, "vm")} }

// Socket is the supervisor's socket for clients (frames).
func (v VM) Socket() string { return v.path("pybox.sock") }

// ConsoleSocket is the supervisor's socket for `pybox vm console`.
func (v VM) ConsoleSocket() string { return v.path("console.sock") }

// GuestSocket is QEMU's end of the guest channel (virtio-serial).
func (v VM) GuestSocket() string { return v.path("guest.sock") }

// ConsoleLog is the serial console's log; ConsoleLog()+".1" is the one before.
func (v VM) ConsoleLog() string { return v.path("console.log") }

// SupervisorLog is the supervisor's own log (its stderr).
func (v VM) SupervisorLog() string { return v.path("supervisor.log") }

// LastExit says why the supervisor last stopped the VM on its own (a
// guest that could not be kept running); a start removes it.
func (v VM) LastExit() string { return v.path("last-exit.json") }

// State is state.json, written by the supervisor while the VM runs.
func (v VM) State() string { return v.path("state.json") }

// Config is the start configuration handed to the supervisor.
func (v VM) Config() string { return v.path("start.json") }

// Lock is held (flock) by the supervisor for its whole life.
func (v VM) Lock() string { return v.path("lock") }

func (v VM) path(name string) string { return filepath.Join(v.Dir, name) }

// Ensure creates the home and VM directories when they are missing, then
// checks the VM directory (see Check).
func (v VM) Ensure() error {
	if err := os.MkdirAll(filepath.Dir(v.Dir), 0o700); err != nil {
		return fmt.Errorf("paths: %w", err)
	}
	if err := os.Mkdir(v.Dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("paths: %w", err)
	}
	return v.Check()
}

// CheckSocket checks what a client trusts before it dials the supervisor:
// the home directory, owned by the current user and writable by nobody
// else (so that nobody can swap vm/ for a directory of their own), the
// VM directory (see Check), and the socket itself, a socket owned by the
// current user and private to them. The client then checks the peer's
// uid on the connection too.
func (v VM) CheckSocket() error {
	home := filepath.Dir(v.Dir)
	fi, err := os.Lstat(home)
	if err != nil {
		return fmt.Errorf("paths: %w", err)
	}
	if err := ownedPrivately(home, fi, 0o022, "chmod go-w "+home); err != nil {
		return err
	}
	if err := v.Check(); err != nil {
		return err
	}
	fi, err = os.Lstat(v.Socket())
	if err != nil {
		return err // not there: the caller says the VM is not running
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("paths: %s is not a socket: remove it, then start the VM again", v.Socket())
	}
	return ownedPrivately(v.Socket(), fi, 0o077, "pybox vm stop; pybox vm start")
}

// ownedPrivately checks that fi (of path) belongs to the current user and
// grants none of the permission bits in deny; fix says what to run if it
// does.
func ownedPrivately(path string, fi os.FileInfo, deny os.FileMode, fix string) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("paths: %s belongs to uid %d, not to you (uid %d): remove it, or set %s elsewhere",
			path, st.Uid, os.Getuid(), EnvHome)
	}
	if perm := fi.Mode().Perm(); perm&deny != 0 {
		return fmt.Errorf("paths: %s has mode %04o; it must be private to you: run `%s`", path, perm, fix)
	}
	return nil
}

// Check checks that the VM directory is a directory (not a link), owned by
// the current user, with no access for group or others, and that socket
// paths in it fit a unix socket address.
func (v VM) Check() error {
	fi, err := os.Lstat(v.Dir)
	if err != nil {
		return fmt.Errorf("paths: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("paths: %s is not a directory: remove it, or set %s elsewhere", v.Dir, EnvHome)
	}
	if err := ownedPrivately(v.Dir, fi, 0o077, "chmod 700 "+v.Dir); err != nil {
		return err
	}
	if n := len(v.ConsoleSocket()); n > maxSocketPath {
		return fmt.Errorf("paths: socket path %s is %d bytes, longer than a unix socket allows (%d): set %s to a shorter path",
			v.ConsoleSocket(), n, maxSocketPath, EnvHome)
	}
	return nil
}
