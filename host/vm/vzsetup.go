package vm

import "pybox/shared/archs"

// What the vz backend (vm_vz_darwin.go) gives the guest, kept in a file
// every system builds so that it is tested on Linux too.

// vzCmdline is KernelCmdline for a vz guest: an arm64 guest, whose
// console is the virtio console, hvc0.
func vzCmdline(cfg Config) string {
	cfg.Arch = archs.Arm64
	return KernelCmdline(cfg, "vz")
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
