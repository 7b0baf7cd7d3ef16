package boot

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// DataDir holds one read-only mount per data folder, /run/data/<name>;
// box-init binds the ones a run names at /data/<name> in the box.
const DataDir = "/run/data"

// dataParam names a data folder on the kernel command line:
// pybox.data=<name>, one per folder; the i-th is the host's share tagged
// pyboxdata<i> (host/vm.DataTag).
const dataParam = "pybox.data="

// ParseData reads the data folders' names from the kernel command line,
// in order. A bad entry is an error and keeps its place (its share is
// not mounted), so that the others keep their tags.
func ParseData(cmdline string) ([]string, []error) {
	var names []string
	var errs []error
	seen := map[string]bool{}
	for _, field := range strings.Fields(cmdline) {
		name, ok := strings.CutPrefix(field, dataParam)
		if !ok {
			continue
		}
		if err := wire.CheckDataName(name); err != nil || seen[name] {
			if err == nil {
				err = fmt.Errorf("named twice")
			}
			errs = append(errs, fmt.Errorf("boot: kernel parameter %q: %w", field, err))
			name = ""
		}
		seen[name] = true
		names = append(names, name)
	}
	return names, errs
}

// dataMounts are how a share is mounted, tried in order: 9p over virtio
// (QEMU), then virtio-fs (Virtualization.framework). cache=none: every
// read asks the host, so a run sees the copy as it is now.
var dataMounts = []struct{ fstype, options string }{
	{"9p", "trans=virtio,version=9p2000.L,msize=524288,cache=none,access=client"},
	{"virtiofs", ""},
}

// MountData mounts each data folder's share read-only at DataDir/<name>
// and returns the names it mounted. A share that cannot be mounted is
// logged and left out; the hello lists only what was mounted.
func MountData(cmdline string, logf func(string, ...any)) []string {
	names, errs := ParseData(cmdline)
	for _, err := range errs {
		logf("%v", err)
	}
	var mounted []string
	for i, name := range names {
		if name == "" {
			continue
		}
		tag := fmt.Sprintf("pyboxdata%d", i)
		if err := mountShare(tag, filepath.Join(DataDir, name)); err != nil {
			logf("boot: data folder %s left out: %v", name, err)
			continue
		}
		logf("boot: data folder %s (share %s) mounted read-only at %s", name, tag, filepath.Join(DataDir, name))
		mounted = append(mounted, name)
	}
	return mounted
}

func mountShare(tag, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var errs []string
	for _, m := range dataMounts {
		err := unix.Mount(tag, dir, m.fstype, unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, m.options)
		if err == nil {
			return nil
		}
		errs = append(errs, m.fstype+": "+err.Error())
	}
	os.Remove(dir)
	return fmt.Errorf("mount share %s at %s: %s", tag, dir, strings.Join(errs, "; "))
}
