package e2e

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"pybox/host/supervisor"
	"pybox/host/vm"
	"pybox/shared/wire"
)

// What a run allocated goes back to the host once the guest has been idle
// for a while: the VM process's resident set rises while a program holds
// 400 MiB and falls back near where it was within 90 s after (15 s idle,
// then the kernel reports what is free), and `pybox vm status` shows the
// host's and the guest's side of the VM's memory.
func TestFreedMemoryGoesBackToTheHost(t *testing.T) {
	e := boxVM(t)
	pid := e.state().QEMUPid
	rss := func() int64 {
		t.Helper()
		n, err := vm.HostMemory(pid)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Let what the last test freed go first: the guest gives it back
	// after 15 s without a run.
	time.Sleep(25 * time.Second)
	base := rss()

	cmd := runCmdFor(t, e, "import time\nb = b'x' * (400 << 20)\nprint('holding')\ntime.sleep(8)\nprint(len(b))", "--timeout", "30")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	peak := base
	var err error
sample:
	for {
		select {
		case err = <-waited:
			break sample
		case <-time.After(200 * time.Millisecond):
			peak = max(peak, rss())
		}
	}
	r := finishRun(t, cmd, err, time.Since(t0), out.String(), errb.String())
	if r.Receipt == nil || r.Receipt.Status != wire.StatusOK || !strings.Contains(r.Receipt.Capture.Stdout, "419430400") {
		t.Fatalf("the run: %s\n%s", r.raw, r.stderr)
	}
	t.Logf("QEMU's resident set: %d MiB before, %d MiB while the program held 400 MiB", base>>20, peak>>20)
	if peak-base < 300<<20 {
		t.Fatalf("the 400 MiB never reached the host (%d MiB more at most): the measure cannot tell", (peak-base)>>20)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		now := rss()
		if now-base <= 100<<20 {
			t.Logf("%d MiB %v after the run", now>>20, time.Since(t0))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90 s after the run QEMU still holds %d MiB, %d MiB more than before it", now>>20, (now-base)>>20)
		}
		time.Sleep(time.Second)
	}

	js, _, code := e.pybox("vm", "status", "--json")
	var s supervisor.Status
	if err := json.Unmarshal([]byte(js), &s); err != nil || code != 0 || s.Guest == nil || s.Guest.Memory == nil {
		t.Fatalf("vm status --json: exit %d, %v\n%s", code, err, js)
	}
	m := s.Guest.Memory
	if s.HostMemoryBytes <= 0 || m.Total < int64(vm.DefaultMemoryMiB-100)<<20 || m.Used+m.Cache+m.Free != m.Total || m.Warm <= 0 || m.Warm > m.Used+m.Cache {
		t.Errorf("memory in vm status: host %d, guest %+v", s.HostMemoryBytes, m)
	}
	text, _, _ := e.pybox("vm", "status")
	for _, row := range []string{"host memory", "guest memory", "warm boxes", "budget"} {
		if !strings.Contains(text, row) {
			t.Errorf("vm status does not say %q:\n%s", row, text)
		}
	}
}
