package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pybox/host/client"
	"pybox/host/paths"
	"pybox/host/supervisor"
	"pybox/shared/frame"
	"pybox/shared/needs"
	"pybox/shared/wire"
)

// fakeGuest answers like the guest agent: pong, ok, and a receipt per run;
// a run whose code is "wait" ends only when cancelled, one whose code is
// "deaf" never ends: a guest stuck on it, and one whose code is "lie"
// claims its data folders are elsewhere and larger than they are. Code
// "hostile" gets a receipt over its bounds, "refuse" a long error.
func fakeGuest(t *testing.T, conn net.Conn) {
	var wmu sync.Mutex
	write := func(m *wire.Message) {
		p, _ := wire.Encode(m)
		wmu.Lock()
		frame.Write(conn, p)
		wmu.Unlock()
	}
	waiting := map[string]uint64{}
	var mu sync.Mutex
	for {
		p, err := frame.Read(conn)
		if err != nil {
			return
		}
		m, err := wire.Decode(p)
		if err != nil {
			t.Errorf("fake guest: %v", err)
			return
		}
		switch m.Type {
		case wire.TypePing:
			write(&wire.Message{Type: wire.TypePong, ID: m.ID})
		case wire.TypeShutdown:
			write(&wire.Message{Type: wire.TypeOK, ID: m.ID})
		case wire.TypeRun:
			if m.Run.Code == "deaf" {
				continue
			}
			if m.Run.Code == "wait" {
				mu.Lock()
				waiting[m.Run.RunID] = m.ID
				mu.Unlock()
				continue
			}
			rc := receipt(m.ID, m.Run.RunID, wire.StatusOK)
			switch m.Run.Code {
			case "lie":
				rc.Result.Receipt.Data = []wire.DataFolder{{Name: "sales", HostPath: "/", Bytes: 1 << 40}}
			case "other":
				rc.Result.Receipt.RunID = "someone-else"
			case "hostile":
				// Over the bounds, within a frame.
				rc.Result.Receipt.Reason = strings.Repeat("r", 10<<10)
				for i := range 1100 {
					rc.Result.Receipt.Output.Delivered = append(rc.Result.Receipt.Output.Delivered, wire.FileDigest{Name: fmt.Sprint(i)})
				}
			case "refuse":
				write(&wire.Message{Type: wire.TypeError, ID: m.ID, Error: &wire.Error{Code: wire.ErrBadRequest,
					Message: strings.Repeat("m", 10<<10), Cleanup: &wire.Cleanup{Status: wire.CleanupNotAttempted, Detail: strings.Repeat("d", 10<<10)}}})
				continue
			case "garbled":
				// A receipt whose body no decoder takes.
				wmu.Lock()
				frame.Write(conn, wire.EncodeRaw(wire.TypeReceipt, m.ID, []byte(`{"receipt":{"status":1}}`)))
				wmu.Unlock()
				continue
			}
			write(rc)
		case wire.TypeCancel:
			write(&wire.Message{Type: wire.TypeOK, ID: m.ID})
			mu.Lock()
			id, ok := waiting[m.Cancel.RunID]
			delete(waiting, m.Cancel.RunID)
			mu.Unlock()
			if ok {
				write(receipt(id, m.Cancel.RunID, wire.StatusCancelled))
			}
		}
	}
}

func receipt(id uint64, runID, status string) *wire.Message {
	return &wire.Message{Type: wire.TypeReceipt, ID: id, Result: &wire.Result{Receipt: wire.Receipt{
		RunID: runID, Status: status, Cleanup: wire.Cleanup{Status: wire.CleanupRemoved}}}}
}

// serve runs a relay with a fake guest on a socket under a fresh home.
func serve(t *testing.T) string {
	return serveHello(t, wire.Hello{Protocol: wire.ProtocolVersion, AgentVersion: "fake"})
}

// serveHello is serve with the guest's hello given.
func serveHello(t *testing.T, hello wire.Hello) string { return serveWith(t, hello, nil) }

// serveWith is serveHello with what readies a run's data folders (see
// supervisor.Relay.SetPrepare), when not nil.
func serveWith(t *testing.T, hello wire.Hello, prepare func(*wire.RunHeader) ([]wire.DataFolder, *wire.Error)) string {
	return serveGuest(t, hello, prepare, fakeGuest)
}

// serveGuest is serveWith with the guest given.
func serveGuest(t *testing.T, hello wire.Hello, prepare func(*wire.RunHeader) ([]wire.DataFolder, *wire.Error),
	guestOf func(*testing.T, net.Conn)) string {
	home, err := os.MkdirTemp("", "pyboxc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	d := paths.ForVM(home)
	if err := d.Ensure(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d.Socket(), 0o600) // as the supervisor does
	host, guest := net.Pipe()
	go guestOf(t, guest)
	r := supervisor.NewRelay(host, hello, t.Logf)
	if prepare != nil {
		r.SetPrepare(prepare)
	}
	go r.ReadGuest()
	go r.Serve(l)
	t.Cleanup(func() { l.Close(); r.Close(); guest.Close() })
	return home
}

func testWire(id, code string) *wire.Run {
	return &wire.Run{RunID: id, Code: code, Image: "stdlib", TimeoutSeconds: 2, MaxOutputBytes: 4096}
}

func testRun(id, code string) *client.Checked { return checked(testWire(id, code)) }

// checked is r checked; the tests' runs keep the rules.
func checked(r *wire.Run) *client.Checked {
	c, err := client.CheckRun(r)
	if err != nil {
		panic(err)
	}
	return c
}

func TestNoVM(t *testing.T) {
	home := t.TempDir()
	if _, err := client.Dial(home); !errors.Is(err, client.ErrNoVM) {
		t.Fatalf("Dial with no VM dir = %v", err)
	}
	if err := paths.ForVM(home).Ensure(); err != nil {
		t.Fatal(err)
	}
	_, err := client.Dial(home)
	if !errors.Is(err, client.ErrNoVM) || err.(*wire.Error).Message != "the VM is not running: start it with `pybox vm start`" {
		t.Fatalf("Dial with no socket = %v", err)
	}
	// A stale socket nobody listens on is no VM either.
	l, _ := net.Listen("unix", paths.ForVM(home).Socket())
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	os.Chmod(paths.ForVM(home).Socket(), 0o600)
	if _, err := client.Dial(home); !errors.Is(err, client.ErrNoVM) {
		t.Fatalf("Dial with a stale socket = %v", err)
	}
}

// An agent that can run boxes unsealed (the benchmark build) is named as
// such, with the way back; the product's agent passes.
func TestSealed(t *testing.T) {
	for _, c := range []struct {
		caps   []string
		refuse bool
	}{{[]string{"run", "cancel"}, false}, {[]string{"run", "cancel", wire.CapUnsealable}, true}} {
		home := serveHello(t, wire.Hello{Protocol: wire.ProtocolVersion, AgentVersion: "v1-bench", Capabilities: c.caps})
		cl, err := client.Dial(home)
		if err != nil {
			t.Fatal(err)
		}
		err = cl.Sealed()
		cl.Close()
		var we *wire.Error
		switch {
		case !c.refuse && err != nil:
			t.Errorf("capabilities %v: %v", c.caps, err)
		case c.refuse && (!errors.As(err, &we) || we.Code != wire.ErrUnhealthy || we.Cleanup == nil || we.Cleanup.Status != wire.CleanupNotAttempted ||
			!strings.Contains(we.Message, "benchmark build of the guest agent (v1-bench)") || !strings.Contains(we.Message, "pybox vm start")):
			t.Errorf("capabilities %v: %v", c.caps, err)
		}
	}
}

func TestHelloPingRun(t *testing.T) {
	home := serve(t)
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Hello().AgentVersion != "fake" {
		t.Errorf("hello %+v", c.Hello())
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background(), testRun("r1", "print(1)"))
	if err != nil || res.Receipt.Status != wire.StatusOK || res.Receipt.RunID != "r1" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
}

// What a run's receipt says of its data folders is what the host
// recorded when it readied them, not what the guest answered.
func TestRunDataFromHost(t *testing.T) {
	host := []wire.DataFolder{{Name: "sales", HostPath: "/home/u/sales", Files: 2, Bytes: 11, Digest: "d1"}}
	home := serveWith(t, wire.Hello{Protocol: wire.ProtocolVersion, AgentVersion: "fake"},
		func(*wire.RunHeader) ([]wire.DataFolder, *wire.Error) { return host, nil })
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run := testWire("r1", "lie")
	run.Data = []wire.DataFolder{{Name: "sales"}}
	res, err := c.Run(context.Background(), checked(run))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Receipt.Data; len(got) != 1 || got[0].HostPath != "/home/u/sales" || got[0].Bytes != 11 || got[0].Files != 2 {
		t.Fatalf("receipt data %+v, want the host's %+v", got, host)
	}
}

// The host distrusts the guest in one place, the client: a receipt for
// another run, or one that cannot be read, fails that run with cleanup
// UNKNOWN and nothing else; a receipt's data folders are the host's
// record, and a run that named none has none whatever the guest claims.
func TestClientDistrustsTheGuest(t *testing.T) {
	home := serve(t)
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, code := range []string{"other", "garbled"} {
		_, err := c.Run(context.Background(), testRun("r-"+code, code))
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.ErrProtocol || we.Cleanup.Status != wire.CleanupUnknown {
			t.Errorf("%s: %v, want a protocol error with cleanup UNKNOWN", code, err)
		}
	}
	res, err := c.Run(context.Background(), testRun("r-lie", "lie"))
	if err != nil || res.Receipt.Status != wire.StatusOK || res.Receipt.Data != nil {
		t.Fatalf("a run that named no folder: %v, data %+v", err, res.Receipt.Data)
	}
	// Every receipt that reaches a caller is bounded (see NewResult), and
	// so is an error a run is answered with.
	res, err = c.Run(context.Background(), testRun("r-hostile", "hostile"))
	if err != nil || !res.Cut() || len(res.Receipt.Output.Delivered) != wire.MaxDeliveredFiles || !strings.HasSuffix(res.Receipt.Reason, "…") {
		t.Errorf("a receipt over its bounds: %v, cut %v, %d delivered listed, reason of %d bytes", err, res.Cut(), len(res.Receipt.Output.Delivered), len(res.Receipt.Reason))
	}
	_, err = c.Run(context.Background(), testRun("r-refuse", "refuse"))
	if we, ok := err.(*wire.Error); !ok || len(we.Message) > 2048+len("…") || we.Cleanup == nil || len(we.Cleanup.Detail) > 2048+len("…") {
		t.Errorf("a long error: %.100v", err)
	}
}

// A run that breaks a rule cannot be made into one the client sends.
func TestCheckRunRefuses(t *testing.T) {
	for _, bad := range []*wire.Run{testWire("bad id!", "x"), testWire("r1", "a\x00b")} {
		if c, err := client.CheckRun(bad); err == nil || c != nil {
			t.Errorf("CheckRun(%+v) = %v, %v", bad, c, err)
		}
	}
	r := testWire("r1", "print(1)")
	c, err := client.CheckRun(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Code = "changed after the check"
	if c.Run().Code != "print(1)" {
		t.Errorf("the checked run changed with the caller's: %q", c.Run().Code)
	}
}

// A run whose receipt does not come by its deadline is cancelled and
// given up with cleanup UNKNOWN; other runs go on.
func TestRunDeadline(t *testing.T) {
	defer client.SetDeadlineFor(func(*wire.Run) time.Duration { return 300 * time.Millisecond })()
	home := serve(t)
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	_, err = c.Run(context.Background(), testRun("stuck", "deaf"))
	took := time.Since(t0)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.ErrNoReceipt || we.Cleanup == nil || we.Cleanup.Status != wire.CleanupUnknown {
		t.Fatalf("Run = %v; want %s with cleanup UNKNOWN", err, wire.ErrNoReceipt)
	}
	if !strings.Contains(we.Message, "pybox vm status") {
		t.Errorf("message %q does not say what to do", we.Message)
	}
	if took > 300*time.Millisecond+wire.WatchdogGrace+time.Second {
		t.Errorf("Run gave up after %v", took)
	}
	if res, err := c.Run(context.Background(), testRun("next", "print(1)")); err != nil || res.Receipt.Status != wire.StatusOK {
		t.Fatalf("the next run: %+v, %v", res, err)
	}
}

func TestCancelStillReturnsReceipt(t *testing.T) {
	home := serve(t)
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := c.Run(ctx, testRun("r2", "wait"))
	if err != nil || res.Receipt.Status != wire.StatusCancelled {
		t.Fatalf("Run = %+v, %v; want the cancelled receipt", res, err)
	}
}

func TestManyClientsAtOnce(t *testing.T) {
	home := serve(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := client.Dial(home)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for j := 0; j < 20; j++ {
				id := filepath.Base(t.Name()) + string(rune('a'+i)) + string(rune('a'+j))
				res, err := c.Run(context.Background(), testRun(id, "print(1)"))
				if err != nil || res.Receipt.RunID != id {
					t.Errorf("client %d run %d: %+v %v", i, j, res, err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
}

func TestShutdown(t *testing.T) {
	home := serve(t)
	c, err := client.Dial(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = c.Run(context.Background(), testRun("late", "print(1)"))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.ErrNoVM {
		t.Fatalf("Run after shutdown = %v", err)
	}
}

func TestSupervisorLostMidRun(t *testing.T) {
	home := t.TempDir()
	d := paths.ForVM(home)
	if err := d.Ensure(); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(os.TempDir(), filepath.Base(home)+".sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A supervisor that answers hello, then dies when the run arrives.
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		p, _ := frame.Read(nc)
		m, _ := wire.Decode(p)
		out, _ := wire.Encode(&wire.Message{Type: wire.TypeHello, ID: m.ID, Hello: &wire.Hello{Protocol: wire.ProtocolVersion}})
		frame.Write(nc, out)
		frame.Read(nc)
		nc.Close()
	}()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Run(context.Background(), testRun("r1", "print(1)"))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.ErrNoVM || we.Cleanup.Status != wire.CleanupUnknown {
		t.Fatalf("Run = %v, want no_vm with cleanup UNKNOWN", err)
	}
}

// The client trusts the supervisor's socket only when the path to it is
// the user's own and private, and when the process serving it runs as
// the user.
func TestSocketOfAnotherUser(t *testing.T) {
	needs.Root(t, "making files and processes of another uid")
	const other = 65534
	home := serve(t)
	sock := paths.ForVM(home).Socket()
	for name, c := range map[string]struct {
		change, undo func()
		want         string
	}{
		"socket owned by another uid": {func() { os.Lchown(sock, other, other) }, func() { os.Lchown(sock, 0, 0) }, "belongs to uid 65534"},
		"socket open to others":       {func() { os.Chmod(sock, 0o666) }, func() { os.Chmod(sock, 0o600) }, "must be private"},
		"home writable by others":     {func() { os.Chmod(home, 0o777) }, func() { os.Chmod(home, 0o700) }, "chmod go-w"},
		"home owned by another uid":   {func() { os.Lchown(home, other, other) }, func() { os.Lchown(home, 0, 0) }, "belongs to uid 65534"},
	} {
		c.change()
		_, err := client.Dial(home)
		c.undo()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Dial = %v, want a refusal saying %q", name, err, c.want)
		}
	}
	if c, err := client.Dial(home); err != nil {
		t.Fatalf("after undoing every change: %v", err)
	} else {
		c.Close()
	}

	// A socket in the user's private directory, owned by the user, but
	// served by a process of another uid (a directory swapped between
	// the check and the dial): the peer's uid gives it away.
	dir, err := os.MkdirTemp("", "pybox-peer") // in /tmp, which the other uid can reach
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	peer := exec.Command("/usr/bin/python3", "-c", `
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen()
print("ready", flush=True)
c, _ = s.accept(); time.sleep(5)
`, filepath.Join(dir, "x"))
	peer.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: other, Gid: other}}
	out, _ := peer.StdoutPipe()
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	defer peer.Process.Kill()
	bufio.NewReader(out).ReadString('\n')
	os.Remove(sock)
	if err := os.Rename(peer.Args[len(peer.Args)-1], sock); err != nil {
		t.Fatal(err)
	}
	os.Lchown(sock, 0, 0)
	os.Chmod(sock, 0o600)
	if _, err := client.Dial(home); err == nil || !strings.Contains(err.Error(), "served by uid 65534") {
		t.Fatalf("Dial to a socket served by another uid = %v", err)
	}
}
