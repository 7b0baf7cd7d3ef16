package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"pybox/shared/wire"
)

// WarmList is the file, inside an image, that lists the files a first run
// reads (one absolute path a line): the interpreter, its shared
// libraries, the byte code and data files the recipe's warm code opens.
// Measured under TCG (data image, import pandas and matplotlib.pyplot):
// a cold first run took over 30 s and charged about 60 MiB of image pages
// to its memory peak; after reading these files once (118 MiB in about
// 7.5 s) the first run was as fast as a warm one and its peak the same.
// The guest agent reads them at VM start, in its own cgroup.
const WarmList = "/usr/share/pybox/warm.list"

// warmScript runs the recipe's warm code and prints every file it read:
// what Python opened (audit hook "open": byte code, data files) and what
// is mapped (the interpreter, shared libraries, extension modules).
const warmScript = `
import os, sys
opened = set()
def hook(event, args):
    if event == "open" and isinstance(args[0], str):
        opened.add(args[0])
sys.addaudithook(hook)
exec(compile(os.environ["PYBOX_WARM"], "<warm>", "exec"), {"__name__": "__warm__"})
with open("/proc/self/maps") as maps:
    for line in maps:
        f = line.split()
        if len(f) >= 6 and f[5].startswith("/"):
            opened.add(f[5])
for p in sorted({os.path.realpath(p) for p in opened}):
    if os.path.isfile(p) and not p.startswith(("/proc/", "/sys/", "/dev/", "/tmp/", "/run/")):
        print("WARM " + p)
`

// warmCode is the recipe's warm code, else its base's.
func (bd *build) warmCode() string {
	if bd.r.Warm != "" || bd.base == nil {
		return bd.r.Warm
	}
	return bd.base.Recipe.Warm
}

// preload is the recipe's preload list, else its base's.
func (bd *build) preload() []string {
	if len(bd.r.Preload) > 0 || bd.base == nil {
		return bd.r.Preload
	}
	return bd.base.Recipe.Preload
}

// warm writes WarmList. It runs after check, in the same environment (the
// box's, with the matplotlib cache in place), with /proc mounted for the
// memory maps.
func (bd *build) warm(ctx context.Context) error {
	code := bd.warmCode()
	if code == "" {
		code = "pass"
	}
	// The preload list is imported here too, as a warm box will: an
	// import that fails fails the build, and what it reads is warmed.
	for _, m := range bd.preload() {
		code += "\nimport " + m
	}
	if !bd.thirdParty {
		// The jail mounts its own.
		proc := filepath.Join(bd.tree, "proc")
		if err := mountProc(proc); err != nil {
			return err
		}
		defer detach(proc)
	}
	env := bd.chrootEnv("HOME=/tmp", "MPLCONFIGDIR=/tmp/.config/matplotlib", "MPLBACKEND=Agg", "OPENBLAS_NUM_THREADS=1", "PYBOX_WARM="+code)
	var files []string
	err := bd.python3(ctx, func(l string) {
		if p, ok := strings.CutPrefix(l, "WARM "); ok {
			files = append(files, p)
		}
	}, env, []string{"/tmp/.config"}, "-I", "-c", warmScript)
	if err != nil {
		return fmt.Errorf("warm code %q: %w", code, err)
	}
	slices.Sort(files)
	var size int64
	for _, f := range files {
		if fi, err := os.Stat(filepath.Join(bd.tree, f)); err == nil {
			size += fi.Size()
		}
	}
	bd.warmFiles, bd.warmBytes = len(files), size
	bd.p.Status("%d files, %s", len(files), mib(size))
	dst := filepath.Join(bd.tree, WarmList)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(dst, []byte(strings.Join(files, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	var list string
	for _, m := range bd.preload() {
		list += m + "\n"
	}
	return os.WriteFile(filepath.Join(bd.tree, wire.ImagePreloadFile), []byte(list), 0o644)
}
