//go:build !linux

package image

import "context"

// inJail needs Linux, as every build does.
func (bd *build) inJail(context.Context, jailRun, string, ...string) error { return errNeedsLinux }
