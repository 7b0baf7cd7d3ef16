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
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/vsock"

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
// machine type needs it.
func qemuArgs(cfg Config, accel string, tscKHz int, sandbox bool) []string {
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
		"-name", "pybox",
		"-pidfile", PidFile(cfg.Dir),
		"-machine", k.machine,
		"-accel", accelOption(accel),
		"-cpu", cpu,
		"-m", strconv.Itoa(cfg.MemoryMiB),
		"-smp", strconv.Itoa(cfg.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none",
		"-nic", "none", // no network device at all
		"-no-reboot", // the guest powers off by rebooting; that must end QEMU
		"-kernel", cfg.Kernel,
		"-initrd", cfg.Initramfs,
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
		args = append(args,
			"-chardev", "socket,id=ch,path="+cfg.Dir+"/guest.sock,server=on,wait=off",
			"-device", "virtserialport,chardev=ch,name=pybox")
	}
	for i, im := range cfg.Images {
		id := "img" + strconv.Itoa(i)
		args = append(args,
			"-drive", "file="+im.Path+",if=none,format=raw,readonly=on,id="+id,
			"-device", "virtio-blk"+k.suffix+",drive="+id+",serial="+im.Name)
	}
	for i, d := range cfg.Data {
		// The folder itself, read-only: the guest can neither write it
		// nor reach past it (security_model=none, and QEMU's local
		// driver opens every path component without following links on
		// the host). A comma in the path is doubled, as QEMU's option
		// syntax asks.
		id := "data" + strconv.Itoa(i)
		args = append(args,
			"-fsdev", "local,id="+id+",path="+strings.ReplaceAll(d.Folder, ",", ",,")+",security_model=none,readonly=on",
			"-device", "virtio-9p"+k.suffix+",fsdev="+id+",mount_tag="+DataTag(i))
	}
	if sandbox {
		// QEMU's own seccomp filter: if the guest ever escapes into QEMU,
		// it cannot exec, gain privileges or change resource limits.
		args = append(args, "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny")
	}
	return args
}

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

// Start starts QEMU for one attempt. QEMU's stderr goes to stderr; its
// last lines also end up in the Machine's exit error.
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
	if cfg.Channel == ChannelVsock {
		if _, err := os.Stat("/dev/vhost-vsock"); err != nil {
			return nil, errors.New("vm: the vsock channel needs /dev/vhost-vsock (try: modprobe vhost_vsock), or use --channel serial")
		}
	}
	qemu, err := exec.LookPath(qemuBinary(cfg.Arch))
	if err != nil {
		return nil, fmt.Errorf("vm: %w (try: apt-get install %s, or make deps)", err, qemuPackage(cfg.Arch))
	}
	sandbox := hasSandbox(qemu)
	if !sandbox && !cfg.NoQEMUSandbox {
		return nil, fmt.Errorf("vm: %s was built without its seccomp sandbox (-sandbox), which confines QEMU if a guest ever escapes into it: "+
			"install a QEMU that has it (Debian's %s does), or start with --no-qemu-sandbox to run without it", qemu, qemuPackage(cfg.Arch))
	}
	os.Remove(cfg.Dir + "/guest.sock")
	cmd := exec.Command(qemu, qemuArgs(cfg, a.Accel, tsc, sandbox)...)
	m, err := startQEMU(cmd, cfg, a, stderr)
	if m != nil {
		m.Sandbox = SandboxQEMU
		if !sandbox {
			m.Sandbox = "none: this QEMU has no -sandbox, and --no-qemu-sandbox allowed that"
		}
	}
	return m, err
}

func startQEMU(cmd *exec.Cmd, cfg Config, a Attempt, stderr io.Writer) (*Machine, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	// If the supervisor dies, so does QEMU: nothing may run unowned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

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
		return nil, fmt.Errorf("vm: starting QEMU: %w", err)
	}
	m.Pid = cmd.Process.Pid
	m.Console = consoleStream{outR, inW}
	m.kill = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
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
