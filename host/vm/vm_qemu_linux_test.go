package vm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pybox/host/jail"
	"pybox/shared/archs"
)

func testConfig(t *testing.T, machine string) Config {
	dir := t.TempDir()
	for _, f := range []string{"bzImage", "initramfs.cpio", "stdlib.erofs"} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o600)
	}
	return Config{
		Kernel: filepath.Join(dir, "bzImage"), Initramfs: filepath.Join(dir, "initramfs.cpio"),
		Images:    []Image{{Name: "stdlib", Path: filepath.Join(dir, "stdlib.erofs"), Digest: strings.Repeat("ab", 32)}},
		MemoryMiB: 768, CPUs: 1, Machine: machine, Channel: ChannelSerial, Dir: dir,
	}
}

// argAfter returns the values following each occurrence of flag.
func argAfter(args []string, flag string) []string {
	var out []string
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			out = append(out, args[i+1])
		}
	}
	return out
}

func TestQEMUArgsMicrovmTCG(t *testing.T) {
	cfg := testConfig(t, MachineMicrovm)
	args := qemuArgs(cfg, "tcg", 2445404, true, jail.None)
	if got := argAfter(args, "-machine"); !slices.Equal(got, []string{"microvm,acpi=off"}) {
		t.Errorf("-machine %v", got)
	}
	if got := argAfter(args, "-cpu"); !slices.Equal(got, []string{"max"}) {
		t.Errorf("-cpu %v", got)
	}
	for _, want := range []string{"-no-reboot", "-nodefaults"} {
		if !slices.Contains(args, want) {
			t.Errorf("missing %s", want)
		}
	}
	if got := argAfter(args, "-nic"); !slices.Equal(got, []string{"none"}) {
		t.Errorf("-nic %v", got)
	}
	cmdline := argAfter(args, "-append")[0]
	for _, want := range []string{"console=ttyS0", "reboot=t", "panic=-1", "tsc_early_khz=2445404", "tsc=reliable", "pybox.accel=tcg", "pybox.image=stdlib:" + strings.Repeat("ab", 32)} {
		if !strings.Contains(cmdline, want) {
			t.Errorf("kernel command line %q lacks %q", cmdline, want)
		}
	}
	devices := strings.Join(argAfter(args, "-device"), " ")
	for _, want := range []string{"virtio-serial-device", "virtserialport,chardev=ch,name=pybox", "virtio-blk-device,drive=img0,serial=stdlib"} {
		if !strings.Contains(devices, want) {
			t.Errorf("devices %q lack %q", devices, want)
		}
	}
	if strings.Contains(devices, "-pci") {
		t.Errorf("microvm with a PCI device: %q", devices)
	}
	drive := argAfter(args, "-drive")[0]
	if !strings.Contains(drive, "readonly=on") || !strings.Contains(drive, "format=raw") {
		t.Errorf("-drive %q is not a read-only raw drive", drive)
	}
	if got := argAfter(args, "-chardev"); len(got) != 2 || got[1] != "socket,id=ch,fd=3,server=on,wait=off" {
		t.Errorf("-chardev %v: want the inherited listener", got)
	}
	if got := argAfter(args, "-name"); !slices.Equal(got, []string{Marker(cfg.Dir)}) || slices.Contains(args, "-pidfile") {
		t.Errorf("-name %v, or a -pidfile naming the VM's directory, in %q", got, args)
	}
	if !slices.Contains(args, "-sandbox") {
		t.Error("no -sandbox")
	}
}

func TestQEMUArgsPCKVM(t *testing.T) {
	cfg := testConfig(t, MachinePC)
	args := qemuArgs(cfg, "kvm", 2445404, false, jail.None)
	if got := argAfter(args, "-cpu"); !slices.Equal(got, []string{"host"}) {
		t.Errorf("-cpu %v", got)
	}
	cmdline := argAfter(args, "-append")[0]
	if strings.Contains(cmdline, "tsc") {
		t.Errorf("pc needs no TSC hint: %q", cmdline)
	}
	if !strings.Contains(cmdline, "pybox.accel=kvm") || strings.Contains(cmdline, "pybox.accel=tcg") {
		t.Errorf("kernel command line %q: want pybox.accel=kvm", cmdline)
	}
	devices := strings.Join(argAfter(args, "-device"), " ")
	if !strings.Contains(devices, "virtio-serial-pci") || !strings.Contains(devices, "virtio-blk-pci") {
		t.Errorf("devices %q", devices)
	}
	if slices.Contains(args, "-sandbox") {
		t.Error("-sandbox without support")
	}
}

func TestQEMUArgsVsock(t *testing.T) {
	cfg := testConfig(t, MachineMicrovm)
	cfg.Channel = ChannelVsock
	devices := strings.Join(argAfter(qemuArgs(cfg, "tcg", 1, false, jail.None), "-device"), " ")
	if !strings.Contains(devices, "vhost-vsock-device,guest-cid=3") || strings.Contains(devices, "virtserialport") {
		t.Errorf("devices %q", devices)
	}
}

func TestTSC(t *testing.T) {
	log := "[    0.000019] tsc: Detected 2445.404 MHz processor\n[    1.2] tsc: Refined TSC clocksource calibration: 2445.399 MHz\n"
	if khz, ok := tscFromKernelLog(log); !ok || khz != 2445399 {
		t.Errorf("refined: %d %v", khz, ok)
	}
	if khz, ok := tscFromKernelLog("[0.0] tsc: Detected 2445.404 MHz processor"); !ok || khz != 2445404 {
		t.Errorf("detected: %d %v", khz, ok)
	}
	if _, ok := tscFromKernelLog("nothing here"); ok {
		t.Error("found a TSC in nothing")
	}
	if khz, ok := tscFromCPUInfo("processor\t: 0\ncpu MHz\t\t: 2445.404\n"); !ok || khz != 2445404 {
		t.Errorf("cpuinfo: %d %v", khz, ok)
	}
	if _, ok := tscFromCPUInfo("cpu MHz\t: garbage\n"); ok {
		t.Error("parsed garbage")
	}
}

func TestHostTSC(t *testing.T) {
	khz, err := hostTSCkHz()
	if err != nil {
		t.Skipf("no TSC frequency on this host: %v", err)
	}
	if khz < 100000 {
		t.Errorf("TSC %d kHz", khz)
	}
}

func TestKVMProbeCache(t *testing.T) {
	home := t.TempDir()
	cfg := testConfig(t, MachineMicrovm)
	if _, ok := cachedKVMFailure(home, cfg.Kernel); ok {
		t.Fatal("a cached failure before any probe")
	}
	if err := RecordFailure(home, cfg, Attempt{Accel: "kvm"}, "no hello within 6s"); err != nil {
		t.Fatal(err)
	}
	if reason, ok := cachedKVMFailure(home, cfg.Kernel); !ok || reason != "no hello within 6s" {
		t.Fatalf("cached = %q, %v", reason, ok)
	}
	// Another kernel may boot where this one did not.
	os.WriteFile(cfg.Kernel, []byte("another kernel"), 0o600)
	if _, ok := cachedKVMFailure(home, cfg.Kernel); ok {
		t.Error("the cache survived a kernel change")
	}
}

func TestPlan(t *testing.T) {
	cfg := testConfig(t, MachineMicrovm)
	home := t.TempDir()
	at, _, err := Plan(home, cfg, "tcg")
	if err != nil || len(at) != 1 || at[0].Accel != "tcg" || at[0].Probe {
		t.Fatalf("tcg: %+v %v", at, err)
	}
	if _, _, err := Plan(home, cfg, "xen"); err == nil {
		t.Error("accepted accel xen")
	}
	at, notes, err := Plan(home, cfg, "auto")
	if err != nil {
		t.Fatal(err)
	}
	if at[len(at)-1].Accel != "tcg" || len(notes) == 0 {
		t.Errorf("auto does not end with tcg, or says nothing: %+v %q", at, notes)
	}
	if openKVM() == nil {
		if len(at) != 2 || at[0].Accel != "kvm" || !at[0].Probe || at[0].Timeout > kvmProbeTimeout {
			t.Errorf("auto with /dev/kvm: %+v", at)
		}
		RecordFailure(home, cfg, at[0], "test")
		at, notes, _ = Plan(home, cfg, "auto")
		if len(at) != 1 || !strings.Contains(strings.Join(notes, " "), "cached probe") {
			t.Errorf("after a failed probe: %+v %q", at, notes)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"ok", func(*Config) {}, ""},
		{"no kernel", func(c *Config) { c.Kernel += ".missing" }, "make kernel"},
		{"memory", func(c *Config) { c.MemoryMiB = 10 }, "memory"},
		{"cpus", func(c *Config) { c.CPUs = 99 }, "CPUs"},
		{"machine", func(c *Config) { c.Machine = "q35" }, "machine"},
		{"image name", func(c *Config) { c.Images[0].Name = "../x" }, "image name"},
		{"digest", func(c *Config) { c.Images[0].Digest = "abc" }, "digest"},
		{"comma", func(c *Config) { c.Images[0].Path += ",x" }, "comma"},
		{"twice", func(c *Config) { c.Images = append(c.Images, c.Images[0]) }, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, MachineMicrovm)
			tc.edit(&cfg)
			err := cfg.Check()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Check = %v, want %q", err, tc.want)
			}
		})
	}
}

// In a jail of its own root, QEMU finds the VM's files under /pybox, and
// its command line names no path of the user's.
func TestQEMUArgsJailed(t *testing.T) {
	cfg := testConfig(t, MachineMicrovm)
	cfg.Data = []DataShare{{Name: "sales", Folder: "/home/someone/sales,2024"}}
	args := qemuArgs(cfg, "tcg", 1, true, jail.Namespaces)
	for flag, want := range map[string]string{
		"-kernel": "/pybox/kernel", "-initrd": "/pybox/initramfs",
		"-drive": "file=/pybox/images/stdlib,", "-fsdev": "path=/pybox/data/sales,",
	} {
		if got := argAfter(args, flag); len(got) != 1 || !strings.HasPrefix(strings.TrimPrefix(got[0], "local,id=data0,"), want) {
			t.Errorf("%s %v, want %s...", flag, got, want)
		}
	}
	if all := strings.Join(args, " "); strings.Contains(all, cfg.Dir) || strings.Contains(all, "/home/someone") {
		t.Errorf("a host path in the jailed command line: %q", all)
	}
	// Under Landlock (no root of its own) the paths are the host's.
	args = qemuArgs(cfg, "tcg", 1, true, jail.Landlock)
	if got := argAfter(args, "-fsdev"); len(got) != 1 || !strings.Contains(got[0], "path=/home/someone/sales,,2024,") {
		t.Errorf("-fsdev %v", got)
	}
}

// Auto tries namespaces first, Landlock where the kernel can stop a
// truncation, and no jail only when no data folder would be shared.
func TestJailModes(t *testing.T) {
	cfg := testConfig(t, MachineMicrovm)
	cfg.Jail = jail.Auto
	modes, _, err := jailModes(cfg)
	if err != nil || modes[0] != jail.Namespaces || modes[len(modes)-1] != jail.None {
		t.Errorf("auto without data folders: %v %v", modes, err)
	}
	cfg.Data = []DataShare{{Name: "d", Folder: t.TempDir()}}
	modes, notes, err := jailModes(cfg)
	if err != nil || slices.Contains(modes, jail.None) {
		t.Errorf("auto with a data folder may run unjailed: %v %v", modes, err)
	}
	if slices.Contains(modes, jail.Landlock) != (jail.LandlockABI() >= jail.MinLandlockABI) || (len(notes) > 0) == (jail.LandlockABI() >= jail.MinLandlockABI) {
		t.Errorf("auto and Landlock ABI %d: %v, notes %q", jail.LandlockABI(), modes, notes)
	}
	for _, m := range []string{jail.Namespaces, jail.None} {
		cfg.Jail = m
		if modes, _, err := jailModes(cfg); err != nil || !slices.Equal(modes, []string{m}) {
			t.Errorf("%s: %v %v", m, modes, err)
		}
	}
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid(), "vm.test") {
		t.Error("this test process is not alive")
	}
	if Alive(os.Getpid(), "/no/such/marker") {
		t.Error("matched a marker that is not in the command line")
	}
	if Alive(0, "") {
		t.Error("pid 0 alive")
	}
}

// The arm64 guest (the Mac's) boots on QEMU's virt machine the way vz
// boots it: the console on hvc0, the images as virtio-blk disks with the
// image's name as serial, PCI transports, and a CPU whose pointer
// authentication is cheap to emulate.
func TestQEMUArgsArm64(t *testing.T) {
	cfg := testConfig(t, MachineVirt)
	cfg.Arch = archs.Arm64
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	args := qemuArgs(cfg, "tcg", 0, true, jail.None)
	if got := qemuBinary(archs.Arm64); got != "qemu-system-aarch64" && os.Getenv("PYBOX_QEMU") == "" {
		t.Errorf("binary %q", got)
	}
	if got := argAfter(args, "-machine"); len(got) != 1 || !strings.HasPrefix(got[0], "virt") {
		t.Errorf("-machine %v", got)
	}
	if got := argAfter(args, "-cpu"); !slices.Equal(got, []string{"max,pauth-impdef=on"}) {
		t.Errorf("-cpu %v", got)
	}
	cmdline := argAfter(args, "-append")[0]
	if !strings.Contains(cmdline, "console=hvc0") || strings.Contains(cmdline, "ttyS0") || strings.Contains(cmdline, "tsc") || strings.Contains(cmdline, "reboot=t") {
		t.Errorf("kernel command line %q: want hvc0 and nothing of x86's", cmdline)
	}
	if vz := vzCmdline(cfg); !strings.Contains(vz, "console=hvc0") {
		t.Errorf("vz's command line %q", vz)
	}
	devices := strings.Join(argAfter(args, "-device"), " ")
	for _, want := range []string{"virtio-serial-pci", "virtconsole,chardev=con", "virtserialport,chardev=ch,name=pybox", "virtio-blk-pci,drive=img0,serial=stdlib", "virtio-rng-pci"} {
		if !strings.Contains(devices, want) {
			t.Errorf("devices %q lack %q", devices, want)
		}
	}
	if strings.Contains(devices, "-device ") || strings.Contains(devices, "virtio-blk-device") || slices.Contains(args, "-serial") {
		t.Errorf("an x86 or mmio device in %q", args)
	}

	// Emulated: no KVM, a longer boot allowance, and the user is told.
	plan, notes, err := Plan(t.TempDir(), cfg, "auto")
	if err != nil || len(plan) != 1 || plan[0].Accel != "tcg" || plan[0].Timeout != emulatedTimeout || len(notes) != 1 || !strings.Contains(notes[0], "emulated") {
		t.Errorf("Plan: %+v %q %v", plan, notes, err)
	}
	if _, _, err := Plan(t.TempDir(), cfg, "kvm"); err == nil || !strings.Contains(err.Error(), "host's own architecture") {
		t.Errorf("Plan kvm: %v", err)
	}
	// The virt machine is for arm64; an x86_64 guest cannot ask for it,
	// nor an arm64 guest for microvm.
	bad := cfg
	bad.Machine = MachineMicrovm
	if bad.Check() == nil {
		t.Error("an arm64 guest on microvm passed the check")
	}
	bad = testConfig(t, MachineVirt)
	if bad.Check() == nil {
		t.Error("an x86_64 guest on virt passed the check")
	}
}

// A guest restarted after its data folder was moved is given the folder
// the supervisor holds, where it is now; without a handle, the path the
// user named.
func TestDataShareHostPath(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "sales")
	os.Mkdir(dir, 0o755)
	d := DataShare{Name: "sales", Folder: dir}
	if got := d.hostPath(); got != dir {
		t.Errorf("without a handle: %q", got)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d.Dir = f
	os.Rename(dir, dir+".moved")
	if got := d.hostPath(); got != dir+".moved" {
		t.Errorf("after a move: %q, want %q", got, dir+".moved")
	}
	if _, ino := d.identity(); ino == 0 {
		t.Error("no inode from the handle")
	}
	if got := whereNow([]DataShare{d}); got[0].Folder != dir+".moved" || d.Folder != dir {
		t.Errorf("whereNow: %q (the share given: %q)", got[0].Folder, d.Folder)
	}
}
