package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"pybox/guest/boot"
	"pybox/guest/box"
	"pybox/guest/channel"
	"pybox/guest/reap"
	"pybox/shared/wire"
)

// keepLogLines is how many log lines the console's "log" shows.
const keepLogLines = 500

// Main is PID 1: it mounts, sets up its cgroups, mounts the images,
// listens on the channels and serves. It never returns; on a fatal error
// it logs, syncs and powers off.
func Main() {
	start := time.Now()
	console := openConsole()
	out := NewConsoleWriter(console)
	log := boot.NewLog(out, keepLogLines, boot.Uptime)
	kernel := boot.KernelRelease()
	log.Printf("pybox-agent %s (%s) on Linux %s", Version, Commit, kernel)
	ignoreSignals(log)

	// Off the initial rootfs first, so that boxes can pivot_root.
	if err := boot.LeaveRootfs(); err != nil {
		fatal(log, err)
	}
	// Every mount happens before the first frame is read.
	if err := boot.MountAll(boot.Mounts, log.Printf); err != nil {
		fatal(log, err)
	}
	// The agent leaves the root cgroup before it starts any process, so
	// every process it starts is born under agent/ or runs/.
	if err := boot.SetupCgroups(); err != nil {
		fatal(log, err)
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		fatal(log, fmt.Errorf("agent: read the kernel command line: %w", err))
	}
	var idle *Idle
	if order, ok, err := boot.ParseReportOrder(string(cmdline)); err != nil {
		log.Printf("agent: %v", err)
	} else if ok {
		if err := boot.StopReporting(); err != nil {
			log.Printf("agent: %v: freed memory stays with the VM", err)
		} else {
			idle = &Idle{Busy: boot.StopReporting, GiveBack: func() error { return boot.ReportFreeMemory(order) }}
			log.Printf("agent: after %v without a run, the page cache is dropped and free memory in blocks of %d KiB and up goes back to the host", IdleAfter, 4<<order)
		}
	}
	accel := boot.ParseAccel(string(cmdline))
	log.Printf("agent: the host says the CPU runs under %q", accel)
	mounted := boot.MountImages(string(cmdline), log.Printf)
	data := boot.MountData(string(cmdline), log.Printf)
	warmImages(mounted, log.Printf)
	reap.Start()

	images := make([]wire.ImageInfo, len(mounted))
	byName := map[string]wire.ImageInfo{}
	for i, img := range mounted {
		images[i] = img.ImageInfo
		byName[img.Name] = img.ImageInfo
	}
	warm := !strings.Contains(" "+string(cmdline)+" ", " pybox.warm=0 ")
	runs, err := boot.ParseRuns(string(cmdline))
	if err != nil {
		log.Printf("agent: %v: sized for 1 run at once", err)
	}
	files := os.DirFS("/")
	b := box.New(box.Config{Images: byName, Data: data, Agent: Info(kernel), Accel: accel, Logf: log.Printf, Warm: warm,
		RunsAtOnce: runs, Memory: func() (*wire.GuestMemory, error) { return readMemory(files) }})
	a := New(Config{
		Kernel:   kernel,
		Images:   images,
		Data:     data,
		Runner:   b,
		Logf:     log.Printf,
		PowerOff: func() { log.Printf("agent: powering off"); log.Flush(time.Second); boot.PowerOff() },
		Files:    files,
		LogLines: log.Lines,
		Idle:     idle,
		SetClock: setClock,
	})

	// The warm boxes start after the images were read into the page
	// cache (warmImages), in the background.
	b.StartWarming()
	go func() {
		err := a.Console(console, out)
		log.Printf("agent: console prompt ended: %v", err)
	}()
	listeners := []Listener{channel.VirtioPort(channel.PortName, log.Printf)}
	if l, err := channel.Vsock(channel.VsockPort, log.Printf); err == nil {
		listeners = append(listeners, l)
	} else {
		log.Printf("agent: %v", err)
	}
	for _, l := range listeners {
		go a.Accept(l)
	}
	log.Printf("agent: ready in %d ms, %.3f s after the kernel started; images: %s; listening on %s; console: type help",
		time.Since(start).Milliseconds(), boot.Uptime().Seconds(), a.imageList(), names(listeners))
	for {
		// PID 1 must never return; a plain select{} could be taken for a
		// deadlock by the Go runtime when every goroutine waits.
		time.Sleep(time.Hour)
	}
}

// Listener yields connections; channel's listeners are ones.
type Listener interface {
	Accept() (io.ReadWriteCloser, error)
	String() string
}

// Accept serves every connection l yields, each in its own goroutine.
func (a *Agent) Accept(l Listener) {
	for {
		c, err := l.Accept()
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			a.logf("agent: %s: accept: %v", l, err)
			time.Sleep(time.Second) // a failing listener must not spin
			continue
		}
		go a.serveSafely(c)
	}
}

// serveSafely serves a connection; a panic in serving it is logged and
// ends that connection only: PID 1 must not die of it.
func (a *Agent) serveSafely(c io.ReadWriteCloser) {
	defer func() {
		if p := recover(); p != nil {
			a.logf("agent: %s: panic while serving: %v", nameOf(c), p)
			c.Close()
		}
	}()
	a.Serve(c)
}

func names(ls []Listener) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.String()
	}
	return strings.Join(s, ", ")
}

// openConsole opens the serial console for the log and the prompt. The
// kernel gave PID 1 the console as fds 0-2 when the initramfs has a
// /dev/console node; a file of its own keeps the agent's non-blocking
// mode off those fds.
func openConsole() *os.File {
	f, err := os.OpenFile("/dev/console", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return os.Stderr
	}
	return f
}

// ignoreSignals catches the signals whose default action would end a
// process. The kernel already ignores them for PID 1, but Go's runtime
// would exit on them itself, and PID 1 exiting panics the kernel.
// Caught, rather than ignored, so that processes started from PID 1 do
// not inherit an ignored disposition.
func ignoreSignals(log *boot.Log) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGPIPE,
		unix.SIGUSR1, unix.SIGUSR2, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGALRM)
	go func() {
		for s := range ch {
			log.Printf("agent: ignored signal %v", s)
		}
	}()
}

// fatal ends the VM after a failure the agent cannot serve without.
func fatal(log *boot.Log, err error) {
	log.Printf("agent: FATAL: %v; powering off", err)
	log.Flush(2 * time.Second)
	boot.PowerOff()
}

// Warming budgets: the page cache is reclaimable, so the byte budget only
// keeps a large image from pushing out a small one; the time budget keeps
// a slow (TCG) boot from waiting too long before the first hello.
const (
	warmBytesPerImage = 256 << 20
	warmTime          = 15 * time.Second
)

// warmImages reads what Python needs of every image before the agent
// serves, so the first run on an image does not pay a cold page cache
// against its timeout. The stdlib image goes first: every other image's
// runs start the same way, and its runs are the ones with short timeouts.
func warmImages(images []boot.Image, logf func(string, ...any)) {
	deadline := time.Now().Add(warmTime)
	ordered := append([]boot.Image(nil), images...)
	sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].Name == "stdlib" && ordered[j].Name != "stdlib" })
	for _, img := range ordered {
		r := boot.Warm(img.Dir, warmBytesPerImage, deadline)
		note := " (no warm list: interpreter only)"
		if r.Listed {
			note = " (its warm list)"
		}
		if r.ListErr != nil {
			note = fmt.Sprintf(" (its warm list was refused: %v; interpreter only)", r.ListErr)
		}
		if !r.Complete {
			note += " (budget reached)"
		}
		logf("boot: warmed image %s: %d files, %.1f MiB in %d ms%s", img.Name, r.Files, float64(r.Bytes)/(1<<20), r.Took.Milliseconds(), note)
	}
}
