package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/vsock"

	"pybox/host/internal/pipes"
	"pybox/host/jail"
	"pybox/shared/archs"
)

// qemuBinary is the QEMU that runs guests of arch; PYBOX_QEMU overrides
// it (tests, odd installs).
func qemuBinary(arch string) string {
	if q := os.Getenv("PYBOX_QEMU"); q != "" {
		return q
	}
	if arch == archs.Arm64 {
		return "qemu-system-aarch64"
	}
	return "qemu-system-x86_64"
}

// qemuPackage is the Debian package that has qemuBinary(arch).
func qemuPackage(arch string) string {
	if arch == archs.Arm64 {
		return "qemu-system-arm"
	}
	return "qemu-system-x86"
}

// How long to wait for the guest's hello. Under KVM a boot takes well under
// a second, so a KVM that shows nothing in 6 s is one that hangs (as the
// nested /dev/kvm on the build machines does after "Booting from ROM").
const (
	kvmProbeTimeout = 6 * time.Second
	kvmTimeout      = 30 * time.Second
	tcgTimeout      = 90 * time.Second
	// An arm64 guest emulated on an x86-64 host boots several times
	// slower than an x86_64 guest under TCG.
	emulatedTimeout = 300 * time.Second
)

// Guest vsock address when the vsock channel is used.
const (
	guestCID   = 3
	guestVsock = 1024
)

// Plan says which accelerators to try, in order, for --accel requested,
// with notes for the person waiting.
func Plan(home string, cfg Config, requested string) ([]Attempt, []string, error) {
	if runtime.GOARCH != "amd64" {
		return nil, nil, fmt.Errorf("vm: on Linux, PyBox runs on x86-64 hosts only; this host is linux/%s", runtime.GOARCH)
	}
	tcg := Attempt{Accel: "tcg", Timeout: tcgTimeout}
	if cfg.Arch == archs.Arm64 {
		return emulatedPlan(requested, tcg)
	}
	switch requested {
	case "tcg":
		return []Attempt{tcg}, nil, nil
	case "kvm":
		if err := openKVM(); err != nil {
			return nil, nil, fmt.Errorf("vm: %w: use --accel tcg", err)
		}
		return []Attempt{{Accel: "kvm", Timeout: kvmTimeout}}, nil, nil
	case "auto", "":
		if err := openKVM(); err != nil {
			return []Attempt{tcg}, []string{fmt.Sprintf("kvm not available (%v); using tcg, which is several times slower%s", err, kvmHint(err))}, nil
		}
		if _, ok := cachedKVMFailure(home, cfg.Kernel); ok {
			return []Attempt{tcg}, []string{"kvm unusable here (cached probe); using tcg"}, nil
		}
		kvm := Attempt{Accel: "kvm", Timeout: kvmProbeTimeout, Probe: true}
		return []Attempt{kvm, tcg}, []string{"trying kvm (falls back to tcg if it does not boot within 6 s)"}, nil
	}
	return nil, nil, fmt.Errorf("vm: accel %q: use auto, kvm or tcg", requested)
}

// emulatedPlan is the plan for a guest of another architecture than the
// host's: KVM runs only the host's own, so QEMU emulates it (several
// times slower again than an x86_64 guest under TCG).
func emulatedPlan(requested string, tcg Attempt) ([]Attempt, []string, error) {
	switch requested {
	case "", "auto", "tcg":
		tcg.Timeout = emulatedTimeout
		return []Attempt{tcg}, []string{"the arm64 guest is emulated (tcg) on this x86-64 host: expect a slow boot and slow runs"}, nil
	case "kvm":
		return nil, nil, errors.New("vm: kvm runs only guests of the host's own architecture (x86_64): use --accel tcg (or auto) for an arm64 guest")
	}
	return nil, nil, fmt.Errorf("vm: accel %q: use auto, kvm or tcg", requested)
}

// RecordFailure remembers that a probing attempt did not boot, so that the
// next start on this host boot goes straight to the next accelerator.
func RecordFailure(home string, cfg Config, a Attempt, reason string) error {
	if a.Accel != "kvm" {
		return nil
	}
	return recordKVMFailure(home, cfg.Kernel, reason)
}

// kvmHint says how to get KVM when /dev/kvm is there but not for this
// user: it is for the group that owns it (kvm on Debian and most
// distributions).
func kvmHint(err error) string {
	if !errors.Is(err, os.ErrPermission) {
		return ""
	}
	fi, serr := os.Stat("/dev/kvm")
	if serr != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	g, gerr := user.LookupGroupId(strconv.Itoa(int(st.Gid)))
	if gerr != nil || g.Name == "root" || fi.Mode().Perm()&0o060 != 0o060 {
		return "; for kvm, /dev/kvm must belong to a group you are in, with mode 0660 (as Debian's udev rules make it: group kvm): ask your administrator"
	}
	return fmt.Sprintf("; for kvm, join group %s, which owns /dev/kvm (`sudo adduser $USER %s`, then log in again)", g.Name, g.Name)
}

func openKVM() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// machineKind is what differs between QEMU machine types.
type machineKind struct {
	machine string // -machine value
	suffix  string // virtio device suffix: -device (virtio-mmio) or -pci
	cmdline string // added to the kernel command line
	// needsTSC: microvm has no way to calibrate the TSC under TCG, and the
	// kernel hangs unless told the frequency (tsc_early_khz). Nor has it a
	// timer to check the TSC against (no HPET, no PM timer), so the kernel
	// would not trust it and would keep time in jiffies: every clock in
	// the guest, Python's time.perf_counter() and the receipt's wall_ms
	// included, would tick in 4 ms steps. Under TCG the guest's TSC is the
	// host's, the same on every vCPU, so the guest may trust it
	// (tsc=reliable): clocks then resolve to the nanosecond, and
	// clock_gettime no longer needs a system call.
	needsTSC bool
	// hvc: the console is a virtio console (hvc0) rather than the
	// machine's serial port.
	hvc bool
}

var machineKinds = map[string]machineKind{
	// acpi=off: QEMU then lists the virtio-mmio devices on the kernel
	// command line itself (virtio_mmio.device=...).
	MachineMicrovm: {machine: "microvm,acpi=off", suffix: "-device", needsTSC: true},
	MachinePC:      {machine: "pc", suffix: "-pci"},
	// The arm64 guest: virtio over PCI, the console on a virtio console
	// (hvc0), as Virtualization.framework gives it on a Mac.
	MachineVirt: {machine: "virt", suffix: "-pci", hvc: true},
}

// qemuArgs builds QEMU's command line. tscKHz is used only where the
// machine type needs it. The files are named where the jail of mode
// shows them (jail.Place), and the guest channel is the listening
// socket QEMU inherits as descriptor 3.
func qemuArgs(cfg Config, accel string, tscKHz int, sandbox bool, mode string) []string {
	k := machineKinds[cfg.Machine]
	cpu := "max" // under TCG: every feature QEMU can emulate (numpy's OpenBLAS needs more than the default model)
	switch {
	case accel == "kvm":
		cpu = "host"
	case cfg.Arch == archs.Arm64:
		// Pointer authentication's architected algorithm (QARMA) is
		// costly to emulate; the implementation-defined one is cheap and
		// as good to a guest that only needs it to work.
		cpu = "max,pauth-impdef=on"
	}
	cmdline := KernelCmdline(cfg, accel)
	if k.cmdline != "" {
		cmdline += " " + k.cmdline
	}
	if k.needsTSC && accel == "tcg" {
		cmdline += " tsc_early_khz=" + strconv.Itoa(tscKHz) + " tsc=reliable"
	}
	args := []string{
		"-name", Marker(cfg.Dir),
		"-machine", k.machine,
		"-accel", accelOption(accel),
		"-cpu", cpu,
		"-m", strconv.Itoa(cfg.MemoryMiB),
		"-smp", strconv.Itoa(cfg.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none",
		"-nic", "none", // no network device at all
		"-no-reboot", // the guest powers off by rebooting; that must end QEMU
		"-kernel", jail.Place(mode, cfg.Kernel, "kernel", ""),
		"-initrd", jail.Place(mode, cfg.Initramfs, "initramfs", ""),
		"-append", cmdline,
		// The console is QEMU's stdio: pipes to the supervisor, so
		// nothing the guest prints early is lost before anyone connects.
		"-chardev", "stdio,id=con,signal=off",
		"-device", "virtio-rng" + k.suffix,
	}
	// A virtio console is a port of a virtio-serial device, which the
	// agent's channel then shares.
	if k.hvc {
		args = append(args, "-device", "virtio-serial"+k.suffix, "-device", "virtconsole,chardev=con")
	} else {
		args = append(args, "-serial", "chardev:con")
	}
	if !cfg.KeepMemory {
		// Free page reporting: the guest kernel tells QEMU which pages
		// are free (in blocks of 128 KiB and up, once the guest has run
		// nothing for 15 s), and QEMU drops them, so what runs allocated
		// goes back to the host when the VM is idle.
		args = append(args, "-device", "virtio-balloon"+k.suffix+",free-page-reporting=on")
	}
	if cfg.Channel == ChannelVsock {
		args = append(args, "-device", fmt.Sprintf("vhost-vsock%s,guest-cid=%d", k.suffix, guestCID))
	} else {
		if !k.hvc {
			args = append(args, "-device", "virtio-serial"+k.suffix)
		}
		// The socket is the supervisor's, made before QEMU starts and
		// passed as descriptor 3: QEMU needs no directory it may write.
		args = append(args,
			"-chardev", "socket,id=ch,fd="+strconv.Itoa(listenerFD)+",server=on,wait=off",
			"-device", "virtserialport,chardev=ch,name=pybox")
	}
	for i, im := range cfg.Images {
		id := "img" + strconv.Itoa(i)
		args = append(args,
			"-drive", "file="+jail.Place(mode, im.Path, "images", im.Name)+",if=none,format=raw,readonly=on,id="+id,
			"-device", "virtio-blk"+k.suffix+",drive="+id+",serial="+im.Name)
	}
	for i, d := range cfg.Data {
		// The folder itself, read-only: the guest can neither write it
		// nor reach past it (security_model=none, and QEMU's local
		// driver opens every path component without following links on
		// the host). readonly=on is QEMU's own check; the jail makes the
		// host kernel refuse every write whatever QEMU asks for. A comma
		// in the path is doubled, as QEMU's option syntax asks.
		id := "data" + strconv.Itoa(i)
		path := jail.Place(mode, d.Folder, "data", d.Name)
		args = append(args,
			"-fsdev", "local,id="+id+",path="+strings.ReplaceAll(path, ",", ",,")+",security_model=none,readonly=on",
			"-device", "virtio-9p"+k.suffix+",fsdev="+id+",mount_tag="+DataTag(i))
	}
	if sandbox {
		// QEMU's own seccomp filter: if the guest ever escapes into QEMU,
		// it cannot exec, gain privileges or change resource limits.
		args = append(args, "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny")
	}
	return args
}

// listenerFD is the descriptor QEMU finds its end of the guest channel at.
const listenerFD = 3

// accelOption is -accel's value. Under TCG the translation cache is sized
// on purpose: QEMU's default lets it grow to 1 GiB of host memory, which
// a VM that runs numpy and pandas all day fills and never gives back.
func accelOption(accel string) string {
	if accel != "tcg" {
		return accel
	}
	return "tcg,tb-size=" + strconv.Itoa(tcgCacheMiB)
}

// tcgCacheMiB is the TCG translation cache's size. Measured over pandas
// calls on the data image: 256 MiB ran them as fast as the default
// (which grew past 900 MiB over 20 calls); 128 MiB made some calls half
// again as slow, 64 MiB twice as slow.
const tcgCacheMiB = 256

// Start starts QEMU for one attempt, jailed as cfg.Jail says (see
// jailModes). QEMU's stderr goes to stderr; its last lines also end up
// in the Machine's exit error.
func Start(cfg Config, a Attempt, stderr io.Writer) (*Machine, error) {
	k, ok := machineKinds[cfg.Machine]
	if !ok {
		return nil, fmt.Errorf("vm: unknown machine %q", cfg.Machine)
	}
	tsc := 0
	if k.needsTSC && a.Accel == "tcg" {
		var err error
		if tsc, err = hostTSCkHz(); err != nil {
			return nil, fmt.Errorf("vm: %w: try --machine pc", err)
		}
	}
	var devices []string
	if cfg.Channel == ChannelVsock {
		if _, err := os.Stat("/dev/vhost-vsock"); err != nil {
			return nil, errors.New("vm: the vsock channel needs /dev/vhost-vsock (try: modprobe vhost_vsock), or use --channel serial")
		}
		devices = append(devices, "/dev/vhost-vsock")
	}
	if a.Accel == "kvm" {
		devices = append(devices, "/dev/kvm")
	}
	qemu, err := exec.LookPath(qemuBinary(cfg.Arch))
	if err == nil {
		qemu, err = filepath.Abs(qemu)
	}
	if err != nil {
		return nil, fmt.Errorf("vm: %w (try: apt-get install %s, or make deps)", err, qemuPackage(cfg.Arch))
	}
	sandbox := hasSandbox(qemu)
	if !sandbox && !cfg.NoQEMUSandbox {
		return nil, fmt.Errorf("vm: %s was built without its seccomp sandbox (-sandbox), which confines QEMU if a guest ever escapes into it: "+
			"install a QEMU that has it (Debian's %s does), or start with --no-qemu-sandbox to run without it", qemu, qemuPackage(cfg.Arch))
	}
	modes, notes, err := jailModes(cfg)
	if err != nil {
		return nil, err
	}
	var listener *os.File
	if cfg.Channel != ChannelVsock {
		if listener, err = listenGuest(cfg.Dir + "/guest.sock"); err != nil {
			return nil, fmt.Errorf("vm: the guest channel's socket: %w", err)
		}
		// QEMU holds its own copy once it runs: with this one closed, a
		// QEMU that exits leaves nobody listening, and a dial fails at
		// once rather than waiting on a socket nobody serves.
		defer listener.Close()
	}
	cfg.Data = whereNow(cfg.Data)
	var failed []string
	noUserns := false
	for _, mode := range modes {
		if noUserns && mode != jail.None {
			continue // every jail needs one; the error says so once
		}
		run := qemuRun{qemu: qemu, args: qemuArgs(cfg, a.Accel, tsc, sandbox, mode), listener: listener}
		var launch func(stdio) launcher
		if mode == jail.None {
			launch = run.plain
		} else {
			launch = func(io stdio) launcher { return run.jailed(cfg, mode, devices, io) }
		}
		m, err := startQEMU(launch, cfg, a, stderr)
		if err != nil {
			if len(modes) == 1 {
				return nil, fmt.Errorf("vm: %w", err)
			}
			noUserns = errors.Is(err, jail.ErrNoUserNamespace)
			failed = append(failed, err.Error())
			continue
		}
		m.Sandbox = SandboxQEMU
		if !sandbox {
			m.Sandbox = "none: this QEMU has no -sandbox, and --no-qemu-sandbox allowed that"
		}
		m.Jail = describeJail(mode, notes, failed)
		return m, nil
	}
	if len(cfg.Data) == 0 {
		return nil, fmt.Errorf("vm: QEMU did not start, jailed or not: %s", strings.Join(failed, "; "))
	}
	return nil, fmt.Errorf("vm: QEMU cannot be jailed here (%s), and a data folder is shared only with a jailed QEMU: "+
		"start without --data, or with --qemu-jail none to share them with a QEMU that has all of your authority (docs/troubleshooting.md says what the jail needs)",
		strings.Join(append(failed, notes...), "; "))
}

// jailModes are the jails Start tries, in order, for cfg.Jail, with why
// the others are left out. Auto tries namespaces, then Landlock, and
// runs QEMU unjailed only when no data folder is shared: a folder is
// given to the VM only behind a jail, or when the user asks for none.
func jailModes(cfg Config) ([]string, []string, error) {
	abi := jail.LandlockABI()
	landlockOK := abi >= jail.MinLandlockABI
	landlockWhy := fmt.Sprintf("landlock: this kernel offers ABI %d, and the jail needs %d (Linux 6.2) to stop a truncation", abi, jail.MinLandlockABI)
	switch cfg.Jail {
	case jail.Namespaces, jail.None:
		return []string{cfg.Jail}, nil, nil
	case jail.Landlock:
		if !landlockOK {
			return nil, nil, fmt.Errorf("vm: --qemu-jail landlock: %s; use --qemu-jail auto", landlockWhy)
		}
		return []string{jail.Landlock}, nil, nil
	}
	modes, notes := []string{jail.Namespaces}, []string(nil)
	if landlockOK {
		modes = append(modes, jail.Landlock)
	} else {
		notes = append(notes, landlockWhy)
	}
	if len(cfg.Data) == 0 {
		modes = append(modes, jail.None)
	}
	return modes, notes, nil
}

// describeJail is Machine.Jail for the mode that started, with why the
// modes before it did not.
func describeJail(mode string, notes, failed []string) string {
	if mode == jail.None {
		if len(failed) == 0 {
			return "none: --qemu-jail none asked for it; QEMU runs with all of your authority"
		}
		return "none: QEMU could not be jailed here (" + strings.Join(append(failed, notes...), "; ") + "); it runs with all of your authority, and the VM was given no data folder"
	}
	d := jail.Describe(mode, jail.LandlockABI())
	if len(failed) > 0 {
		d += " (" + strings.Join(failed, "; ") + ")"
	}
	return d
}

// identity is the data folder's device and inode: of the directory the
// supervisor opened, or where it opened none, of its path now.
func (d DataShare) identity() (dev, ino uint64) {
	var st syscall.Stat_t
	if d.Dir != nil {
		syscall.Fstat(int(d.Dir.Fd()), &st)
	} else {
		syscall.Stat(d.Folder, &st)
	}
	return st.Dev, st.Ino
}

// whereNow is shares with each folder's path where the directory the
// supervisor holds open is now: a guest restarted after a folder was
// moved is given the same folder (whose old path calls then say has
// moved) rather than none. The jail checks it is the same directory, by
// device and inode.
func whereNow(shares []DataShare) []DataShare {
	out := slices.Clone(shares)
	for i := range out {
		out[i].Folder = out[i].hostPath()
	}
	return out
}

// hostPath is where the directory the supervisor holds open for d is now,
// or d.Folder where it holds none (or the directory is gone).
func (d DataShare) hostPath() string {
	if d.Dir != nil {
		if p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(d.Dir.Fd()))); err == nil && filepath.IsAbs(p) && !strings.HasSuffix(p, " (deleted)") {
			return p
		}
	}
	return d.Folder
}

// listenGuest makes the listening socket of the guest channel at path,
// and returns it as a file QEMU can inherit.
func listenGuest(path string) (*os.File, error) {
	os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	f, err := l.File()
	l.Close()
	return f, err
}

// stdio are the ends QEMU gets of the pipes to the supervisor.
type stdio struct{ in, out, err *os.File }

// launcher is a VM process to start. Start is called on a thread locked
// until Wait returns: the parent-death signal is tied to the thread that
// forks.
type launcher interface {
	Start() error
	Wait() error
	Pid() int
	Kill() error
}

// qemuRun is one QEMU to start, unjailed or in a jail.
type qemuRun struct {
	qemu     string
	args     []string
	listener *os.File
}

// plain is QEMU started directly: --qemu-jail none, or no jail here.
func (r qemuRun) plain(io stdio) launcher {
	cmd := exec.Command(r.qemu, r.args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = io.in, io.out, io.err
	if r.listener != nil {
		cmd.ExtraFiles = []*os.File{r.listener}
	}
	// If the supervisor dies, so does QEMU: nothing may run unowned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return plainCmd{cmd}
}

// jailed is QEMU started by the jail's helper (this binary, as `pybox
// vm _jail`), which execs it once the jail is built.
func (r qemuRun) jailed(cfg Config, mode string, devices []string, io stdio) launcher {
	spec := &jail.Spec{
		Mode: mode, Program: r.qemu, Args: r.args, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Devices: devices, Listener: r.listener != nil,
		Files: []jail.File{
			{Host: cfg.Kernel, Jail: jail.Place(mode, cfg.Kernel, "kernel", "")},
			{Host: cfg.Initramfs, Jail: jail.Place(mode, cfg.Initramfs, "initramfs", "")},
		},
	}
	for _, im := range cfg.Images {
		spec.Files = append(spec.Files, jail.File{Host: im.Path, Jail: jail.Place(mode, im.Path, "images", im.Name)})
	}
	for _, d := range cfg.Data {
		dev, ino := d.identity()
		spec.Folders = append(spec.Folders, jail.Folder{Host: d.Folder, Jail: jail.Place(mode, d.Folder, "data", d.Name), Dev: dev, Ino: ino})
	}
	c := &jail.Cmd{Spec: spec, Helper: jail.Helper(), Stdin: io.in, Stdout: io.out, Stderr: io.err, Listener: r.listener}
	return jailCmd{c}
}

type plainCmd struct{ *exec.Cmd }

func (c plainCmd) Start() error {
	if err := c.Cmd.Start(); err != nil {
		return fmt.Errorf("starting QEMU: %w", err)
	}
	return nil
}

func (c plainCmd) Pid() int    { return c.Process.Pid }
func (c plainCmd) Kill() error { return c.Process.Signal(syscall.SIGKILL) }

type jailCmd struct{ *jail.Cmd }

func (c jailCmd) Pid() int    { return c.Process().Pid }
func (c jailCmd) Kill() error { return c.Process().Signal(syscall.SIGKILL) }

func startQEMU(launch func(stdio) launcher, cfg Config, a Attempt, stderr io.Writer) (*Machine, error) {
	ps, err := pipes.Make(3)
	if err != nil {
		return nil, err
	}
	inR, inW, outR, outW, errR, errW := ps[0].R, ps[0].W, ps[1].R, ps[1].W, ps[2].R, ps[2].W
	cmd := launch(stdio{inR, outW, errW})

	m := &Machine{Accel: a.Accel, Kind: cfg.Machine, Channel: "virtio-serial", done: make(chan struct{})}
	if cfg.Channel == ChannelVsock {
		m.Channel = "vsock"
	}
	tail := &tailBuffer{max: 2048}
	stderrDone := make(chan struct{})
	go func() {
		io.Copy(io.MultiWriter(stderr, tail), errR)
		errR.Close()
		close(stderrDone)
	}()

	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child exits, not
		// the process: keep this goroutine on its thread until QEMU is gone.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		werr := cmd.Wait()
		<-stderrDone
		inW.Close() // nobody types into a VM that is gone
		m.exited(exitError(werr, tail.String()))
	}()
	err = <-started
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		<-stderrDone
		return nil, err
	}
	m.Pid = cmd.Pid()
	m.Console = consoleStream{outR, inW}
	m.kill = cmd.Kill
	if cfg.Channel == ChannelVsock {
		m.dial = func(ctx context.Context) (net.Conn, error) {
			return redial(ctx, m, func() (net.Conn, error) { return vsock.Dial(guestCID, guestVsock, nil) })
		}
	} else {
		sock := cfg.Dir + "/guest.sock"
		m.dial = func(ctx context.Context) (net.Conn, error) {
			return redial(ctx, m, func() (net.Conn, error) { return net.Dial("unix", sock) })
		}
	}
	return m, nil
}

// redial retries dial until it connects, ctx ends or the VM exits: QEMU
// creates its socket a moment after it starts, and a vsock peer listens
// only once the guest agent runs.
func redial(ctx context.Context, m *Machine, dial func() (net.Conn, error)) (net.Conn, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		c, err := dial()
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("vm: guest channel: %w (last: %v)", ctx.Err(), err)
		case <-m.done:
			return nil, fmt.Errorf("vm: guest channel: the VM exited: %v", m.err)
		case <-t.C:
		}
	}
}

func exitError(err error, stderrTail string) error {
	msg := strings.TrimSpace(stderrTail)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 && len(msg)-i > 0 {
		// QEMU's last line says why it stopped; earlier ones are warnings.
		msg = strings.TrimSpace(msg[i+1:])
	}
	switch {
	case err == nil:
		return nil
	case msg != "":
		return fmt.Errorf("qemu: %w: %s", err, msg)
	default:
		return fmt.Errorf("qemu: %w", err)
	}
}

// hasSandbox reports whether this QEMU was built with seccomp support.
func hasSandbox(qemu string) bool {
	out, err := exec.Command(qemu, "-help").Output()
	return err == nil && strings.Contains(string(out), "\n-sandbox ")
}

type consoleStream struct {
	r *os.File
	w *os.File
}

func (c consoleStream) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c consoleStream) Write(p []byte) (int, error) { return c.w.Write(p) }

// Close closes the reading end, once it has reached EOF (QEMU exited).
func (c consoleStream) Close() error { return c.r.Close() }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

var errNoTSC = errors.New("cannot find the host's TSC frequency (needed by -M microvm under TCG)")
