package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"pybox/host/mcp"
	"pybox/host/paths"
	"pybox/host/service"
	"pybox/host/vm"
	"pybox/shared/wire"
)

func init() {
	vmCommands["service"] = &command{name: "service", summary: "print a user service file that keeps the VM running (systemd, launchd)", run: vmService}
}

func vmService(args []string) int {
	fs := flags("vm service", "[systemd|launchd] [--images LIST] [--runs N] [--memory MiB] [--cpus N] [--accel A]", `
Print a per-user service file that runs the VM after every reboot without
anyone typing `+"`pybox vm start`"+`: a systemd user unit (the default on Linux)
or a launchd agent (the default on macOS). It runs this pybox, by its full
path, as `+"`pybox vm start --foreground`"+` with the flags given here, and
$PYBOX_HOME if it is set. The file's first lines say where to put it and
how to enable it. No root is needed.`)
	images := fs.String("images", "", "images to attach (comma-separated; default: the built-in images that are built)")
	runs := fs.Int("runs", vm.DefaultRuns, fmt.Sprintf("runs at once the VM is sized for, 1–%d", wire.MaxRunsAtOnce))
	memory := fs.Int("memory", 0, fmt.Sprintf("guest memory in MiB, at least %d (default: sized for --runs, %d MiB for %d)", vm.MinMemoryMiB, vm.DefaultMemoryMiB, vm.DefaultRuns))
	cpus := fs.Int("cpus", vm.DefaultCPUs, "guest CPUs")
	accel := fs.String("accel", "auto", "accelerator: auto, kvm or tcg")
	pos, code, err := parse(fs, args)
	if err != nil {
		return code
	}
	kind := map[string]string{"darwin": "launchd"}[runtime.GOOS]
	if kind == "" {
		kind = "systemd"
	}
	switch {
	case len(pos) > 1:
		return usageError(fs, "vm service takes at most one of systemd, launchd")
	case len(pos) == 1 && pos[0] != "systemd" && pos[0] != "launchd":
		return usageError(fs, "vm service writes systemd or launchd files, not %q", pos[0])
	case len(pos) == 1:
		kind = pos[0]
	}
	if *memory == 0 {
		*memory = vm.MemoryForRuns(*runs)
	}
	spec, err := serviceSpec(fs, *images, *runs, *memory, *cpus, *accel)
	if err != nil {
		return fail("%v", err)
	}
	var text string
	if kind == "launchd" {
		// launchd has no journal: the agent's output goes to a log file.
		home, herr := os.UserHomeDir()
		if herr != nil {
			return fail("no home directory for the launchd agent's log: %v", herr)
		}
		spec.Log = filepath.Join(home, "Library", "Logs", "pybox-vm.log")
		text, err = service.Launchd(spec)
	} else {
		text, err = service.Systemd(spec)
	}
	if err != nil {
		return fail("%v", err)
	}
	fmt.Print(text)
	return exitOK
}

// serviceSpec checks the start flags given (only those) and says what
// the service runs.
func serviceSpec(fs *flag.FlagSet, images string, runs, memory, cpus int, accel string) (service.Spec, error) {
	exe, err := os.Executable()
	if err != nil {
		return service.Spec{}, fmt.Errorf("cannot find this program's path: %v", err)
	}
	s := service.Spec{Exe: exe}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "images":
			for _, n := range mcp.ParseNames(images) {
				if err := wire.CheckImageName(n); err != nil && bad == nil {
					bad = err
				}
			}
			s.Args = append(s.Args, "--images", images)
		case "memory", "cpus", "runs":
			s.Args = append(s.Args, "--"+f.Name, f.Value.String())
		case "accel":
			if accel != "auto" && accel != "kvm" && accel != "tcg" {
				bad = fmt.Errorf("accel %q: use auto, kvm or tcg", accel)
			}
			s.Args = append(s.Args, "--accel", accel)
		}
	})
	if bad != nil {
		return s, bad
	}
	if runs < 1 || runs > wire.MaxRunsAtOnce {
		return s, fmt.Errorf("--runs %d: give 1–%d", runs, wire.MaxRunsAtOnce)
	}
	if err := vm.CheckSize(memory, cpus); err != nil {
		return s, err
	}
	if os.Getenv(paths.EnvHome) != "" {
		if s.Home, err = paths.Home(); err != nil {
			return s, err
		}
	}
	return s, nil
}
