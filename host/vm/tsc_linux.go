package vm

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// hostTSCkHz returns the host's TSC frequency. Under TCG the guest's TSC
// ticks at the host's rate, and a microvm guest cannot calibrate it, so it
// must be told (tsc_early_khz). The kernel log says it best ("tsc: Refined
// TSC clocksource calibration: ... MHz", else "tsc: Detected ... MHz");
// /proc/cpuinfo's "cpu MHz" is the fallback (right where the TSC is
// invariant and the CPU is not scaled, as in most VMs).
func hostTSCkHz() (int, error) {
	if log, err := kernelLog(); err == nil {
		if khz, ok := tscFromKernelLog(log); ok {
			return khz, nil
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if khz, ok := tscFromCPUInfo(string(b)); ok {
			return khz, nil
		}
	}
	return 0, errNoTSC
}

func kernelLog() (string, error) {
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		return "", fmt.Errorf("syslog(SIZE_BUFFER): %w", err)
	}
	buf := make([]byte, n)
	n, err = unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return "", fmt.Errorf("syslog(READ_ALL): %w", err)
	}
	return string(buf[:n]), nil
}

var (
	tscRefined  = regexp.MustCompile(`tsc: Refined TSC clocksource calibration: ([0-9.]+) MHz`)
	tscDetected = regexp.MustCompile(`tsc: Detected ([0-9.]+) MHz`)
)

func tscFromKernelLog(log string) (int, bool) {
	for _, re := range []*regexp.Regexp{tscRefined, tscDetected} {
		if m := re.FindStringSubmatch(log); m != nil {
			return mhzToKHz(m[1])
		}
	}
	return 0, false
}

func tscFromCPUInfo(cpuinfo string) (int, bool) {
	s := bufio.NewScanner(strings.NewReader(cpuinfo))
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			return mhzToKHz(strings.TrimSpace(v))
		}
	}
	return 0, false
}

func mhzToKHz(s string) (int, bool) {
	mhz, err := strconv.ParseFloat(s, 64)
	if err != nil || mhz < 100 || mhz > 20000 {
		return 0, false
	}
	return int(math.Round(mhz * 1000)), true
}
