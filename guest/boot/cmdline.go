package boot

import (
	"fmt"
	"strconv"
	"strings"

	"pybox/shared/wire"
)

// imageParam is the kernel command line parameter that names an image:
// pybox.image=<name>:<sha256 hex>, one per image, in the order the host
// attached the disks.
const imageParam = "pybox.image="

// accelParam is how the host says what runs the guest's CPU:
// pybox.accel=kvm, tcg (QEMU's emulator) or vz (Virtualization.framework).
const accelParam = "pybox.accel="

// Accelerators the host may name.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
	AccelVZ  = "vz"
)

// ParseAccel returns the accelerator the host named on the kernel command
// line, or "" when it named none the guest knows (a host older than the
// parameter). The last one named counts, as the kernel does with its own
// parameters.
func ParseAccel(cmdline string) string {
	accel := ""
	for _, field := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(field, accelParam); ok {
			switch v {
			case AccelKVM, AccelTCG, AccelVZ:
				accel = v
			default:
				accel = ""
			}
		}
	}
	return accel
}

// ParseReportOrder reads pybox.report_order=N from the kernel command
// line: the order (a block of 2^N pages) from which free memory is
// reported to the host. ok is false when the host did not ask.
func ParseReportOrder(cmdline string) (order int, ok bool, err error) {
	for _, f := range strings.Fields(cmdline) {
		v, found := strings.CutPrefix(f, "pybox.report_order=")
		if !found {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 10 {
			return 0, false, fmt.Errorf("boot: pybox.report_order=%q: want 0 to 10", v)
		}
		return n, true, nil
	}
	return 0, false, nil
}

// ParseRuns reads pybox.runs=N from the kernel command line: how many
// runs at once the host sized the VM for. It is 1 when the host did not
// say (a host older than the parameter sized its VM for one).
func ParseRuns(cmdline string) (int, error) {
	runs := 1
	for _, f := range strings.Fields(cmdline) {
		v, found := strings.CutPrefix(f, "pybox.runs=")
		if !found {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > wire.MaxRunsAtOnce {
			return 1, fmt.Errorf("boot: pybox.runs=%q: want 1 to %d", v, wire.MaxRunsAtOnce)
		}
		runs = n
	}
	return runs, nil
}

// ParseImages reads the images the host attached from the kernel command
// line. Entries that break a rule are returned as errors and left out; a
// bad entry never stops the others.
func ParseImages(cmdline string) ([]wire.ImageInfo, []error) {
	var images []wire.ImageInfo
	var errs []error
	seen := map[string]bool{}
	for _, field := range strings.Fields(cmdline) {
		v, ok := strings.CutPrefix(field, imageParam)
		if !ok {
			continue
		}
		img, err := parseImage(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("boot: kernel parameter %q: %w", field, err))
		case seen[img.Name]:
			errs = append(errs, fmt.Errorf("boot: image %q is named twice on the kernel command line; the first one is used", img.Name))
		default:
			seen[img.Name] = true
			images = append(images, img)
		}
	}
	return images, errs
}

func parseImage(v string) (wire.ImageInfo, error) {
	name, digest, ok := strings.Cut(v, ":")
	if !ok {
		return wire.ImageInfo{}, fmt.Errorf("want <name>:<sha256 hex>")
	}
	if err := wire.CheckImageName(name); err != nil {
		return wire.ImageInfo{}, err
	}
	if !isSHA256Hex(digest) {
		return wire.ImageInfo{}, fmt.Errorf("digest %q is not 64 lower-case hex digits", digest)
	}
	return wire.ImageInfo{Name: name, Digest: digest}, nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
