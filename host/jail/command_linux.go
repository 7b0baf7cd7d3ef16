package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The helper's inherited descriptors. The listener comes first, so that
// the program finds it at 3 whatever else the helper held.
const (
	listenerFD = 3 // the program's guest channel (or /dev/null)
	specFD     = 4 // the Spec, as JSON, to EOF
	statusFD   = 5 // the helper's error, if any; EOF once the program runs
	lifeFD     = 6 // EOF once the supervisor is gone
)

// maxSpec bounds the Spec: it must fit a pipe's buffer, since it is
// written before the helper starts to read.
const maxSpec = 60 << 10

// Cmd is a program to run in a jail.
type Cmd struct {
	Spec *Spec
	// Helper is the argv of the helper: this pybox binary, run as
	// `pybox vm _jail` (see Main).
	Helper []string
	// HelperEnv is the helper's environment (none by default: the
	// program's is in the Spec).
	HelperEnv      []string
	Stdin          *os.File
	Stdout, Stderr *os.File
	Listener       *os.File // the program's descriptor 3, or nil

	cmd  *exec.Cmd
	life *os.File // held open while the program runs
}

// Start starts the helper and returns once the program runs in the jail,
// or once the jail could not be built: then the helper is gone, nothing
// ran, and the error says which step failed.
//
// The program gets SIGKILL when the thread that called Start exits (the
// parent-death signal is tied to the thread that forks): call it from a
// goroutine locked to its thread (runtime.LockOSThread) that stays until
// Wait returns.
func (c *Cmd) Start() error {
	spec, err := json.Marshal(c.Spec)
	if err != nil {
		return err
	}
	if len(spec) > maxSpec {
		return fmt.Errorf("jail: the jail's description is %d bytes, more than %d: name fewer images or data folders", len(spec), maxSpec)
	}
	var closeAfter []*os.File
	defer func() {
		for _, f := range closeAfter {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			closeAfter = append(closeAfter, r, w)
		}
		return r, w, err
	}
	specR, specW, err := pipe()
	if err != nil {
		return err
	}
	statusR, statusW, err := pipe()
	if err != nil {
		return err
	}
	// The life pipe's write end outlives Start when the program runs:
	// the helper takes it as the sign that the supervisor lives.
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return err
	}
	closeAfter = append(closeAfter, lifeR)
	defer func() {
		if c.life != lifeW {
			lifeW.Close()
		}
	}()
	if _, err := specW.Write(spec); err != nil {
		return fmt.Errorf("jail: handing the helper its jail: %w", err)
	}
	specW.Close()
	listener := c.Listener
	if listener == nil {
		if listener, err = os.Open(os.DevNull); err != nil {
			return err
		}
		closeAfter = append(closeAfter, listener)
	}
	cmd := exec.Command(c.Helper[0], c.Helper[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.Env = append([]string{}, c.HelperEnv...)
	cmd.ExtraFiles = []*os.File{listener, specR, statusW, lifeR}
	cmd.SysProcAttr = sysProcAttr(c.Spec)
	if err := cmd.Start(); err != nil {
		if noUserNamespace(err) {
			return fmt.Errorf("%w (%v)", ErrNoUserNamespace, err)
		}
		return fmt.Errorf("jail: %s: %w", c.Spec.Mode, err)
	}
	// Only the helper writes the status now: EOF once it has exec'd the
	// program (the pipe is close-on-exec there) or exited.
	statusW.Close()
	msg, _ := io.ReadAll(io.LimitReader(statusR, 4096))
	if len(msg) > 0 {
		cmd.Wait()
		return fmt.Errorf("jail: %s: %s", c.Spec.Mode, strings.TrimSpace(string(msg)))
	}
	c.cmd, c.life = cmd, lifeW
	return nil
}

// Process is the program's process: the helper's pid, which the program
// took over when the helper exec'd it.
func (c *Cmd) Process() *os.Process { return c.cmd.Process }

// Wait waits for the program to exit.
func (c *Cmd) Wait() error {
	err := c.cmd.Wait()
	c.life.Close()
	return err
}

// sysProcAttr is how the helper is cloned for spec's mode. The user
// namespace maps the user alone, to uid and gid 0 of the jail: the helper
// needs its capabilities there to build the jail, and drops them all
// before it runs the program. setgroups stays denied, so no group the
// user has can be dropped to get past a file's permissions. There is no
// Pdeathsig here: Go's check of the parent after arming it reads the
// parent's pid, which is 0 inside a new pid namespace; the helper arms it
// itself.
//
// A build's jail has no user namespace: the builder is root, the helper
// builds the jail as root and then becomes spec.User for good, so the
// program is an ordinary user of the host, not root of a namespace. It
// leads a process group of its own, which the builder stops whole.
func sysProcAttr(spec *Spec) *syscall.SysProcAttr {
	if spec.Mode == Build {
		flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP)
		if !spec.Network {
			flags |= unix.CLONE_NEWNET
		}
		return &syscall.SysProcAttr{Cloneflags: flags, Setpgid: true}
	}
	flags := uintptr(unix.CLONE_NEWUSER)
	if spec.Mode == Namespaces {
		flags |= unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
	}
	return &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
}

// ErrNoUserNamespace is a system that lets this user create no user
// namespace, which every jail needs.
var ErrNoUserNamespace = errors.New("jail: this system lets you create no user namespace, and every jail needs one " +
	"(see the sysctls kernel.unprivileged_userns_clone and user.max_user_namespaces)")

// noUserNamespace says whether the helper's clone failed for want of a
// user namespace: refused (EPERM, EACCES) or over the limit (ENOSPC).
func noUserNamespace(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES)
}
