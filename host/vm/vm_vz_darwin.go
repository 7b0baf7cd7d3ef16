//go:build darwin

package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/Code-Hex/vz/v3"

	"pybox/host/internal/pipes"
)

// NOTE: nothing in this file has run on a Mac yet. It is type-checked
// against vz v3.7.1 from Linux (darwin_typecheck_test.go); see
// docs/macos.md for what that does and does not prove.

// accelVZ is the one accelerator on macOS: Apple's hypervisor through
// Virtualization.framework.
const accelVZ = "vz"

// vzTimeout is how long to wait for the guest's hello. A vz boot has no
// firmware and no emulation (about a second on Apple silicon); 30 s
// leaves room for a busy laptop, not for a hang.
const vzTimeout = 30 * time.Second

// guestVsockPort is where the guest agent listens (guest/channel.VsockPort).
const guestVsockPort = 1024

// Plan says how to start the VM on macOS: one attempt, with vz.
func Plan(home string, cfg Config, requested string) ([]Attempt, []string, error) {
	if runtime.GOARCH != "arm64" {
		return nil, nil, fmt.Errorf("vm: on macOS the guest is built for Apple silicon (arm64) only; this Mac is darwin/%s", runtime.GOARCH)
	}
	switch requested {
	case "", "auto", accelVZ:
	default:
		return nil, nil, fmt.Errorf("vm: accel %q: on macOS use auto or vz", requested)
	}
	var notes []string
	if cfg.Machine != "" && cfg.Machine != MachineMicrovm || cfg.Channel != "" && cfg.Channel != ChannelSerial {
		notes = append(notes, "--machine and --channel choose QEMU's devices; vz always runs a generic arm64 machine with the vsock channel")
	}
	return []Attempt{{Accel: accelVZ, Timeout: vzTimeout}}, notes, nil
}

// RecordFailure does nothing: vz is never probed, there is nothing to
// fall back to.
func RecordFailure(home string, cfg Config, a Attempt, reason string) error { return nil }

// Start boots the VM inside this process. Virtualization.framework runs it
// in an XPC service of its own that ends when this process ends, so the
// VM cannot outlive its supervisor (what Pdeathsig does for QEMU). There
// is no VM process of ours, so Machine.Pid is 0. stderr gets the VM's
// state changes.
func Start(cfg Config, a Attempt, stderr io.Writer) (*Machine, error) {
	if a.Accel != accelVZ {
		return nil, fmt.Errorf("vm: accel %q: on macOS only vz", a.Accel)
	}
	con, err := newVZConsole()
	if err != nil {
		return nil, fmt.Errorf("vm: console pipes: %w", err)
	}
	conf, err := vzConfig(cfg, con)
	if err != nil {
		con.closeAll()
		return nil, err
	}
	machine, err := vz.NewVirtualMachine(conf)
	if err != nil {
		con.closeAll()
		return nil, fmt.Errorf("vm: vz: %w", err)
	}
	// vz runs the start on the VM's own serial dispatch queue, as
	// Virtualization.framework requires of every call on a VM, and waits
	// for its completion handler: on return the VM runs.
	if err := machine.Start(); err != nil {
		con.closeAll()
		return nil, fmt.Errorf("vm: vz: starting the VM: %w%s", err, entitlementHint(err))
	}
	socks := machine.SocketDevices()
	if len(socks) != 1 {
		machine.Stop()
		con.closeAll()
		return nil, fmt.Errorf("vm: vz: the VM has %d virtio socket devices, want 1", len(socks))
	}
	m := &Machine{Accel: accelVZ, Kind: "generic", Channel: "vsock", Console: con, done: make(chan struct{}),
		Sandbox: "Virtualization.framework's own process"}
	sock := socks[0]
	m.dial = func(ctx context.Context) (net.Conn, error) { return dialVsock(ctx, m, sock) }
	if !cfg.KeepMemory {
		m.balloon = vzBalloon(machine)
	}
	// Stop pulls the plug (macOS 12 and later); the state watcher then
	// sees the VM stopped.
	m.kill = machine.Stop
	// The state changes from the start on are buffered in vz, so the
	// watcher misses none by starting now.
	go watchVZ(machine, m, con, stderr)
	return m, nil
}

// vzDevices are the VM's devices, set up in this order; an error names the
// device. There is deliberately no network device: the guest has loopback
// only.
var vzDevices = []struct {
	name string
	set  func(c *vz.VirtualMachineConfiguration, cfg Config, con *vzConsole) error
}{
	{"virtio console (hvc0, the serial console)", setVZConsole},
	{"virtio socket device (the guest channel)", setVZVsock},
	{"virtio-blk disks (one read-only disk per image)", setVZDisks},
	{"virtio-fs shares (one read-only share per data folder)", setVZData},
	{"virtio entropy device", setVZEntropy},
	{"virtio memory balloon", setVZBalloon},
}

// vzConfig builds and validates the VM's configuration: the Linux boot
// loader with the arm64 kernel Image (vz loads it uncompressed), the
// initramfs and the command line, then the devices.
func vzConfig(cfg Config, con *vzConsole) (*vz.VirtualMachineConfiguration, error) {
	if max := vz.VirtualMachineConfigurationMaximumAllowedCPUCount(); uint(cfg.CPUs) > max {
		return nil, fmt.Errorf("vm: %d CPUs: this Mac allows a VM at most %d: use --cpus %d", cfg.CPUs, max, max)
	}
	boot, err := vz.NewLinuxBootLoader(cfg.Kernel, vz.WithInitrd(cfg.Initramfs), vz.WithCommandLine(vzCmdline(cfg)))
	if err != nil {
		return nil, fmt.Errorf("vm: vz: boot loader: %w", err)
	}
	c, err := vz.NewVirtualMachineConfiguration(boot, uint(cfg.CPUs), uint64(cfg.MemoryMiB)<<20)
	if err != nil {
		return nil, fmt.Errorf("vm: vz: %w", err)
	}
	for _, d := range vzDevices {
		if err := d.set(c, cfg, con); err != nil {
			return nil, fmt.Errorf("vm: vz: %s: %w", d.name, err)
		}
	}
	ok, err := c.Validate()
	if err == nil && !ok {
		err = errors.New("Validate says no, without a reason")
	}
	if err != nil {
		return nil, fmt.Errorf("vm: vz: the VM configuration is not valid: %w%s", err, entitlementHint(err))
	}
	return c, nil
}

// setVZConsole makes the guest's hvc0 (console=hvc0) the console pipes.
func setVZConsole(c *vz.VirtualMachineConfiguration, _ Config, con *vzConsole) error {
	att, err := vz.NewFileHandleSerialPortAttachment(con.guestIn, con.guestOut)
	if err != nil {
		return err
	}
	port, err := vz.NewVirtioConsoleDeviceSerialPortConfiguration(att)
	if err != nil {
		return err
	}
	c.SetSerialPortsVirtualMachineConfiguration([]*vz.VirtioConsoleDeviceSerialPortConfiguration{port})
	return nil
}

// setVZVsock adds the virtio socket device, through which DialGuest
// reaches the agent. Only this process can connect to it: unlike vsock
// on Linux, no other local user can reach the guest.
func setVZVsock(c *vz.VirtualMachineConfiguration, _ Config, _ *vzConsole) error {
	dev, err := vz.NewVirtioSocketDeviceConfiguration()
	if err != nil {
		return err
	}
	c.SetSocketDevicesVirtualMachineConfiguration([]vz.SocketDeviceConfiguration{dev})
	return nil
}

// setVZDisks attaches each image read-only. The guest finds an image's
// disk by its virtio-blk serial (/sys/block/vdX/serial, guest/boot), and
// the block device identifier is that serial (macOS 12.3 and later).
func setVZDisks(c *vz.VirtualMachineConfiguration, cfg Config, _ *vzConsole) error {
	var disks []vz.StorageDeviceConfiguration
	for _, im := range cfg.Images {
		// Cached: the images are read-only and shared by every run, so the
		// host's page cache serves them; with no writes, no sync is needed.
		att, err := vz.NewDiskImageStorageDeviceAttachmentWithCacheAndSync(im.Path, true,
			vz.DiskImageCachingModeCached, vz.DiskImageSynchronizationModeNone)
		if err != nil {
			return fmt.Errorf("image %s (%s): %w", im.Name, im.Path, err)
		}
		blk, err := vz.NewVirtioBlockDeviceConfiguration(att)
		if err != nil {
			return fmt.Errorf("image %s: %w", im.Name, err)
		}
		if err := blk.SetBlockDeviceIdentifier(vzDiskID(im.Name)); err != nil {
			return fmt.Errorf("image %s: block device identifier: %w (PyBox needs macOS 12.3 or later)", im.Name, err)
		}
		disks = append(disks, blk)
	}
	c.SetStorageDevicesVirtualMachineConfiguration(disks)
	return nil
}

// setVZData shares each data folder's copy read-only over virtio-fs, tagged
// as the kernel command line names it.
func setVZData(c *vz.VirtualMachineConfiguration, cfg Config, _ *vzConsole) error {
	var devs []vz.DirectorySharingDeviceConfiguration
	for i, d := range cfg.Data {
		dir, err := vz.NewSharedDirectory(d.Folder, true)
		if err != nil {
			return fmt.Errorf("data folder %s (%s): %w", d.Name, d.Folder, err)
		}
		share, err := vz.NewSingleDirectoryShare(dir)
		if err != nil {
			return fmt.Errorf("data folder %s: %w", d.Name, err)
		}
		fs, err := vz.NewVirtioFileSystemDeviceConfiguration(DataTag(i))
		if err != nil {
			return fmt.Errorf("data folder %s: %w", d.Name, err)
		}
		fs.SetDirectoryShare(share)
		devs = append(devs, fs)
	}
	c.SetDirectorySharingDevicesVirtualMachineConfiguration(devs)
	return nil
}

// setVZEntropy gives the guest virtio-rng: its crng is ready at once,
// and Python's os.urandom never waits.
func setVZEntropy(c *vz.VirtualMachineConfiguration, _ Config, _ *vzConsole) error {
	dev, err := vz.NewVirtioEntropyDeviceConfiguration()
	if err != nil {
		return err
	}
	c.SetEntropyDevicesVirtualMachineConfiguration([]*vz.VirtioEntropyDeviceConfiguration{dev})
	return nil
}

// setVZBalloon adds the traditional virtio balloon. This balloon has no
// free page reporting: memory the guest once touched goes back to macOS
// only when the supervisor lowers the balloon's target (Machine's
// SetMemoryTarget, see vzBalloon).
func setVZBalloon(c *vz.VirtualMachineConfiguration, _ Config, _ *vzConsole) error {
	dev, err := vz.NewVirtioTraditionalMemoryBalloonDeviceConfiguration()
	if err != nil {
		return err
	}
	c.SetMemoryBalloonDevicesVirtualMachineConfiguration([]vz.MemoryBalloonDeviceConfiguration{dev})
	return nil
}

// vzBalloon is Machine's balloon on vz: it sets the traditional balloon's
// target, which the guest's balloon driver then meets by giving pages
// back (or taking them again).
func vzBalloon(machine *vz.VirtualMachine) func(int64) {
	devs := machine.MemoryBalloonDevices()
	if len(devs) != 1 {
		return nil
	}
	dev := vz.AsVirtioTraditionalMemoryBalloonDevice(devs[0])
	if dev == nil {
		return nil
	}
	return func(bytes int64) { dev.SetTargetVirtualMachineMemorySize(uint64(bytes)) }
}

// entitlementHint says what to do when Virtualization.framework refuses a
// binary that is not signed with its entitlement.
func entitlementHint(err error) string {
	if err != nil && strings.Contains(err.Error(), "entitlement") {
		return " (sign pybox with the com.apple.security.virtualization entitlement: `make sign`, see docs/macos.md)"
	}
	return ""
}

// watchVZ follows the VM's state until it stops. A guest that powers off
// (or reboots, or panics: panic=-1 reboots) stops the VM: vz has no reset.
func watchVZ(machine *vz.VirtualMachine, m *Machine, con *vzConsole, stderr io.Writer) {
	for state := range machine.StateChangedNotify() {
		fmt.Fprintf(stderr, "vz: VM %s\n", strings.ToLower(strings.TrimPrefix(state.String(), "VirtualMachineState")))
		var err error
		switch state {
		case vz.VirtualMachineStateStopped:
		case vz.VirtualMachineStateError:
			err = errors.New("vz: the VM stopped on an internal error of Virtualization.framework")
		default:
			continue
		}
		// Virtualization.framework is done with the console's descriptors
		// now: closing them lets Console reads reach EOF.
		con.closeVMEnds()
		m.exited(err)
		return
	}
}

// dialVsock connects to the agent through the VM's socket device, retrying
// until the agent listens, ctx ends or the VM stops. Connect may never
// return when nothing listens on the port, so one attempt at a time runs
// in its own goroutine, and a connection that comes after the caller gave
// up is closed.
func dialVsock(ctx context.Context, m *Machine, sock *vz.VirtioSocketDevice) (net.Conn, error) {
	for {
		res := make(chan vsockResult, 1)
		go func() {
			c, err := sock.Connect(guestVsockPort)
			if err != nil {
				res <- vsockResult{nil, err}
				return
			}
			res <- vsockResult{c, nil}
		}()
		var last error
		select {
		case r := <-res:
			if r.err == nil {
				return r.c, nil
			}
			last = r.err
		case <-ctx.Done():
			go closeLate(res)
			return nil, fmt.Errorf("vm: guest channel: %w", ctx.Err())
		case <-m.done:
			go closeLate(res)
			return nil, fmt.Errorf("vm: guest channel: the VM stopped: %v", m.err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("vm: guest channel: %w (last: %v)", ctx.Err(), last)
		case <-m.done:
			return nil, fmt.Errorf("vm: guest channel: the VM stopped: %v", m.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// vsockResult is one Connect's outcome; c is a nil interface (never a nil
// *vz.VirtioSocketConnection) when Connect failed.
type vsockResult struct {
	c   net.Conn
	err error
}

// closeLate closes a connection that arrives after nobody waits for it.
func closeLate(res <-chan vsockResult) {
	if r := <-res; r.c != nil {
		r.c.Close()
	}
}

// vzConsole is the serial console: two pipes between this process and
// the guest's hvc0. Reads are the guest's output, writes are typed in.
// The VM's ends go to Virtualization.framework as bare descriptors it
// does not own: they must stay open — and referenced, since an *os.File
// closes its descriptor when collected — until the VM has stopped.
type vzConsole struct {
	guestIn, typed   *os.File // typed → guestIn, read by the VM
	guestOut, output *os.File // guestOut, written by the VM → output
}

func newVZConsole() (*vzConsole, error) {
	ps, err := pipes.Make(2)
	if err != nil {
		return nil, err
	}
	return &vzConsole{guestIn: ps[0].R, typed: ps[0].W, output: ps[1].R, guestOut: ps[1].W}, nil
}

func (c *vzConsole) Read(p []byte) (int, error)  { return c.output.Read(p) }
func (c *vzConsole) Write(p []byte) (int, error) { return c.typed.Write(p) }

func (c *vzConsole) closeVMEnds() {
	c.guestIn.Close()
	c.guestOut.Close()
}

func (c *vzConsole) closeAll() {
	c.closeVMEnds()
	c.typed.Close()
	c.output.Close()
}
