package mcp

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"pybox/shared/wire"
)

// DefaultImage is the image a call gets when it names none (if the server
// allows it; otherwise the first allowed image).
const DefaultImage = "stdlib"

// Options are the ceilings the person who configures the server sets. An
// agent can only ask for less.
type Options struct {
	// Images an agent may use, in the order given. Never empty after Check.
	Images []string
	// MaxTimeout is the longest run an agent may ask for, in seconds:
	// more than 0, at most wire.MaxTimeoutSeconds.
	MaxTimeout float64
}

// DefaultOptions are the documented defaults: stdlib only, 2 seconds.
func DefaultOptions() Options {
	return Options{Images: []string{DefaultImage}, MaxTimeout: wire.DefaultTimeoutSeconds}
}

// ParseImages parses --images: names separated by commas.
func ParseImages(list string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("--images is empty: name at least one image, for example --images stdlib")
	}
	return names, nil
}

// ParseMaxTimeout parses --max-timeout: seconds, more than 0 and at most 30.
func ParseMaxTimeout(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("--max-timeout %q is not a number of seconds: give one from 0 to %d, for example --max-timeout 30", s, wire.MaxTimeoutSeconds)
	}
	return v, checkMaxTimeout(v)
}

func checkMaxTimeout(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > wire.MaxTimeoutSeconds {
		return fmt.Errorf("--max-timeout %v is refused: it must be more than 0 and at most %d seconds", v, wire.MaxTimeoutSeconds)
	}
	return nil
}

// Check checks the options, as at start-up: a server with a bad option
// does not start.
func (o *Options) Check() error {
	if len(o.Images) == 0 {
		return errors.New("no image allowed: name at least one with --images, for example --images stdlib")
	}
	seen := map[string]bool{}
	for _, n := range o.Images {
		if err := wire.CheckImageName(n); err != nil {
			return fmt.Errorf("--images: %w", err)
		}
		if seen[n] {
			return fmt.Errorf("--images names %q twice", n)
		}
		seen[n] = true
	}
	return checkMaxTimeout(o.MaxTimeout)
}

// defaultImage is the image of a call that names none.
func (o *Options) defaultImage() string {
	for _, n := range o.Images {
		if n == DefaultImage {
			return n
		}
	}
	return o.Images[0]
}

// defaultTimeout is the timeout of a call that asks for none: 2 seconds,
// or the ceiling when it is lower.
func (o *Options) defaultTimeout() float64 {
	return math.Min(wire.DefaultTimeoutSeconds, o.MaxTimeout)
}

// allows reports whether an agent may use image.
func (o *Options) allows(image string) bool {
	for _, n := range o.Images {
		if n == image {
			return true
		}
	}
	return false
}

// Args renders the options as `pybox mcp` flags, for configuration
// snippets; defaults are left out.
func (o *Options) Args() []string {
	var args []string
	if len(o.Images) != 1 || o.Images[0] != DefaultImage {
		args = append(args, "--images", strings.Join(o.Images, ","))
	}
	if o.MaxTimeout != wire.DefaultTimeoutSeconds {
		args = append(args, "--max-timeout", strconv.FormatFloat(o.MaxTimeout, 'f', -1, 64))
	}
	return args
}
