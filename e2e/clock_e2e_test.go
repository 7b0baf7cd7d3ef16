package e2e

// The guest's clock against the host's: a box's time.time() lies between
// the host's clock read before its call and after, right after the VM
// starts (the guest's clock came from the emulated RTC, to the second)
// and after the supervisor and QEMU were stopped and continued, as a
// laptop's sleep stops them.

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"pybox/shared/wire"
)

func TestClock(t *testing.T) {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	e.mustStart("--images", "stdlib")
	call := func(t *testing.T) {
		t.Helper()
		before := time.Now()
		r := runPy(t, e, `import time; print("RESULT now", repr(time.time()))`, "--timeout", "10")
		after := time.Now()
		rc := r.receipt(t)
		if rc.Status != wire.StatusOK {
			t.Fatalf("status %s: %s", rc.Status, r.dump())
		}
		m := resultLine.FindStringSubmatch(rc.Capture.Stdout)
		if m == nil {
			t.Fatalf("printed %q", rc.Capture.Stdout)
		}
		s, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		box := time.Unix(0, int64(s*1e9))
		if box.Before(before.Add(-time.Millisecond)) || box.After(after) { // the float's rounding, no more
			t.Errorf("the box's time.time() %v is not between the host's %v and %v (%v after the first)",
				box.Format(time.StampMicro), before.Format(time.StampMicro), after.Format(time.StampMicro), box.Sub(before))
		}
		if c := rc.Agent.Clock; c == nil {
			t.Errorf("the receipt says nothing of the guest's clock")
		} else {
			t.Logf("the guest's clock was %.1f ms off the host's (stepped %v); the box read %v after the call began", c.OffsetMS, c.Stepped, box.Sub(before).Round(time.Microsecond))
		}
	}
	t.Run("right after vm start", call)
	t.Run("after the supervisor and QEMU stopped for 15 s", func(t *testing.T) {
		st := e.state()
		for _, pid := range []int{st.SupervisorPid, st.QEMUPid} {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(15 * time.Second)
		for _, pid := range []int{st.QEMUPid, st.SupervisorPid} {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
		call(t)
	})
}
