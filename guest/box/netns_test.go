//go:build linux

package box

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/needs"
	"pybox/shared/wire"
)

// netProbe connects to the proxy before anything else, then says what
// its environment holds and what came back.
const netProbe = `
import errno, json, os, socket
out = {}
try:
    s = socket.create_connection(('127.0.0.1', 3128), timeout=5)
    s.sendall(b'ping')
    got = b''
    while True:
        b = s.recv(100)
        if not b:
            break
        got += b
    out['got'] = got.decode()
except OSError as e:
    out['connect'] = errno.errorcode.get(e.errno, str(e))
out['env'] = sorted(os.environ)
out['proxy'] = os.environ.get('HTTP_PROXY', '')
print(json.dumps(out))
`

// probeResult runs netProbe and reads what it printed.
func probeResult(t *testing.T, b *Runner, withNet bool, conns func(net.Conn) bool) (wire.Receipt, map[string]any) {
	t.Helper()
	r := &wire.Run{
		RunID: fmt.Sprintf("host-%d", runs.Add(1)), Code: netProbe, Image: filepath.Base(imageRoot),
		TimeoutSeconds: 10, MaxOutputBytes: wire.MaxOutputBytes, Net: withNet,
	}
	rec := b.Run(context.Background(), r, nil, conns).Receipt
	if rec.Status != wire.StatusOK || rec.Cleanup.Status != wire.CleanupRemoved {
		t.Fatalf("receipt %s %s, cleanup %+v\nstderr: %s", rec.Status, rec.Reason, rec.Cleanup, rec.Capture.Stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(rec.Capture.Stdout), &got); err != nil {
		t.Fatalf("probe output %q: %v", rec.Capture.Stdout, err)
	}
	return rec, got
}

// sockets counts the test process's open sockets.
func sockets(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// A net run's program finds the proxy in its environment and listening
// from its first instruction; its connection reaches conns, both ways;
// a net run is cold, and its listener is gone with the run.
func TestHostRunNet(t *testing.T) {
	b := hostRunner(t)
	var mu sync.Mutex
	var calls int
	var heard string
	conns := func(c net.Conn) bool {
		mu.Lock()
		calls++
		mu.Unlock()
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			p := make([]byte, 4)
			if _, err := io.ReadFull(c, p); err != nil {
				t.Errorf("read from the box: %v", err)
				return
			}
			mu.Lock()
			heard = string(p)
			mu.Unlock()
			c.Write([]byte("pong after " + string(p)))
		}()
		return true
	}
	before := sockets(t)
	rec, got := probeResult(t, b, true, conns)
	if got["got"] != "pong after ping" || got["connect"] != nil {
		t.Errorf("the program got %q (connect %v), want the host's answer", got["got"], got["connect"])
	}
	if got["proxy"] != "http://127.0.0.1:3128" {
		t.Errorf("HTTP_PROXY=%q", got["proxy"])
	}
	env := fmt.Sprint(got["env"])
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		if !strings.Contains(env, k) {
			t.Errorf("the environment %s lacks %s", env, k)
		}
	}
	mu.Lock()
	if calls != 1 || heard != "ping" {
		t.Errorf("conns called %d times, heard %q; want once, ping", calls, heard)
	}
	mu.Unlock()
	if rec.Box == nil || rec.Box.Warm || rec.Box.Fallback == "" {
		t.Errorf("box %+v: this runner keeps no warm boxes, and the receipt says so", rec.Box)
	}
	if after := sockets(t); after != before {
		t.Errorf("%d sockets open after the run, %d before: the listener outlived it", after, before)
	}
}

// A run without Net has the environment it always had, no listener in
// its box, and its conns is never called.
func TestHostRunWithoutNet(t *testing.T) {
	b := hostRunner(t)
	called := false
	_, got := probeResult(t, b, false, func(c net.Conn) bool { called = true; return false })
	if got["connect"] != "ECONNREFUSED" || got["got"] != nil {
		t.Errorf("connecting to the proxy's address: %v (got %v), want ECONNREFUSED", got["connect"], got["got"])
	}
	var want []string
	for _, kv := range programEnv(runtime.GOARCH, b.cfg.Accel) {
		want = append(want, strings.SplitN(kv, "=", 2)[0])
	}
	slices.Sort(want)
	if env, w := fmt.Sprint(got["env"]), fmt.Sprint(want); env != w {
		t.Errorf("environment %s, want %s", env, w)
	}
	if called {
		t.Error("conns called for a run without the network")
	}
}

// A run that opens the network with nothing to take its connections is
// refused before anything is made.
func TestNetRunWithoutConnsRefused(t *testing.T) {
	b := &Runner{cfg: Config{Images: map[string]wire.ImageInfo{"stdlib": {Name: "stdlib"}}}, paths: paths{staging: t.TempDir()}}
	r := &wire.Run{RunID: "r1", Code: "pass", Image: "stdlib", TimeoutSeconds: 1, MaxOutputBytes: 10, Net: true}
	rec := b.Run(t.Context(), r, nil, nil).Receipt
	if rec.Status != wire.StatusRefused || rec.Cleanup.Status != wire.CleanupNotAttempted || !strings.Contains(rec.Reason, "network") {
		t.Errorf("%s %s %q", rec.Status, rec.Cleanup.Status, rec.Reason)
	}
}

// When ready fails, box-init is killed and collected before spawn
// returns, and nothing of the box is left.
func TestSpawnReadyFails(t *testing.T) {
	needs.Root(t, "starting box-init")
	var pid int
	boom := errors.New("boom")
	_, err := spawn(spawnSpec{exe: "/proc/self/exe", cgroupFD: -1, ids: slotIDs(0), maxOut: 10,
		ready: func(p int) error {
			pid = p
			// box-init waits for its config: its network namespace is
			// there to enter, and it has not brought lo up.
			bn, err := listenIn(p, []int{8443, 3128, 443})
			if err != nil {
				t.Errorf("listenIn: %v", err)
				return boom
			}
			defer bn.close()
			if a := bn.proxy.Addr().String(); a != proxyAddr {
				t.Errorf("the proxy listens at %s", a)
			}
			if a := bn.dns.LocalAddr().String(); a != "127.0.0.1:53" {
				t.Errorf("the resolver listens at %s", a)
			}
			var direct []string
			for _, l := range bn.direct {
				direct = append(direct, l.Addr().String())
			}
			if got := strings.Join(direct, " "); got != "0.0.0.0:80 0.0.0.0:443 0.0.0.0:8443" {
				t.Errorf("direct listeners at %s", got)
			}
			return boom
		},
		wait: wait4})
	if !errors.Is(err, boom) {
		t.Fatalf("spawn: %v, want the hook's error", err)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("box-init %d after a failed ready: kill 0 says %v, want ESRCH", pid, err)
	}
}

// The proxy exists before anything of the program: box-init waits for
// its config until ready has returned, however long ready takes. A
// program that connects first thing reaches a listener made only after
// a pause.
func TestSpawnReadyBeforeProgram(t *testing.T) {
	b := hostRunner(t)
	ids := slotIDs(1)
	image := b.paths.images + "/" + filepath.Base(imageRoot)
	st, err := makeStaging(b.paths.staging, "ready", image, nil, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.remove(); err != nil {
			t.Errorf("remove staging: %v", err)
		}
	}()
	code := "import socket; print(socket.create_connection(('127.0.0.1', 3128), timeout=5).recv(10).decode())"
	cfg := b.childConfig(filepath.Base(imageRoot), st.tmp, []string{"python3", "-I", "-B", "-c", code}, nil)
	var p *proxy
	p0, err := spawn(spawnSpec{exe: b.paths.exe, cfg: cfg, cgroupFD: -1, ids: ids, maxOut: 1024, wait: wait4,
		ready: func(pid int) error {
			time.Sleep(300 * time.Millisecond)
			bn, err := listenIn(pid, nil)
			if err != nil {
				return err
			}
			p = serveProxy(bn, func(c net.Conn) bool {
				go func() { c.Write([]byte("early")); c.Close() }()
				return true
			}, func(string) {})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	p0.watch(wait4)
	select {
	case <-p0.exited:
	case <-time.After(20 * time.Second):
		unix.Kill(p0.pid, unix.SIGKILL)
		<-p0.exited
		t.Error("box-init did not end")
	}
	p.close()
	p0.stdout.finish(time.Second)
	p0.stderr.finish(time.Second)
	p0.report.finish(time.Second)
	_, out := p0.stdout.stream()
	_, errs := p0.stderr.stream()
	if out != "early\n" {
		t.Errorf("the program printed %q, want the proxy's greeting (stderr %q, refusal %q)", out, errs, p0.report.refusal())
	}
}

// localListener is a listener for acceptLoop on the test machine's own
// loopback.
func localListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// At most MaxNetOpen connections are handed over at once: the next
// waits until one of them is closed.
func TestAcceptLoopOpenAtOnce(t *testing.T) {
	l := localListener(t)
	taken := make(chan net.Conn, 2*wire.MaxNetOpen)
	b := newBounds()
	ended := make(chan bool, 1)
	go func() { ended <- acceptLoop(l, func(c *boxConn) bool { taken <- c; return true }, b) }()
	var dialled []net.Conn
	defer func() {
		for _, c := range dialled {
			c.Close()
		}
	}()
	for range wire.MaxNetOpen + 4 {
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		dialled = append(dialled, c)
	}
	var held []net.Conn
	for range wire.MaxNetOpen {
		select {
		case c := <-taken:
			held = append(held, c)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d connections handed over, want %d", len(held), wire.MaxNetOpen)
		}
	}
	select {
	case <-taken:
		t.Fatalf("more than %d connections handed over at once", wire.MaxNetOpen)
	case <-time.After(200 * time.Millisecond):
	}
	if _, ok := held[0].(interface{ CloseWrite() error }); !ok {
		t.Error("a handed-over connection cannot be half-closed")
	}
	held[0].Close()
	held[0].Close() // a second Close frees nothing more
	select {
	case c := <-taken:
		held = append(held, c)
	case <-time.After(10 * time.Second):
		t.Fatal("closing a connection handed over let no other through")
	}
	select {
	case <-taken:
		t.Fatal("a second close freed a second place")
	case <-time.After(200 * time.Millisecond):
	}
	close(b.done)
	if <-ended {
		t.Error("acceptLoop said it reached MaxNetStreams")
	}
	for _, c := range held {
		c.Close()
	}
}

// After MaxNetStreams in all, acceptLoop closes the listener: the next
// connect is refused. A connection take does not take is closed.
func TestAcceptLoopStreamsInAll(t *testing.T) {
	l := localListener(t)
	var calls int
	ended := make(chan bool, 1)
	go func() {
		ended <- acceptLoop(l, func(c *boxConn) bool { calls++; return false }, newBounds())
	}()
	for i := range wire.MaxNetStreams {
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("connection %d not taken: read %d, %v; want it closed", i+1, n, err)
		}
		c.Close()
	}
	select {
	case bounded := <-ended:
		if !bounded {
			t.Error("acceptLoop did not say it reached MaxNetStreams")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("acceptLoop goes on past MaxNetStreams")
	}
	if calls != wire.MaxNetStreams {
		t.Errorf("take called %d times, want %d", calls, wire.MaxNetStreams)
	}
	if c, err := net.Dial("tcp4", l.Addr().String()); !errors.Is(err, unix.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("connect after MaxNetStreams: %v, want refused", err)
	}
}

// The proxy's environment is added only for net runs: the variables
// programEnv sets are not among them.
func TestProxyEnv(t *testing.T) {
	env := proxyEnv()
	for _, kv := range programEnv("amd64", "tcg") {
		k := strings.SplitN(kv, "=", 2)[0]
		for _, p := range env {
			if strings.HasPrefix(p, k+"=") {
				t.Errorf("%s in both", k)
			}
		}
	}
	if want := "HTTPS_PROXY=http://127.0.0.1:3128"; !slices.Contains(env, want) {
		t.Errorf("proxyEnv %v lacks %s", env, want)
	}
}
