package boot

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// reportOrderParam is the kernel's page reporting order, writable at run
// time. The kernel takes it from the command line only until the balloon
// driver registers (which sets its own), so PID 1 sets it afterwards.
const reportOrderParam = "/sys/module/page_reporting/parameters/page_reporting_order"

// noReporting is a reporting order no free block reaches (the kernel's
// own default before a balloon registers, MAX_ORDER in 6.1).
const noReporting = 11

// StopReporting makes the kernel report no free memory to the host until
// ReportFreeMemory: while runs come, what one frees the next takes again.
func StopReporting() error {
	if err := setReportOrder(noReporting); err != nil {
		return fmt.Errorf("boot: stopping: %w", err)
	}
	return nil
}

// ReportFreeMemory makes the kernel report free blocks of 2^order pages
// and up to the host (through the balloon's free page reporting), which
// then drops them.
//
// The kernel looks at its free lists only once a free, merged with its
// free neighbours, reaches the reporting order; what was freed while
// reporting was off (a run's whole heap) is not looked at until then.
// Dropping the page cache usually makes such a free, but not always: its
// pages may sit among used ones, or the cache may be nearly empty. So
// the order is 0 for a moment, while the cache is dropped and a few MiB
// are taken and given back (more than the per-CPU lists keep, so the
// kernel frees pages of it into its free lists), and any free at all
// sets reporting going; the reporting itself starts 2 s later and reads
// the order then, which is by then the real one again.
func ReportFreeMemory(order int) error {
	if err := setReportOrder(0); err != nil {
		return err
	}
	err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
	if err != nil {
		err = fmt.Errorf("boot: dropping the page cache: %w", err)
	}
	churn(churnBytes)
	if e := setReportOrder(order); e != nil {
		return e
	}
	return err
}

// churnBytes is what churn takes and gives back: more than a per-CPU
// free list keeps even in a VM of 16 GiB.
const churnBytes = 32 << 20

// churn takes n bytes of memory from the kernel, touching every page,
// and gives them back at once. Without the memory to spare it does
// nothing: the cache dropped will do.
func churn(n int) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return
	}
	unix.Munmap(b)
}

func setReportOrder(order int) error {
	if err := os.WriteFile(reportOrderParam, []byte(strconv.Itoa(order)), 0); err != nil {
		return fmt.Errorf("boot: free page reporting: %w", err)
	}
	return nil
}
