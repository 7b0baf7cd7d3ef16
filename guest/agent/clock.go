package agent

import (
	"time"

	"pybox/shared/wire"
)

// The guest's wall clock starts from the emulated RTC, to the second, and
// falls behind while the host sleeps; nothing in the guest resyncs it.
// Each run request carries the host's wall clock as it was sent
// (wire.Run.HostTimeNS), and the agent steps the guest's clock to it
// before the run starts whenever the guest's is behind it (what a boot or
// a sleep leaves) or ahead of it by more than a request's transit can
// explain (the host's clock was set back). The step is to the host's time
// at sending, so the guest's clock is then behind the host's by the
// request's transit, never ahead: a box's time.time() lies between the
// host's clock read before its call and after.

// maxAhead is how far ahead of a request's host time the guest's clock
// may read when the request comes before it is stepped back: a request's
// transit on the channel, a few milliseconds under TCG, with room for a
// busy channel. (After QEMU was stopped and continued, the guest's clock
// was seen 3 s ahead.) A step back by less than the transit only makes
// the guest's clock behind the host's by what is left of it.
const maxAhead = 50 * time.Millisecond

// syncClock compares the guest's clock (now) with host, the host's time
// in a run request, and steps it to host (set) when it is behind or more
// than maxAhead ahead. The check is nil when host is zero.
func syncClock(hostNS int64, now func() time.Time, set func(time.Time) error) (*wire.ClockCheck, error) {
	if hostNS == 0 {
		return nil, nil
	}
	host := time.Unix(0, hostNS)
	offset := now().Sub(host)
	c := &wire.ClockCheck{OffsetMS: float64(offset.Microseconds()) / 1000}
	if offset >= 0 && offset <= maxAhead {
		return c, nil
	}
	if err := set(host); err != nil {
		return c, err
	}
	c.Stepped = true
	return c, nil
}
