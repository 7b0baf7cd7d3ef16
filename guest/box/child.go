//go:build linux

package box

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"pybox/guest/seccomp"
	"pybox/shared/archs"
	"pybox/shared/wire"
)

// hostname is the box's name in its own UTS namespace.
const hostname = "pybox"

// devices are the only device nodes in the box's /dev, bound from the
// agent's /dev: a user namespace cannot mknod, and a tmpfs mounted in one
// is nodev anyway.
var devices = []string{"null", "zero", "full", "random", "urandom"}

// ChildMain is box-init, the box's first process. It starts as root of a
// fresh user namespace, in fresh pid, mount, net, ipc, uts and cgroup
// namespaces, inside the run's cgroup; it seals the box, checks its own
// posture and starts the program as its child. It never returns: a step
// that fails is reported on fd 4 and box-init exits 125 without running
// anything.
//
// box-init stays the init of the box's pid namespace rather than exec'ing
// the program there: the kernel drops signals that a namespace's init
// sends itself without a handler, so a program running as pid 1 would
// survive its own SIGTERM, SIGSTOP or abort(), unlike anywhere else. It
// reaps every orphan of the box, reports the program's wait status on
// fd 4 when the program ends, and exits; the kernel then kills whatever
// the program left in the namespace.
//
// The order follows runc's standard_init_linux.go: mounts while still
// privileged, then the root switch, then dropping privileges, and the
// seccomp filter last, as close to execve as possible.
func ChildMain() {
	// Capabilities and no_new_privs belong to a thread, and execve keeps
	// only the calling thread: every step must run on that one thread.
	runtime.LockOSThread()
	rep := os.NewFile(reportFD, "report")
	must := func(step string, err error) {
		if err != nil {
			sendReport(rep, report{Step: step, Error: err.Error()})
			os.Exit(exitSetup)
		}
	}

	// First, so that no signal from the program ever reaches box-init:
	// as the namespace's init with no handlers, the kernel drops them.
	must("signals", defaultSignals())

	// The report pipe closes at exec, so the program never holds it;
	// box-init keeps it until the program's wait status is sent.
	_, err := unix.FcntlInt(reportFD, unix.F_SETFD, unix.FD_CLOEXEC)
	must("report descriptor", err)

	// The configuration arrives on fd 3; its pipe is closed once read.
	cfg, err := readConfig()
	must("read config", err)

	// clone made the cgroup namespace before the kernel placed us in the
	// run's cgroup, so it is rooted at the agent's. Root it at our own.
	must("cgroup namespace", unix.Unshare(unix.CLONE_NEWCGROUP))

	// Nothing mounted from here on may propagate back to the agent.
	must("make mounts private", mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))

	// The image, bound onto itself: a mount of our own that can become
	// the root (a copy of the agent's mount is locked) and be made
	// read-only without touching the agent's.
	root := cfg.Root
	must("bind image", mount(root, root, "", unix.MS_BIND, ""))

	// /tmp is the staging tmpfs the agent filled (size and inode caps,
	// nosuid and nodev, which the bind keeps).
	must("mount /tmp", mount(cfg.Staging, root+"/tmp", "", unix.MS_BIND, ""))

	// /dev: a small tmpfs with five devices and /dev/shm, then read-only.
	must("mount /dev", mountDev(root+"/dev"))

	// /proc of the box's own pid namespace, with the kernel's knobs
	// read-only and its raw interfaces covered.
	must("mount /proc", mountProc(root+"/proc", root+"/dev/null"))

	// The data folders the run named, read-only at /data/<name>.
	if len(cfg.Data) > 0 {
		must("mount /data", mountData(root+"/data", cfg.Data))
	}

	// Switch to the image and leave the agent's mounts behind.
	must("pivot_root", pivot(root))

	// The root is read-only at the mount as well as in the image.
	must("remount root read-only", remountReadOnly("/"))

	must("hostname", unix.Sethostname([]byte(hostname)))

	// The network namespace has only lo, and it starts down.
	must("loopback up", loopbackUp())

	// No core files; a descriptor limit Python is used to. The
	// syscall package's Setrlimit also stops Go restoring its own
	// raised RLIMIT_NOFILE at exec.
	must("rlimit core", syscall.Setrlimit(unix.RLIMIT_CORE, &syscall.Rlimit{}))
	// No file larger than the tmpfs: a sparse file would otherwise have
	// an apparent size without bound, and reading it back (the output's
	// sha256) would take as long as the program liked. Python ignores
	// SIGXFSZ, so a write past it fails with EFBIG.
	fsize := uint64(cfg.FileSizeMax)
	must("rlimit fsize", syscall.Setrlimit(unix.RLIMIT_FSIZE, &syscall.Rlimit{Cur: fsize, Max: fsize}))
	must("rlimit nofile", syscall.Setrlimit(unix.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 1024, Max: 1024}))

	// Every descriptor above stderr closes at exec: the config pipe is
	// gone, the report pipe goes at exec, and so does anything the Go
	// runtime or an earlier step holds.
	must("close descriptors", unix.CloseRange(configFD, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC))

	// Drop privileges: the bounding set first (that needs CAP_SETPCAP,
	// gone after setuid), then ambient, then the ids, then whatever
	// capabilities are left on this thread.
	must("drop bounding set", dropBoundingSet())
	must("clear ambient capabilities", unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))
	// The user namespace denies setgroups; box-init has no
	// supplementary groups to begin with (the posture check confirms).
	must("set gid", unix.Setresgid(cfg.GID, cfg.GID, cfg.GID))
	must("set uid", unix.Setresuid(cfg.UID, cfg.UID, cfg.UID))
	must("clear capabilities", clearCapabilities())
	must("no_new_privs", unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))

	must("chdir /tmp", unix.Chdir("/tmp"))

	// Seccomp last: after it only the policy's calls work, and what is
	// left (reading /proc for the posture, one write, execve) is in it.
	// (Only the benchmark build may leave it out: see childConfig.check.)
	if !cfg.SkipSeccomp {
		must("seccomp", seccomp.Load())
	}

	// Check what the program will inherit, and say so. A bad posture
	// ends the run here. (The benchmark build may leave the check out; it
	// then reports a posture that says nothing but OK.)
	p := wire.Posture{OK: true}
	if !cfg.SkipPosture {
		p = checkPosture(cfg)
	}
	sendReport(rep, report{Posture: &p})
	if !p.OK {
		os.Exit(exitSetup)
	}

	pid, err := startProgram(cfg.Argv, cfg.Env, cfg.Control)
	must("start program", err)
	if cfg.Control {
		// The socket is the launcher's alone now.
		unix.Close(controlFD)
	}
	ws := reapUntil(pid)
	status := uint32(ws)
	sendReport(rep, report{WaitStatus: &status})
	os.Exit(0)
}

// reapUntil reaps every process that ends in the box (orphans come to
// box-init, the namespace's init) until the program itself has ended,
// and returns the program's wait status.
func reapUntil(pid int) unix.WaitStatus {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || got == pid {
			return ws
		}
	}
}

func sendReport(w io.Writer, r report) {
	b, _ := json.Marshal(r)
	w.Write(append(b, '\n'))
}

// readConfig reads the configuration from configFD and closes it.
func readConfig() (childConfig, error) {
	var cfg childConfig
	f := os.NewFile(configFD, "config")
	defer f.Close()
	// The code is at most 64 KiB; anything far larger is not ours.
	d := json.NewDecoder(io.LimitReader(f, 1<<20))
	d.DisallowUnknownFields()
	if err := d.Decode(&cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.check()
}

func mount(source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", source, target, err)
	}
	return nil
}

// mountDev makes the box's /dev.
func mountDev(dev string) error {
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return err
	}
	for _, d := range devices {
		// A bind needs a file to land on.
		fd, err := unix.Open(dev+"/"+d, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return fmt.Errorf("create %s/%s: %w", dev, d, err)
		}
		unix.Close(fd)
		if err := mount("/dev/"+d, dev+"/"+d, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	links := [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	for _, l := range links {
		if err := unix.Symlink(l[0], dev+"/"+l[1]); err != nil {
			return fmt.Errorf("symlink %s/%s: %w", dev, l[1], err)
		}
	}
	if err := unix.Mkdir(dev+"/shm", 0o755); err != nil {
		return fmt.Errorf("mkdir %s/shm: %w", dev, err)
	}
	if err := mount("shm", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=16m,nr_inodes=1024"); err != nil {
		return err
	}
	return mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// mountData makes dir (the image's empty /data) hold one read-only bind
// of each data folder. The image is read-only, so the mount points are
// made in a small tmpfs over dir, made read-only once they are bound.
func mountData(dir string, data []dataMount) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return errors.New("this image has no /data to mount data folders on: rebuild it with this pybox (pybox image build NAME)")
	}
	if err := mount("pybox-data", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, dataTmpfsOptions); err != nil {
		return err
	}
	for _, d := range data {
		target := dir + "/" + d.Name
		if err := unix.Mkdir(target, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", target, err)
		}
		if err := mount(d.Source, target, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		// The share is mounted so already; a bind made in a user
		// namespace must say so again to be remounted at all.
		if err := mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	return mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, dataTmpfsOptions)
}

// dataTmpfsOptions are those of the small tmpfs at /data that holds the
// data folders' mount points.
const dataTmpfsOptions = "mode=0755,size=16k,nr_inodes=64"

// procMask is a path of /proc the box must not use: a directory made
// read-only, or a file covered with /dev/null.
type procMask struct {
	path     string
	readOnly bool
}

// procMasks follow runc's defaults. Most need capabilities the program
// lacks anyway; covering them keeps a kernel bug in one of them out of
// reach.
var procMasks = []procMask{
	{path: "sys", readOnly: true},
	{path: "sysrq-trigger", readOnly: true},
	{path: "irq", readOnly: true},
	{path: "bus", readOnly: true},
	{path: "kcore"},
	{path: "keys"},
	{path: "timer_list"},
	{path: "sched_debug"},
	{path: "kallsyms"},
}

// mountProc mounts proc for the box's pid namespace at p and masks it.
func mountProc(p, devNull string) error {
	if err := mount("proc", p, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, m := range procMasks {
		target := p + "/" + m.path
		if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) {
			continue // not in this kernel
		}
		if !m.readOnly {
			if err := mount(devNull, target, "", unix.MS_BIND, ""); err != nil {
				return err
			}
			continue
		}
		if err := mount(target, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if err := remountReadOnly(target); err != nil {
			return err
		}
	}
	return nil
}

// remountReadOnly makes the bind mount at target read-only, nosuid and
// nodev, keeping noexec if it has it: a user namespace may not clear a
// flag the mount came with.
func remountReadOnly(target string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", target, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	if st.Flags&unix.ST_NOEXEC != 0 {
		flags |= unix.MS_NOEXEC
	}
	return mount("", target, "", flags, "")
}

// pivot makes root the root of the box's mount namespace.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root under the new one at "/",
	// where it can be detached, every mount of the agent's with it.
	err := unix.PivotRoot(".", ".")
	if errors.Is(err, unix.EINVAL) {
		return moveRoot()
	}
	if err != nil {
		return fmt.Errorf("pivot_root %s: %w", root, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	return unix.Chdir("/")
}

// moveRoot is the fallback when the agent runs from the initramfs:
// pivot_root refuses a root mount that has no parent. Like switch_root,
// it moves the image over "/" and chroots into it. The agent's mounts
// stay in this namespace beneath the box's root, where no path reaches
// them, and the program has no capability (nor the call) to chroot out.
func moveRoot() error {
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the image over /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

// loopbackUp brings up lo, the only interface of the box's network.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS: %w", err)
	}
	return nil
}

// dropBoundingSet removes every capability from the bounding set, so
// that no execve can bring one back.
func dropBoundingSet() error {
	for c := 0; c < 64; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			return nil // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
		}
	}
	return nil
}

// clearCapabilities empties the effective, permitted and inheritable
// sets. setuid away from 0 clears the first two; inheritable it keeps.
func clearCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return unix.Capset(&hdr, &data[0])
}

// startProgram looks argv[0] up in the box's PATH and starts it, with
// box-init's fds 0-2 and, for a warm box, the agent's socket as fd 3.
func startProgram(argv, env []string, control bool) (int, error) {
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	// Only fds 0, 1 and 2 are passed on (and a warm box's socket);
	// every other descriptor is close-on-exec (see "close descriptors").
	files := []uintptr{0, 1, 2}
	if control {
		files = append(files, controlFD)
	}
	attr := &syscall.ProcAttr{Dir: "/tmp", Env: env, Files: files}
	err := error(unix.ENOENT)
	for _, dir := range strings.Split(path, ":") {
		pid, e := syscall.ForkExec(dir+"/"+argv[0], argv, attr)
		if e == nil {
			return pid, nil
		}
		if err = e; !errors.Is(e, unix.ENOENT) {
			break
		}
	}
	if errors.Is(err, unix.ENOEXEC) {
		// An image of another architecture, attached by --image-file.
		return 0, fmt.Errorf("%s: %w: the image's python3 is not built for this %s guest (build or import the image for %s)", argv[0], err, archs.Host(), archs.Host())
	}
	return 0, fmt.Errorf("%s: %w (is it in the image?)", argv[0], err)
}
