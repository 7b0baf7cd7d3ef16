package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"pybox/host/guestfiles"
	"pybox/host/jail"
	"pybox/host/mcp"
	"pybox/host/paths"
	"pybox/host/service"
	"pybox/host/supervisor"
	"pybox/host/vm"
	"pybox/shared/archs"
	"pybox/shared/wire"
)

func init() {
	register(&command{name: "vm", summary: "start, stop and look at the VM", run: vmMain})
}

// vmCommands are the `pybox vm` subcommands.
var vmCommands = map[string]*command{
	"start":   {name: "start", summary: "boot the VM and wait until the guest agent answers", run: vmStart},
	"status":  {name: "status", summary: "say whether the VM runs, and how", run: vmStatus},
	"stop":    {name: "stop", summary: "power the VM off cleanly", run: vmStop},
	"console": {name: "console", summary: "attach the terminal to the VM's serial console", run: vmConsole},
	"logs":    {name: "logs", summary: "print the VM's console log", run: vmLogs},
	// The detached supervisor: `pybox vm start` runs it, people do not.
	supervisorCommand: {name: supervisorCommand, hidden: true, run: vmSupervise},
	// The jail's helper: the supervisor starts it in QEMU's namespaces,
	// and it execs QEMU once the jail is built.
	jail.HelperCommand: {name: jail.HelperCommand, hidden: true, run: func([]string) int { return jail.Main() }},
}

const supervisorCommand = "_supervise"

func vmMain(args []string) int { return subcommand("vm", vmCommands, vmUsage, args) }

func vmUsage(w *os.File) {
	fmt.Fprint(w, "usage: pybox vm COMMAND [flags]\n\nThe VM runs in the background, owned by a supervisor process; PyBox runs every program inside it.\n\ncommands:\n")
	printCommands(w, vmCommands)
	fmt.Fprint(w, "\nRun `pybox vm COMMAND --help` for a command's flags.\n")
}

func home() (string, error) { return paths.Home() }

// dataFolders collects --data NAME=DIR flags.
type dataFolders []vm.DataShare

func (f *dataFolders) String() string { return "" }

func (f *dataFolders) Set(v string) error {
	name, dir, ok := strings.Cut(v, "=")
	if !ok || name == "" || dir == "" {
		return errors.New("want NAME=DIR")
	}
	if err := wire.CheckDataName(name); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", abs)
	}
	*f = append(*f, vm.DataShare{Name: name, Folder: abs})
	return nil
}

// imageFiles collects --image-file NAME=PATH flags.
type imageFiles []vm.Image

func (f *imageFiles) String() string { return "" }

func (f *imageFiles) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return errors.New("want NAME=PATH")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	*f = append(*f, vm.Image{Name: name, Path: abs})
	return nil
}

func vmStart(args []string) int {
	fs := flags("vm start", "[flags]", `
Boot the VM in the background and return once its guest agent has said
hello, printing the accelerator, the boot time and the agent's version.
With --accel auto, KVM is tried first where /dev/kvm opens; a KVM that does
not boot within 6 s is stopped, remembered for this host boot, and TCG is
used instead. If the VM runs already, this says so and changes nothing.
With --data NAME=DIR, the VM shares the host folder DIR itself, read-only,
as data folder NAME (nothing is copied; the folder is walked now and
before each run that names it, to count it and check it: a folder holding
a hard link, a device, a FIFO or a socket is refused); a box sees it at
/data/NAME, and only when its call asks for it.

QEMU runs jailed (--qemu-jail auto): in user, mount, pid and network
namespaces of its own, seeing only /usr, a few devices, the guest files
and the data folders, bound read-only by the kernel; where this system
lets no user namespace mount (Ubuntu 24.04 and later), under Landlock
(Linux 6.2 or later), reading only those and writing none. Where neither
can be built, the VM starts without a jail only when no --data is given;
--qemu-jail none runs QEMU with all of your authority anyway. pybox vm
status says which jail holds it.

Several agents share the VM: each pybox mcp (and each pybox run) has one
run at a time, and runs of different ones go on at once, each in its own
box. --runs says how many at once the VM is sized for: its memory (1024
MiB for one, 640 MiB more for each further run) and the warm boxes each
image keeps. The guest admits a run only when its 512 MiB fits beside the
runs in progress, the warm boxes and the guest's own; a run that does not
fit is refused at once (no_memory) and nothing of it runs, so no run is
ever killed for another's memory. --memory overrides the size.

The VM gives memory back to the host once it has run nothing for 15 s:
what runs allocated, and its page cache (--keep-memory turns this off).
pybox vm status shows each run in progress and how the memory is spent.

With --foreground it stays until the VM is gone, for a service manager
(`+"`pybox vm service`"+` writes the files): it tells systemd when the VM is up
($NOTIFY_SOCKET), powers the VM off cleanly on SIGTERM, and exits 0 when
the VM was asked to stop (this way or by `+"`pybox vm stop`"+`) and 1 when it
ended by itself, so the manager restarts only a VM that failed.`)
	accel := fs.String("accel", "auto", "accelerator: auto, kvm or tcg")
	arch := fs.String("arch", archs.Host(), "guest architecture: x86_64, or arm64 (on Linux emulated by QEMU under tcg, the Mac's guest; its guest files come from `make ARCH=arm64`, its images from `pybox image build NAME --arch arm64`)")
	runs := fs.Int("runs", vm.DefaultRuns, fmt.Sprintf("runs at once the VM is sized for, 1–%d (see above)", wire.MaxRunsAtOnce))
	memory := fs.Int("memory", 0, fmt.Sprintf("guest memory in MiB, at least %d (default: sized for --runs, %d MiB for %d)", vm.MinMemoryMiB, vm.DefaultMemoryMiB, vm.DefaultRuns))
	cpus := fs.Int("cpus", vm.DefaultCPUs, "guest CPUs")
	kernel := fs.String("kernel", "", "guest kernel `FILE` (default: $PYBOX_KERNEL, else ../lib/pybox/ARCH/ beside this pybox's real path, else ../build/ARCH/; pybox version shows which)")
	initramfs := fs.String("initramfs", "", "guest initramfs (default: $PYBOX_INITRAMFS, else as for --kernel)")
	images := fs.String("images", "", "images to attach, by name from the image store (comma-separated; default: the built-in images that are built)")
	var files imageFiles
	fs.Var(&files, "image-file", "attach an image file as NAME=PATH (repeatable); its sha256 is computed here")
	machine := fs.String("machine", "", "QEMU machine type: microvm or pc (default microvm, or pc when the images and data folders need more than microvm's 8 virtio slots)")
	channel := fs.String("channel", vm.ChannelSerial, "guest channel: serial (virtio-serial) or vsock (reachable by every local user where /dev/vhost-vsock exists)")
	warm := fs.Int("warm", 1, "warm boxes: 1 keeps boxes ready for each image (as many as --runs, at least two), their python3 started and their preload imported; 0 starts every run cold")
	var data dataFolders
	fs.Var(&data, "data", "share the host folder DIR with the VM, read-only, as data folder NAME (`NAME=DIR`, repeatable); pybox mcp --data says which an agent may use")
	keepMemory := fs.Bool("keep-memory", false, "do not give freed guest memory back to the host (the VM then holds all it ever touched until it stops)")
	noSandbox := fs.Bool("no-qemu-sandbox", false, "start even when QEMU was built without its seccomp sandbox (-sandbox); without this flag such a QEMU is refused")
	qemuJail := fs.String("qemu-jail", jail.Auto, "how QEMU is confined on this machine (see above): auto, namespaces, landlock, or none (QEMU with all of your authority; say it only where no jail can be built)")
	foreground := fs.Bool("foreground", false, "stay until the VM is gone, for a service manager (see above)")
	if pos, code, err := parse(fs, args); err != nil {
		return code
	} else if len(pos) > 0 {
		return usageError(fs, "vm start takes no arguments")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	if *warm != 0 && *warm != 1 {
		return usageError(fs, "--warm %d: give 1 (warm boxes) or 0 (every run cold)", *warm)
	}
	cfg := vm.Config{Arch: *arch, Runs: *runs, MemoryMiB: *memory, CPUs: *cpus, Machine: *machine, Channel: *channel, NoQEMUSandbox: *noSandbox, Jail: *qemuJail, NoWarm: *warm == 0, KeepMemory: *keepMemory}
	if err := archs.Check(*arch); err != nil {
		return usageError(fs, "--arch: %v", err)
	}
	gf, err := guestfiles.FindArch(*arch, *kernel, *initramfs)
	if err != nil {
		return fail("%v", err)
	}
	cfg.Kernel, cfg.Initramfs = gf.Kernel.Path, gf.Initramfs.Path
	if cfg.Images, err = startImages(h, *arch, *images, files); err != nil {
		return fail("%v", err)
	}
	cfg.Data = append(cfg.Data, data...)
	exe, err := os.Executable()
	if err != nil {
		return fail("cannot find this program to start the supervisor: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := supervisor.StartOptions{Home: h, Accel: *accel, VM: cfg, Command: []string{exe, "vm", supervisorCommand}, Say: say}
	if *foreground {
		code, err := supervisor.Foreground(ctx, opts, stopLimit, func(st *supervisor.State) {
			announce(st, gf)
			if err := service.Notify("READY=1"); err != nil {
				say(err.Error())
			}
		})
		if errors.Is(err, supervisor.ErrRunning) {
			st, _ := supervisor.ReadState(paths.ForVM(h))
			return fail("the VM is already running%s, started outside this service: stop it with `pybox vm stop`, then start the service again",
				describeRunning(st))
		}
		if err != nil {
			return startFailed(err)
		}
		return code
	}
	st, err := supervisor.Start(ctx, opts)
	if errors.Is(err, supervisor.ErrRunning) {
		fmt.Printf("the VM is already running%s; nothing changed (stop it first with `pybox vm stop` to start it with other settings)\n", describeRunning(st))
		warnAgentVersion(st, gf)
		return exitOK
	}
	if err != nil {
		return startFailed(err)
	}
	announce(st, gf)
	return exitOK
}

// announce says that the VM runs, and how.
func announce(st *supervisor.State, gf *guestfiles.Files) {
	// The agent's version, kernel and image names come from the guest's
	// hello: shown escaped.
	showf(os.Stdout, "VM running: %s, accel %s (%s), booted in %.1f s, agent %s (%s), kernel %s, images: %s\n",
		orDash(st.Arch), st.Accel, st.Machine, float64(st.BootMS)/1000, st.AgentVersion, st.AgentCommit, st.GuestKernel, imageList(st.GuestImages))
	warnUnsealable(st)
	if st.Sandbox != vm.SandboxQEMU && st.Accel != "vz" {
		showf(os.Stderr, "pybox: warning: the VM process is not confined: %s\n", st.Sandbox)
	}
	if strings.HasPrefix(st.Jail, jail.None) {
		showf(os.Stderr, "pybox: warning: QEMU is not jailed (%s). A guest taken over would reach whatever you can.\n", strings.TrimPrefix(st.Jail, jail.None+": "))
	}
	warnAgentVersion(st, gf)
}

// startFailed reports a start that failed, with the end of the console
// log when there is one.
func startFailed(err error) int {
	var se *supervisor.StartError
	if !errors.As(err, &se) {
		return fail("%v", err)
	}
	fmt.Fprintf(os.Stderr, "pybox: %v\n", se)
	if len(se.ConsoleTail) > 0 {
		fmt.Fprintf(os.Stderr, "--- last %d lines of the console log (%s) ---\n", len(se.ConsoleTail), se.Log)
		for _, l := range se.ConsoleTail {
			fmt.Fprintln(os.Stderr, l)
		}
		fmt.Fprintln(os.Stderr, "---")
	}
	fmt.Fprintln(os.Stderr, "pybox: nothing is left running")
	return exitFailure
}

// warnAgentVersion says so when the running VM's guest agent is not the
// one in the guest files this pybox would boot now, as after an upgrade:
// the VM keeps its agent until it is restarted. The guest files' manifest
// says which agent they hold; without one there is nothing to compare.
func warnAgentVersion(st *supervisor.State, gf *guestfiles.Files) {
	if st == nil || gf == nil || st.AgentVersion == "" || slices.Contains(st.Capabilities, wire.CapUnsealable) {
		return
	}
	r, err := gf.Check()
	if err != nil || r.AgentVersion == "" || r.AgentVersion == st.AgentVersion {
		return
	}
	// The running agent's version comes from the guest's hello: escaped.
	showf(os.Stderr, "pybox: warning: the running VM's guest agent is %s, but the guest files this pybox boots (%s) hold %s: "+
		"restart the VM to use them: `pybox vm stop`, then `pybox vm start` (or `systemctl --user restart pybox` where the user service runs it)\n",
		st.AgentVersion, filepath.Dir(r.Initramfs.Path), r.AgentVersion)
}

// warnUnsealable says so when the VM runs the benchmark build of the
// agent: `pybox run` and `pybox mcp` will run nothing on it.
func warnUnsealable(st *supervisor.State) {
	if st != nil && slices.Contains(st.Capabilities, wire.CapUnsealable) {
		showf(os.Stderr, "pybox: warning: this is the benchmark build of the guest agent (%s), whose boxes can be unsealed; "+
			"`pybox run` and `pybox mcp` run nothing on it. Restart with the initramfs `make` builds.\n", st.AgentVersion)
	}
}

func describeRunning(st *supervisor.State) string {
	if st == nil {
		return " (starting)"
	}
	return fmt.Sprintf(" (%s, accel %s, supervisor pid %d, up %s)", st.Phase, orDash(st.Accel), st.SupervisorPid,
		time.Since(st.StartedAt).Round(time.Second))
}

// startImages resolves --images and --image-file into images with digests.
func startImages(home, arch, list string, files imageFiles) ([]vm.Image, error) {
	var out []vm.Image
	// With neither --images nor --image-file, the built-in images that
	// are built (storeImages resolves no names to those).
	if names := mcp.ParseNames(list); len(names) > 0 || len(files) == 0 {
		ims, err := storeImages(home, arch, names)
		if err != nil {
			return nil, err
		}
		out = append(out, ims...)
	}
	for _, f := range files {
		sum, err := vm.FileSHA256(f.Path)
		if err != nil {
			return nil, fmt.Errorf("--image-file %s: %w", f.Name, err)
		}
		f.Digest = sum
		out = append(out, f)
	}
	return out, nil
}

func imageList(ims []vm.Image) string {
	if len(ims) == 0 {
		return "none"
	}
	var parts []string
	for _, im := range ims {
		d := im.Digest
		if len(d) > 12 {
			d = d[:12]
		}
		parts = append(parts, im.Name+" ("+d+")")
	}
	return strings.Join(parts, ", ")
}

// describeWarm says how an image's warm box is.
func describeWarm(w wire.WarmBox) string {
	switch w.State {
	case "warming":
		if w.Importing != "" {
			return fmt.Sprintf("warming for %.1f s, importing %s", float64(w.ForMS)/1000, w.Importing)
		}
		return fmt.Sprintf("warming for %.1f s", float64(w.ForMS)/1000)
	case "ready":
		return fmt.Sprintf("ready for %.1f s, preloaded: %s", float64(w.ForMS)/1000, strings.Join(w.Preloaded, " "))
	case "cold":
		if w.Reason != "" {
			return "cold: " + w.Reason
		}
		return "cold"
	}
	return w.State
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func vmStatus(args []string) int {
	fs := flags("vm status", "[--json]", `
Say whether the VM runs; if it does, its processes, accelerator, uptime,
agent, kernel and images, and whether the agent answers a ping. A VM whose
QEMU died is reported as not running, and what it left is cleaned up.
Exit status: 0 when the VM runs, 3 when it does not, 1 on an error.`)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if pos, code, err := parse(fs, args); err != nil {
		return code
	} else if len(pos) > 0 {
		return usageError(fs, "vm status takes no arguments")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	s, err := supervisor.GetStatus(h)
	if err != nil {
		return fail("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(s)
	} else {
		printStatus(os.Stdout, s)
	}
	if !s.Running {
		return 3
	}
	return exitOK
}

// printStatus writes `pybox vm status` for people. Keys and values hold
// what the guest said (a warm box's image name is a key): every line goes
// through showf.
func printStatus(w io.Writer, s *supervisor.Status) {
	if !s.Running {
		showf(w, "the VM is not running\n")
		if s.Note != "" {
			showf(w, "%s\n", s.Note)
		}
		if len(s.Cleaned) > 0 {
			showf(w, "cleaned up: %s\n", strings.Join(s.Cleaned, ", "))
		}
		return
	}
	st := s.State
	if st == nil {
		showf(w, "the VM is starting\n")
		return
	}
	showf(w, "the VM is %s\n", st.Phase)
	row := func(k, v string) { showf(w, "  %-15s %s\n", k+":", v) }
	row("supervisor pid", fmt.Sprint(st.SupervisorPid))
	if st.QEMUPid != 0 {
		row("qemu pid", fmt.Sprint(st.QEMUPid))
	}
	if st.Arch != "" {
		row("arch", st.Arch)
	}
	if st.Accel != "" {
		row("accel", fmt.Sprintf("%s (%s, %s channel)", st.Accel, st.Machine, st.Channel))
		row("vm sandbox", st.Sandbox)
		if st.Jail != "" {
			row("qemu jail", st.Jail)
		}
		row("boot", fmt.Sprintf("%.1f s", float64(st.BootMS)/1000))
	}
	row("uptime", (time.Duration(s.UptimeS) * time.Second).String())
	if st.AgentVersion != "" {
		agent := fmt.Sprintf("%s (%s)", st.AgentVersion, st.AgentCommit)
		if s.Agent != "" {
			agent += ", " + s.Agent
			if s.PingMS > 0 {
				agent += fmt.Sprintf(" (ping %.2f ms)", s.PingMS)
			}
		}
		row("agent", agent)
		warnUnsealable(st)
		if gf, err := guestfiles.Find("", ""); err == nil {
			warnAgentVersion(st, gf)
		}
		row("guest kernel", st.GuestKernel)
	}
	if st.Health != "" {
		row("health", st.Health)
	}
	if g := s.Guest; g != nil {
		if g.Health != "" && g.Health != "healthy" {
			row("guest health", g.Health)
		}
		for _, wb := range g.Warm {
			name := wb.Image
			if wb.Net {
				name += " (with the proxy)"
			}
			row("warm "+name, describeWarm(wb))
		}
		for _, p := range g.Runs {
			row("running", describeRun(p))
		}
		if len(g.Runs) == 0 {
			row("running", "nothing")
		}
		for _, l := range g.SetAside {
			row("set aside", l)
		}
	}
	for _, line := range memoryRows(s) {
		row(line[0], line[1])
	}
	for _, r := range st.Restarts {
		row("restarted", fmt.Sprintf("%s: %s", r.At.Format(time.RFC3339), r.Reason))
	}
	row("kernel", st.Kernel)
	row("initramfs", st.Initramfs)
	row("size", fmt.Sprintf("%d CPUs, %d MiB", st.CPUs, st.MemoryMiB))
	row("images", imageList(st.Images))
	for _, im := range st.Images {
		showf(w, "    %s: %s sha256:%s\n", im.Name, im.Path, im.Digest)
	}
	for _, d := range st.Data {
		row("data folder", d.Name+": "+d.Folder+" (read-only)")
	}
}

// describeRun says where a run in progress is, for whom, and what it
// holds of its bound.
func describeRun(p wire.RunProgress) string {
	who := ""
	if p.Client != "" {
		who = " for " + p.Client
	}
	return fmt.Sprintf("%s (image %s)%s: %s for %.1f s, %.1f s of its bound of %.0f s, %d MiB of its %d MiB",
		p.RunID, p.Image, who, p.Phase, float64(p.PhaseMS)/1000, float64(p.RunMS)/1000, float64(p.BoundMS)/1000,
		p.MemoryBytes>>20, p.LimitBytes>>20)
}

// memoryRows says where the VM's memory goes: what the host gives it, and
// the guest's one budget as its admission counts it (what it holds for
// itself and its warm boxes, the bounds of the runs in progress, the
// headroom, and what is left for more runs).
func memoryRows(s *supervisor.Status) [][2]string {
	var rows [][2]string
	mib := func(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }
	st := s.State
	if s.HostMemoryBytes > 0 {
		rows = append(rows, [2]string{"host memory", fmt.Sprintf("%s of the VM's %d MiB (the VM process's resident set)", mib(s.HostMemoryBytes), st.MemoryMiB)})
	}
	if s.Guest == nil || s.Guest.Memory == nil {
		return rows
	}
	m := s.Guest.Memory
	rows = append(rows, [2]string{"guest memory", fmt.Sprintf("used %s (warm boxes %s), cache %s, free %s", mib(m.Used), mib(m.Warm), mib(m.Cache), mib(m.Free))})
	r := s.Guest.Room
	if r == nil {
		return rows
	}
	more := int64(0)
	if r.Need > 0 {
		more = max(0, r.Left) / r.Need
	}
	budget := fmt.Sprintf("%s: %s the guest itself, %s warm boxes, %s the bounds of %d runs in progress, %s headroom, %s left: room for %d more run(s) (sized for %d at once)",
		mib(r.Total), mib(r.Guest), mib(r.Warm), mib(r.Runs), len(s.Guest.Runs), mib(r.Headroom), mib(max(0, r.Left)), more, r.RunsAtOnce)
	if len(s.Guest.Runs) == 0 && more == 0 {
		budget += fmt.Sprintf("; a run's %s does not fit: start the VM with more --memory", mib(wire.DefaultMemoryBytes))
	}
	return append(rows, [2]string{"budget", budget})
}

// stopLimit is how long a clean poweroff may take before QEMU is killed.
const stopLimit = 30 * time.Second

func vmStop(args []string) int {
	fs := flags("vm stop", "", `
Power the VM off cleanly (the guest syncs and powers off) and wait until it
is gone. If it does not power off within 30 s, QEMU is killed, and this
says so. When no VM runs, it says so and exits 0.`)
	if pos, code, err := parse(fs, args); err != nil {
		return code
	} else if len(pos) > 0 {
		return usageError(fs, "vm stop takes no arguments")
	}
	h, err := home()
	if err != nil {
		return fail("%v", err)
	}
	t0 := time.Now()
	ran, err := supervisor.Stop(h, stopLimit, say)
	switch {
	case err != nil:
		return fail("%v", err)
	case !ran:
		fmt.Println("the VM is not running")
	default:
		fmt.Printf("the VM is stopped (%.1f s)\n", time.Since(t0).Seconds())
	}
	return exitOK
}

func vmSupervise(args []string) int {
	if len(args) != 1 {
		return fail("%s is started by `pybox vm start`", supervisorCommand)
	}
	return supervisor.Main(args[0])
}
