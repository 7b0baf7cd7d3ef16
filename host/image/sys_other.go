//go:build !linux

package image

import (
	"errors"
	"os"
)

// errNeedsLinux is why an image cannot be built here: building runs the
// distribution's tools in a chroot. Images built on Linux can be copied
// into $PYBOX_HOME/images and used as they are.
var errNeedsLinux = errors.New("image: building images needs Linux (Debian 12): build them there and copy $PYBOX_HOME/images here")

func mountProc(string) error { return errNeedsLinux }

func detach(string) {}

// exchange is not available: swapIn falls back to moving the old aside.
func exchange(string, string) error { return errors.ErrUnsupported }

func isTerminal(*os.File) bool { return false }
