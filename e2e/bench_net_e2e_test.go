package e2e

// The net part of `make bench`: a box's network, opened with
// --allow-net, as a program in it meets it. A 100 MB download from a
// server this test starts on the host's 127.0.0.1, through the box's
// proxy (urllib, which takes the proxy from HTTP(S)_PROXY), beside the
// same download by curl on the host, over plain HTTP and HTTPS, taking
// turns; the same read loop fed by a writer inside the box, over the
// box's own loopback, which is as fast as the guest's Python and kernel
// go under emulation, whatever the proxy does; and what the option costs
// a call that opens no connection: print(1) with --allow-net 127.0.0.1:1
// beside print(1) without, on the same VM, taking turns at going first.

import (
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pybox/shared/wire"
)

// netBenchBytes is the download's size: 100 MB (10^6 bytes to the MB, in
// the download and in every MB/s of the part).
const netBenchBytes = 100_000_000

// netGoalMBps is the throughput a box should reach under TCG: a 100 MB
// file within one 30 s call.
const netGoalMBps = 10

// netReadFor is how long, from its first line, the box's program reads
// before it stops: under the call's timeout (wire.MaxTimeoutSeconds, 30)
// with room for Python's start and exit, so that a download too slow to
// finish is measured on what arrived instead of ending in a timeout.
const netReadFor = 25

// netReadLoop is the box's read loop, the same for the proxy and the
// box's own loopback: %[1]s is the Python expression that opens the
// connection, %[2]s the method that reads from it into a buffer. It reads
// one byte first, the time to first byte, then 1 MiB at a time into one
// buffer, and prints the bytes, the seconds and whether it stopped at
// netReadFor.
const netReadLoop = `
buf = memoryview(bytearray(1 << 20))
t0 = time.perf_counter()
r = %[1]s
n = r.%[2]s(buf[:1])
first = time.perf_counter()
partial = False
while True:
    k = r.%[2]s(buf)
    if not k:
        break
    n += k
    if time.perf_counter() - start > %[3]d:
        partial = True
        break
t1 = time.perf_counter()
r.close()
print("RESULT ttfb_ms %%.1f" %% ((first - t0) * 1000))
print("RESULT s %%.3f" %% (t1 - t0))
print("RESULT bytes", n)
print("RESULT partial", partial)
`

// netProxyCode downloads url through the box's proxy with urllib,
// checking a server's certificate against /tmp/input/ca.pem. The opener
// is built before the clock starts, over HTTP too: urlopen's own would
// load the system's CA certificates first, some 200 ms under emulation
// that are Python's and not the network's.
func netProxyCode(url string) string {
	return `import time
start = time.perf_counter()
import ssl, urllib.request
url = ` + strconv.Quote(url) + `
ctx = ssl.create_default_context(cafile="/tmp/input/ca.pem")
opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx))
` + fmt.Sprintf(netReadLoop, "opener.open(url, timeout=20)", "readinto", netReadFor)
}

// netLoopbackCode is the same read loop on a connection from a thread of
// the program that writes netBenchBytes over the box's loopback (the
// box's lo, which every box has, with or without --allow-net).
func netLoopbackCode() string {
	return fmt.Sprintf(`import time
start = time.perf_counter()
import socket, threading
srv = socket.create_server(("127.0.0.1", 0))
def serve():
    c, _ = srv.accept()
    chunk, left = memoryview(bytes(1 << 20)), %d
    while left > 0:
        c.sendall(chunk[:min(left, len(chunk))])
        left -= len(chunk)
    c.close()
threading.Thread(target=serve, daemon=True).start()
`, netBenchBytes) + fmt.Sprintf(netReadLoop, "socket.create_connection(srv.getsockname())", "recv_into", netReadFor)
}

// netSample is one download as its client timed it.
type netSample struct {
	ttfbMS, s float64
	bytes     int64
	partial   bool
	warm      bool // the run's box was a warm one
}

func (s netSample) mbps() float64 { return float64(s.bytes) / 1e6 / s.s }

// netServer serves netBenchBytes of random bytes (so that nothing on the
// way can compress them) at every path.
func netServer(b *testing.B) http.Handler {
	chunk := make([]byte, 1_000_000)
	if _, err := rand.Read(chunk); err != nil {
		b.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(netBenchBytes))
		for range netBenchBytes / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return // the client stopped reading
			}
		}
	})
}

// netOverHTTP is one way the download goes: the protocol and its server.
type netOverHTTP struct {
	name string // "HTTP" or "HTTPS"
	srv  *httptest.Server
}

func benchNet(b *testing.B, r *benchReport, k benchKnobs) {
	h := netServer(b)
	plain, tls := httptest.NewServer(h), httptest.NewTLSServer(h)
	defer plain.Close()
	defer tls.Close()
	// The TLS server's certificate (its own CA, for 127.0.0.1) goes to the
	// box as /tmp/input/ca.pem and to curl as --cacert.
	ca := filepath.Join(b.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tls.Certificate().Raw}), 0o600); err != nil {
		b.Fatal(err)
	}
	_, err := exec.LookPath("curl")
	haveCurl := err == nil
	if !haveCurl {
		r.Skipped["net: curl on the host"] = "curl not installed, so the download has no host reference: apt-get install curl"
	}

	e := benchEnv(b)
	if out, errOut, code := e.pybox("vm", "start", "--images", "stdlib"); code != 0 {
		b.Fatalf("vm start: %s%s", out, errOut)
	}
	defer e.pybox("vm", "stop")
	if r.Machine["accel"] == "" {
		r.Machine["accel"] = e.state().Accel
	}

	load := loadAverage()
	overs := []netOverHTTP{{"HTTP", plain}, {"HTTPS", tls}}
	box, host := map[string][]netSample{}, map[string][]netSample{}
	var loop []netSample
	wall := map[string][]float64{}
	for i := range k.Runs {
		for _, o := range overs {
			b.Logf("net: download %d over %s", i, o.name)
			s, d := netBoxDownload(b, r, e, o, ca)
			box[o.name], wall[o.name] = append(box[o.name], s), append(wall[o.name], d)
			if haveCurl {
				host[o.name] = append(host[o.name], netCurl(b, o, ca))
			}
		}
		loop = append(loop, netBoxLoopback(b, e))
	}
	for _, o := range overs {
		netFigures(r, o.name, box[o.name], host[o.name])
		warm := len(slices.DeleteFunc(slices.Clone(box[o.name]), func(s netSample) bool { return !s.warm }))
		r.add(newFigure("net", o.name+": `pybox run` of the download, end to end", "s", wall[o.name],
			fmt.Sprintf("the call a user waits for: the box, Python and its imports, the download, the receipt (goal: within one %d s call); %d of %d ran in a warm box",
				wire.MaxTimeoutSeconds, warm, len(wall[o.name]))))
	}
	netAdd(r, "the same read loop from a writer in the box, over the box's loopback (no proxy, no channel)", loop,
		"as fast as the guest's Python and kernel read a socket under emulation: what any proxy in the box could give at most")
	benchNetOption(b, r, k, e)
	r.Notes = append(r.Notes, fmt.Sprintf("net: load average %s at the part's start, %s at its end (%d CPUs; the download keeps QEMU's vCPUs and the host's relay busy at once).",
		load, loadAverage(), runtime.NumCPU()))
}

// loadAverage is the host's load average over 1, 5 and 15 minutes.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// netBoxDownload runs the download through the box's proxy and returns
// what the program timed and the `pybox run` wall time in seconds.
func netBoxDownload(b *testing.B, r *benchReport, e *vmEnv, o netOverHTTP, ca string) (netSample, float64) {
	addr := o.srv.Listener.Addr().String()
	netWaitWarm(b, e.home)
	run := runPy(b, e, netProxyCode(o.srv.URL+"/100MB"), "--timeout", strconv.Itoa(wire.MaxTimeoutSeconds),
		"--file", ca, "--allow-net", addr)
	rc := run.receipt(b)
	s := netResult(b, "the download over "+o.name+" in the box", rc)
	nw := rc.Network
	if nw == nil || len(nw.Connections) != 1 || !nw.Connections[0].Allowed || nw.Faults != 0 {
		b.Fatalf("the download over %s: network %+v", o.name, nw)
	}
	if got := nw.Connections[0].Received; got < s.bytes {
		r.Notes = append(r.Notes, fmt.Sprintf("net: the gate counted %d bytes received over %s, the program %d", got, o.name, s.bytes))
	}
	return s, run.elapsed.Seconds()
}

// netBoxLoopback runs the read loop over the box's own loopback.
func netBoxLoopback(b *testing.B, e *vmEnv) netSample {
	netWaitWarm(b, e.home)
	rc := runPy(b, e, netLoopbackCode(), "--timeout", strconv.Itoa(wire.MaxTimeoutSeconds)).receipt(b)
	return netResult(b, "the read loop over the box's loopback", rc)
}

// netResult reads the RESULT lines of a read loop's run.
func netResult(b *testing.B, what string, rc *wire.Receipt) netSample {
	res := results(rc.Capture.Stdout)
	var s netSample
	var errs [3]error
	s.ttfbMS, errs[0] = strconv.ParseFloat(res["ttfb_ms"], 64)
	s.s, errs[1] = strconv.ParseFloat(res["s"], 64)
	s.bytes, errs[2] = strconv.ParseInt(res["bytes"], 10, 64)
	s.partial = res["partial"] == "True"
	s.warm = rc.Box != nil && rc.Box.Warm
	if rc.Status != wire.StatusOK || errs[0] != nil || errs[1] != nil || errs[2] != nil || s.s <= 0 {
		b.Fatalf("%s: %s (%s)\nstdout %q\nstderr %q", what, rc.Status, rc.Reason, rc.Capture.Stdout, rc.Capture.Stderr)
	}
	return s
}

// netCurl is the same download by curl on the host, proxy or none in the
// environment notwithstanding.
func netCurl(b *testing.B, o netOverHTTP, ca string) netSample {
	out, err := exec.Command("curl", "-sS", "--noproxy", "*", "--cacert", ca, "-o", "/dev/null",
		"-w", "%{time_starttransfer} %{time_total} %{size_download}", o.srv.URL+"/100MB").CombinedOutput()
	var ttfb, total float64
	var n int64
	if _, serr := fmt.Sscan(string(out), &ttfb, &total, &n); err != nil || serr != nil || total <= 0 {
		b.Fatalf("curl over %s: %v: %s", o.name, err, out)
	}
	return netSample{ttfbMS: ttfb * 1000, s: total, bytes: n}
}

// netFigures adds one protocol's figures: the box's and curl's time to
// first byte and throughput, the ratios between them, and the goal.
func netFigures(r *benchReport, over string, box, host []netSample) {
	proxied := "through the box's proxy (urllib in the box)"
	steps := "the connection to the proxy, the gate's check and dial, "
	if over == "HTTPS" {
		steps += "the CONNECT, the TLS handshake, "
	}
	bt := r.add(newFigure("net", over+": time to first byte, "+proxied, "ms", mapSlice(box, func(s netSample) float64 { return s.ttfbMS }),
		"open → the first body byte: "+steps+"the response's head"))
	bm := netAdd(r, over+": throughput of 100 MB, "+proxied, box, "open → the last byte, 1 MiB reads")
	if len(host) > 0 {
		ht := r.add(newFigure("net", over+": time to first byte, curl on the host", "ms", mapSlice(host, func(s netSample) float64 { return s.ttfbMS }),
			"curl's time_starttransfer, to the same server, no proxy"))
		hm := netAdd(r, over+": throughput of 100 MB, curl on the host", host, "curl -o /dev/null: size_download ÷ time_total")
		// Both ratios are how many times worse the box does.
		netRatio(r, over+": time to first byte, box ÷ curl", bt, ht)
		netRatio(r, over+": throughput, curl ÷ box", hm, bm)
	}
	met := "meets it"
	if bm.Median < netGoalMBps {
		met = "does not meet it"
	}
	r.Notes = append(r.Notes, fmt.Sprintf("net, %s: %s MB/s through the box's proxy (median of %d) against the goal of %d MB/s under TCG (100 MB within a %d s call): it %s.",
		over, num(bm.Median), bm.N, netGoalMBps, wire.MaxTimeoutSeconds, met))
}

// netAdd adds the throughput of samples, noting any that stopped at
// netReadFor with part of the 100 MB.
func netAdd(r *benchReport, name string, samples []netSample, note string) *figure {
	partial := 0
	for _, s := range samples {
		if s.partial {
			partial++
		}
	}
	if partial > 0 {
		note += fmt.Sprintf("; %d of %d stopped after %d s, measured on what had arrived", partial, len(samples), netReadFor)
	}
	return r.add(newFigure("net", name, "MB/s", mapSlice(samples, netSample.mbps), note))
}

// netRatio adds the ratio of two figures' medians.
func netRatio(r *benchReport, name string, top, bottom *figure) {
	if top.N == 0 || bottom.Median <= 0 {
		return
	}
	f := r.add(newFigure("net", name, "×", []float64{top.Median / bottom.Median}, fmt.Sprintf("medians %s vs %s %s", num(top.Median), num(bottom.Median), top.Unit)))
	f.Ratio = math.Round(top.Median/bottom.Median*100) / 100
}

// benchNetOption times print(1) with --allow-net naming a port nothing
// listens on and print(1) without, each call with the VM's warm boxes
// ready, so that neither finds the other's replacement still warming.
func benchNetOption(b *testing.B, r *benchReport, k benchKnobs, e *vmEnv) {
	kinds := []struct {
		name  string
		flags []string
	}{
		{"without --allow-net", nil},
		{"with --allow-net 127.0.0.1:1", []string{"--allow-net", "127.0.0.1:1"}},
	}
	walls := make([][]float64, len(kinds))
	warm := make([]int, len(kinds))
	for i := range k.Runs {
		for n := range kinds {
			j := (i + n) % len(kinds) // each first in turn
			netWaitWarm(b, e.home)
			run := runPy(b, e, benchTrivial, append([]string{"--timeout", "30"}, kinds[j].flags...)...)
			rc := run.receipt(b)
			if rc.Status != wire.StatusOK || (rc.Network != nil) != (kinds[j].flags != nil) {
				b.Fatalf("print(1) %s: %s (%s), network %+v", kinds[j].name, rc.Status, rc.Reason, rc.Network)
			}
			if rc.Box != nil && rc.Box.Warm {
				warm[j]++
			}
			walls[j] = append(walls[j], float64(run.elapsed.Microseconds())/1000)
		}
	}
	var figs []*figure
	for j, kd := range kinds {
		figs = append(figs, r.add(newFigure("net", "print(1) "+kd.name+": `pybox run` wall", "ms", walls[j],
			fmt.Sprintf("end to end, the warm boxes ready before each call; %d of %d ran in a warm box", warm[j], len(walls[j])))))
	}
	netRatio(r, "print(1), with --allow-net ÷ without", figs[1], figs[0])
	r.add(newFigure("net", "print(1), with --allow-net − without, call by call", "ms", pairDiff(walls[1], walls[0]),
		"what the option costs a call that opens no connection: the gate, and a box with its proxy (warm or cold, as the two figures above say)"))
}

// netWaitWarm waits until each of the VM's warm boxes is ready: stdlib's,
// and, once a run has opened the network, its box with the proxy. A box
// still warming would take the guest's CPU from the call being timed.
func netWaitWarm(b *testing.B, home string) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		status := agentConsole(b, home, "warm")
		if strings.Contains(status, "stdlib: ready") && !strings.Contains(status, "warming") {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the warm boxes were not ready within 2 minutes: %q", status)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
