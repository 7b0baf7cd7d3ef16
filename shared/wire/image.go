package wire

import (
	"errors"
	"fmt"
	"strings"
)

// ImageAboutFile is where an image says what it holds: the image builder
// writes it, and the guest reads it when it mounts the image and puts it
// in ImageInfo, so hello and every receipt name the Python a run had.
// The file is JSON, an ImageAbout, at most MaxImageAboutBytes.
const ImageAboutFile = "/usr/share/pybox/image.json"

// ImagePreloadFile is the file, inside an image, that names the modules
// a warm box imports before its program arrives, one a line, in order:
// the image builder writes it, the box's launcher imports them, the agent
// reads it to know which module a warming box is at.
const ImagePreloadFile = "/usr/share/pybox/preload"

// MaxImageAboutBytes bounds ImageAboutFile.
const MaxImageAboutBytes = 4096

// Bounds of ImageAbout's fields.
const (
	MaxPythonVersionBytes = 16
	MaxSuiteBytes         = 32
)

// ImageAbout is what an image says about itself.
type ImageAbout struct {
	Python string `json:"python"` // e.g. "3.13.5"
	Suite  string `json:"suite"`  // the Debian suite it was built from, e.g. "trixie"
}

// DecodeImageAbout reads ImageAboutFile's content strictly and checks it.
func DecodeImageAbout(p []byte) (ImageAbout, error) {
	var a ImageAbout
	if len(p) > MaxImageAboutBytes {
		return a, fmt.Errorf("%s is %d bytes; the limit is %d", ImageAboutFile, len(p), MaxImageAboutBytes)
	}
	if err := DecodeStrict(p, &a, "the file"); err != nil {
		return ImageAbout{}, fmt.Errorf("%s: %w", ImageAboutFile, err)
	}
	if err := a.Check(); err != nil {
		return ImageAbout{}, fmt.Errorf("%s: %w", ImageAboutFile, err)
	}
	return a, nil
}

// Check checks both fields.
func (a ImageAbout) Check() error {
	if err := CheckPythonVersion(a.Python); err != nil {
		return err
	}
	return CheckSuite(a.Suite)
}

// CheckPythonVersion checks a Python version as images give it: three
// dot-separated numbers ("3.13.5").
func CheckPythonVersion(v string) error {
	parts := strings.Split(v, ".")
	if len(v) > MaxPythonVersionBytes || len(parts) != 3 {
		return fmt.Errorf("python version %q: want MAJOR.MINOR.MICRO, such as 3.13.5", v)
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return fmt.Errorf("python version %q: want MAJOR.MINOR.MICRO, such as 3.13.5", v)
		}
	}
	return nil
}

// CheckSuite checks a Debian suite's code name: lower-case letters.
func CheckSuite(s string) error {
	if s == "" {
		return errors.New("suite is empty")
	}
	if len(s) > MaxSuiteBytes || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz") != "" {
		return fmt.Errorf("suite %q: want a Debian code name such as trixie (lower-case letters, at most %d)", s, MaxSuiteBytes)
	}
	return nil
}
