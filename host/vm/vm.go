package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"pybox/host/folder"
	"pybox/host/jail"
	"pybox/shared/archs"
	"pybox/shared/wire"
)

// Config is the VM to start.
type Config struct {
	// Arch is the guest's architecture: "x86_64" or "arm64" (default:
	// the host's). On Linux an arm64 guest runs on an x86-64 host under
	// QEMU's emulator, as the Mac's guest does under Virtualization.framework.
	Arch      string  `json:"arch,omitempty"`
	Kernel    string  `json:"kernel"`
	Initramfs string  `json:"initramfs"`
	Images    []Image `json:"images,omitempty"`
	MemoryMiB int     `json:"memory_mib"`
	CPUs      int     `json:"cpus"`
	// Runs is how many runs at once the VM is sized for: its default
	// memory (MemoryForRuns) and each image's warm boxes follow from it.
	// The guest admits runs by the memory it has, whatever this says.
	Runs int `json:"runs,omitempty"`
	// Machine picks the QEMU machine type: "microvm" (default) or "pc"
	// for an x86_64 guest, "virt" (the only one) for an arm64 guest.
	Machine string `json:"machine,omitempty"`
	// Channel picks the guest channel: "serial" (virtio-serial, default)
	// or "vsock".
	Channel string `json:"channel,omitempty"`
	// Dir is the VM's private directory (sockets live there).
	Dir string `json:"dir"`
	// Data are the data folders shared with the guest, read-only.
	Data []DataShare `json:"data,omitempty"`
	// NoWarm turns the guest's warm boxes off: every run starts its
	// python3 from nothing.
	NoWarm bool `json:"no_warm,omitempty"`
	// KeepMemory turns off giving freed guest memory back to the host
	// (on QEMU the balloon's free page reporting, on vz an idle balloon
	// target): the VM then holds all it ever touched until it stops.
	KeepMemory bool `json:"keep_memory,omitempty"`
	// NoQEMUSandbox lets the VM start under a QEMU built without its
	// seccomp sandbox (-sandbox); without it such a QEMU is refused.
	NoQEMUSandbox bool `json:"no_qemu_sandbox,omitempty"`
	// Jail is how QEMU is confined on Linux (host/jail): auto (the
	// default: namespaces, else Landlock, else none, the last only when
	// no data folder is shared), namespaces, landlock, or none.
	Jail string `json:"jail,omitempty"`
}

// Image is a read-only filesystem image attached to the VM. Digest is the
// sha256 (hex) of the file; the host checks it before the VM starts.
type Image struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// DataShare is a data folder the user named: the guest sees Folder
// itself, read-only (host/folder says what that gives a box).
type DataShare struct {
	Name   string `json:"name"`
	Folder string `json:"folder"`
	// Dir is the folder, opened by the supervisor once it has walked it
	// (host/folder): the VM is given this very directory, and every run's
	// walk starts from it, never from Folder resolved again.
	Dir *os.File `json:"-"`
}

// DataTag is the share tag (9p mount tag, virtio-fs tag) of the i-th data
// folder; the kernel command line's pybox.data= entries name them in the
// same order.
func DataTag(i int) string { return "pyboxdata" + strconv.Itoa(i) }

// SandboxQEMU is Machine.Sandbox for a QEMU confined by its own seccomp
// filter.
const SandboxQEMU = "qemu seccomp (-sandbox on)"

// Defaults for a Config.
const (
	// DefaultRuns is how many runs at once a VM is sized for when the
	// user does not say: two agents side by side.
	DefaultRuns    = 2
	DefaultCPUs    = 2
	MachineMicrovm = "microvm"
	MachinePC      = "pc"
	MachineVirt    = "virt"
	ChannelSerial  = "serial"
	ChannelVsock   = "vsock"
)

// microvmSlots is the number of virtio-mmio transports QEMU's microvm
// machine has.
const microvmSlots = 8

// virtioDevices counts the virtio devices the VM needs: its random
// number source, its channel to the agent, its balloon (unless it keeps
// its memory), and one per image and data folder.
func (c *Config) virtioDevices() int {
	n := 2 + len(c.Images) + len(c.Data)
	if !c.KeepMemory {
		n++ // the balloon
	}
	return n
}

// Memory a VM is given for its runs at once, in MiB: one run's is what
// the guest itself, its warm boxes and one run's 512 MiB take with room
// to spare (1024 MiB, measured: about 40 MiB for the guest and 75 MiB
// for a stdlib and a data box waiting); each further run adds its bound,
// its share of the guest's headroom, and a warm box of each built-in
// image.
const (
	memoryOneRun     = 1024
	memoryPerRun     = 640
	DefaultMemoryMiB = memoryOneRun + (DefaultRuns-1)*memoryPerRun
)

// MinMemoryMiB is the least memory a VM may have: one run's 512 MiB bound
// and its headroom, beside the guest's own and a few small warm boxes.
const MinMemoryMiB = 768

// MemoryForRuns is the memory, in MiB, of a VM sized for runs at once.
func MemoryForRuns(runs int) int {
	return memoryOneRun + (max(1, runs)-1)*memoryPerRun
}

// Check checks a Config before anything is started, filling in defaults.
func (c *Config) Check() error {
	if c.Runs == 0 {
		c.Runs = DefaultRuns
	}
	if c.Runs < 1 || c.Runs > wire.MaxRunsAtOnce {
		return fmt.Errorf("vm: --runs %d: give 1–%d", c.Runs, wire.MaxRunsAtOnce)
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = MemoryForRuns(c.Runs)
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.Channel == "" {
		c.Channel = ChannelSerial
	}
	if c.Arch == "" {
		c.Arch = archs.Host()
	}
	if err := c.checkMachine(); err != nil {
		return err
	}
	if c.Machine == "" {
		// microvm boots as fast as pc and is simpler, but has a fixed
		// number of virtio slots: many images and data folders need pc.
		c.Machine = MachineMicrovm
		if runtime.GOOS == "linux" && c.virtioDevices() > microvmSlots {
			c.Machine = MachinePC
		}
	}
	if runtime.GOOS == "linux" && c.Machine == MachineMicrovm && c.virtioDevices() > microvmSlots {
		return fmt.Errorf("vm: %d images and %d data folders need %d virtio devices, and -M microvm has %d: start without --machine microvm (or with --machine pc), or name fewer",
			len(c.Images), len(c.Data), c.virtioDevices(), microvmSlots)
	}
	if err := CheckSize(c.MemoryMiB, c.CPUs); err != nil {
		return err
	}
	switch {
	case c.Arch == archs.X86_64 && c.Machine != MachineMicrovm && c.Machine != MachinePC:
		return fmt.Errorf("vm: machine %q: use %s or %s", c.Machine, MachineMicrovm, MachinePC)
	case c.Channel != ChannelSerial && c.Channel != ChannelVsock:
		return fmt.Errorf("vm: channel %q: use %s or %s", c.Channel, ChannelSerial, ChannelVsock)
	}
	for _, f := range []struct{ what, path, hint string }{
		{"kernel", c.Kernel, "build it with `make kernel`, or pass --kernel"},
		{"initramfs", c.Initramfs, "build it with `make`, or pass --initramfs"},
	} {
		if fi, err := os.Stat(f.path); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("vm: no %s at %q: %s", f.what, f.path, f.hint)
		}
	}
	if err := checkImages(c.Images); err != nil {
		return err
	}
	if c.Jail == "" {
		c.Jail = jail.Auto
	}
	if err := jail.CheckMode(c.Jail); err != nil {
		return fmt.Errorf("vm: --qemu-jail: %w", err)
	}
	return c.checkData()
}

// checkMachine checks the architecture and, for arm64, the machine type:
// an arm64 guest under QEMU always runs on -M virt, with its devices on
// PCI as on a Mac.
func (c *Config) checkMachine() error {
	if err := archs.Check(c.Arch); err != nil {
		return fmt.Errorf("vm: %w", err)
	}
	if c.Arch != archs.Arm64 || runtime.GOOS != "linux" {
		return nil
	}
	switch c.Machine {
	case "", MachineVirt:
		c.Machine = MachineVirt
		return nil
	}
	return fmt.Errorf("vm: machine %q is for x86_64 guests; an arm64 guest runs on %s (leave --machine out)", c.Machine, MachineVirt)
}

// CheckSize checks a VM's memory and CPUs.
func CheckSize(memoryMiB, cpus int) error {
	switch {
	case memoryMiB < MinMemoryMiB || memoryMiB > 65536:
		return fmt.Errorf("vm: memory %d MiB: give %d–65536 (a run may hold 512 MiB, beside the guest's own; %d MiB holds one run at once, --runs N sizes it for N)",
			memoryMiB, MinMemoryMiB, MemoryForRuns(1))
	case cpus < 1 || cpus > 8:
		return fmt.Errorf("vm: %d CPUs: give 1–8 (the guest kernel supports 8)", cpus)
	}
	return nil
}

func checkImages(images []Image) error {
	seen := map[string]bool{}
	for _, im := range images {
		if err := wire.CheckImageName(im.Name); err != nil {
			return fmt.Errorf("vm: %w", err)
		}
		if seen[im.Name] {
			return fmt.Errorf("vm: image %q given twice", im.Name)
		}
		seen[im.Name] = true
		if len(im.Digest) != 64 || strings.Trim(im.Digest, "0123456789abcdef") != "" {
			return fmt.Errorf("vm: image %q: digest %q is not a sha256 in hex", im.Name, im.Digest)
		}
		if strings.ContainsAny(im.Path, ",") {
			// QEMU's option syntax would need ",," escaping; refuse rather than guess.
			return fmt.Errorf("vm: image path %q contains a comma: move or link it elsewhere", im.Path)
		}
	}
	return nil
}

// MaxDataShares bounds the data folders of one VM.
const MaxDataShares = 16

func (c *Config) checkData() error {
	if len(c.Data) > MaxDataShares {
		return fmt.Errorf("vm: %d data folders; a VM takes at most %d", len(c.Data), MaxDataShares)
	}
	seen := map[string]bool{}
	for _, d := range c.Data {
		if err := wire.CheckDataName(d.Name); err != nil {
			return fmt.Errorf("vm: --data %s: %w", d.Name, err)
		}
		if seen[d.Name] {
			return fmt.Errorf("vm: data folder %q is named twice", d.Name)
		}
		seen[d.Name] = true
		if !filepath.IsAbs(d.Folder) {
			return fmt.Errorf("vm: data folder %s: %q is not an absolute path", d.Name, d.Folder)
		}
		if fi, err := os.Stat(d.Folder); err != nil || !fi.IsDir() {
			return fmt.Errorf("vm: data folder %s: %q is not a directory", d.Name, d.Folder)
		}
		if err := folder.CheckOpen(d.Folder); err != nil {
			return fmt.Errorf("vm: data folder %s: %w", d.Name, err)
		}
	}
	return nil
}

// FileSHA256 returns the sha256 of a file's content, in hex.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// KernelCmdline is the guest kernel's command line, without the
// backend's own additions. accel ("kvm", "tcg", "vz") tells the guest
// whether its CPU is emulated: it holds OpenBLAS to kernels that run
// under QEMU's emulator only there.
func KernelCmdline(cfg Config, accel string) string {
	// An x86_64 guest's console is the 8250 serial port, and it reboots
	// with a triple fault (works on every machine type). An arm64 guest,
	// under vz or QEMU's virt, has the virtio console, hvc0, and reboots
	// with a PSCI call, which ends the VM as well.
	args := []string{"console=ttyS0", "loglevel=4", "panic=-1", "reboot=t"}
	if cfg.Arch == archs.Arm64 {
		args = []string{"console=hvc0", "loglevel=4", "panic=-1"}
	}
	args = append(args, "pybox.accel="+accel, "pybox.runs="+strconv.Itoa(max(1, cfg.Runs)))
	sorted := append([]Image(nil), cfg.Images...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, im := range sorted {
		args = append(args, "pybox.image="+im.Name+":"+im.Digest)
	}
	for _, d := range cfg.Data {
		args = append(args, "pybox.data="+d.Name)
	}
	if cfg.NoWarm {
		args = append(args, "pybox.warm=0")
	}
	if !cfg.KeepMemory && accel != "vz" {
		// Free page reporting (QEMU's balloon; vz's has none) gives
		// back free blocks of at least 2^order pages, once the guest is
		// idle. The default order (9: 2 MiB) leaves out the free memory
		// that runs scatter in smaller blocks, which this kernel cannot
		// compact; 128 KiB blocks take most of it back.
		args = append(args, "pybox.report_order="+strconv.Itoa(reportOrder))
	}
	return strings.Join(args, " ")
}

// reportOrder is the smallest free block reported, as a power of two of
// pages: 5 is 128 KiB. The guest reports only once it has run nothing for
// a while (reporting while runs came made data calls about a quarter
// slower under TCG). Measured with pandas calls on the data image, order
// 5 brought the guest's RAM on the host back to within 50 MiB of just
// booted, where the kernel's default, 9, gave back almost nothing.
const reportOrder = 5

// PidFile is where the VM process of an older pybox wrote its pid; its
// path in that process's command line told the VM of dir apart.
func PidFile(dir string) string { return dir + "/vm.pid" }

// Marker is the VM's name in its process's command line (QEMU's -name):
// it tells the VM of the directory dir apart from any other process,
// without naming a path of the user's to the VM process.
func Marker(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return "pybox-" + hex.EncodeToString(sum[:8])
}

// Ours reports whether pid is the live VM process of the directory dir
// (started by this pybox or an older one), so that a recycled pid is
// never taken for it.
func Ours(pid int, dir string) bool {
	return Alive(pid, Marker(dir)) || Alive(pid, PidFile(dir))
}

// Attempt is one way to start the VM. The supervisor waits Timeout for
// the guest's hello; when Probe is set and no hello came, the attempt is
// recorded as failed (RecordFailure) and the next one is tried.
type Attempt struct {
	Accel   string
	Timeout time.Duration
	Probe   bool
}

// Machine is a started VM.
type Machine struct {
	Pid     int
	Accel   string
	Kind    string // machine type, e.g. "microvm"
	Channel string // "virtio-serial" or "vsock"
	// Sandbox says what confines the VM process's system calls: "qemu
	// seccomp (-sandbox on)", or why nothing does.
	Sandbox string
	// Jail says what confines what the VM process may reach on the host
	// (host/jail): its mode first, then what it gives, or why there is
	// none.
	Jail string
	// Console is the serial console: reads are the guest's output, writes
	// are typed into the guest. It reaches EOF when the VM is gone.
	Console io.ReadWriter

	dial func(ctx context.Context) (net.Conn, error)
	kill func() error
	// balloon sets the guest's memory target in bytes; nil where the
	// guest gives freed memory back by itself (QEMU's free page
	// reporting) or was told to keep it.
	balloon func(bytes int64)
	done    chan struct{}
	once    sync.Once
	err     error
}

// DialGuest connects to the guest channel. The connection may open before
// the guest agent listens; the hello handshake tells.
func (m *Machine) DialGuest(ctx context.Context) (net.Conn, error) { return m.dial(ctx) }

// SetMemoryTarget asks the guest to keep to bytes of memory, giving the
// rest back to the host, or lets it have all again (bytes = its whole
// memory). It says false, doing nothing, on a VM that has no balloon to
// drive.
func (m *Machine) SetMemoryTarget(bytes int64) bool {
	if m.balloon == nil {
		return false
	}
	m.balloon(bytes)
	return true
}

// Done is closed when the VM process has exited.
func (m *Machine) Done() <-chan struct{} { return m.done }

// Err is why the VM exited; valid after Done is closed.
func (m *Machine) Err() error { return m.err }

// Kill stops the VM at once (no clean shutdown) and waits for it.
func (m *Machine) Kill() {
	if err := m.kill(); err != nil {
		select {
		case <-m.done:
			return
		default:
		}
	}
	<-m.done
}

// exited records the VM's end; the first call wins.
func (m *Machine) exited(err error) {
	m.once.Do(func() {
		m.err = err
		close(m.done)
	})
}
