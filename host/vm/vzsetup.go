package vm

import "strings"

// What the vz backend (vm_vz_darwin.go) gives the guest, kept in a file
// every system builds so that it is tested on Linux too.

// vzCmdline is KernelCmdline for a vz guest: the console is the virtio
// console, hvc0, and reboot=t (an x86 triple fault) has no meaning on
// arm64, where a reboot is a PSCI call and stops the VM.
func vzCmdline(cfg Config) string {
	var args []string
	for _, a := range strings.Fields(KernelCmdline(cfg, "vz")) {
		switch {
		case strings.HasPrefix(a, "console="):
			args = append(args, "console=hvc0")
		case a == "reboot=t":
		default:
			args = append(args, a)
		}
	}
	return strings.Join(args, " ")
}

// vzDiskIDBytes is the most a virtio-blk serial holds, and so the most
// Virtualization.framework takes as a block device identifier.
const vzDiskIDBytes = 20

// vzDiskID is the block device identifier of an image's disk: its name,
// cut to what a serial holds, as the guest cuts it when it looks for the
// disk (guest/boot). Image names are ASCII (wire.CheckImageName), as the
// identifier must be.
func vzDiskID(name string) string {
	if len(name) > vzDiskIDBytes {
		return name[:vzDiskIDBytes]
	}
	return name
}
