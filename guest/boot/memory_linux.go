package boot

import (
	"fmt"
	"os"
	"strconv"
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
	if err := os.WriteFile(reportOrderParam, []byte(strconv.Itoa(noReporting)), 0); err != nil {
		return fmt.Errorf("boot: stopping free page reporting: %w", err)
	}
	return nil
}

// ReportFreeMemory makes the kernel report free blocks of 2^order pages
// and up to the host (through the balloon's free page reporting), which
// then drops them; it first drops the clean page cache, which both frees
// it and sets the kernel reporting (it looks at its free lists only when
// a large enough block is freed).
func ReportFreeMemory(order int) error {
	if err := os.WriteFile(reportOrderParam, []byte(strconv.Itoa(order)), 0); err != nil {
		return fmt.Errorf("boot: free page reporting: %w", err)
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		return fmt.Errorf("boot: dropping the page cache: %w", err)
	}
	return nil
}
