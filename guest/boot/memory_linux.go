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

// ReportFreeMemory makes the kernel report free blocks of 2^order pages
// and up to the host (through the balloon's free page reporting), which
// then drops them.
func ReportFreeMemory(order int) error {
	if err := os.WriteFile(reportOrderParam, []byte(strconv.Itoa(order)), 0); err != nil {
		return fmt.Errorf("boot: free page reporting: %w", err)
	}
	return nil
}
