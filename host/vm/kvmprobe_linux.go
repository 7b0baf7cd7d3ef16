package vm

import (
	"encoding/json"
	"os"
	"strings"
	"time"

	"pybox/host/paths"
)

// kvmProbe is the cached result of a KVM attempt that did not boot. It is
// valid for one host boot (a reboot may fix or change the hypervisor) and
// one kernel file (another kernel may boot where this one hung).
type kvmProbe struct {
	BootID       string    `json:"boot_id"`
	KernelSHA256 string    `json:"kernel_sha256"`
	Usable       bool      `json:"usable"`
	Reason       string    `json:"reason"`
	ProbedAt     time.Time `json:"probed_at"`
}

func probeKey(kernel string) (bootID, kernelSum string, err error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", "", err
	}
	sum, err := FileSHA256(kernel)
	return strings.TrimSpace(string(b)), sum, err
}

// cachedKVMFailure reports a failed KVM probe recorded for this host boot
// and this kernel.
func cachedKVMFailure(home, kernel string) (reason string, ok bool) {
	b, err := os.ReadFile(paths.KVMProbe(home))
	if err != nil {
		return "", false
	}
	var p kvmProbe
	if json.Unmarshal(b, &p) != nil || p.Usable {
		return "", false
	}
	bootID, sum, err := probeKey(kernel)
	if err != nil || p.BootID != bootID || p.KernelSHA256 != sum {
		return "", false
	}
	return p.Reason, true
}

func recordKVMFailure(home, kernel, reason string) error {
	bootID, sum, err := probeKey(kernel)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(kvmProbe{BootID: bootID, KernelSHA256: sum, Reason: reason, ProbedAt: time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(paths.KVMProbe(home), append(b, '\n'))
}

// writeFileAtomic writes a file so that a reader sees the old or the new
// content, never half.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
