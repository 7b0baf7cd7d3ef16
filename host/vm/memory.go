package vm

import (
	"time"

	"pybox/shared/wire"
)

// Memory given back on a VM without free page reporting (vz's balloon):
// once the guest has run nothing for BalloonIdle, its memory is lowered
// to BalloonTarget, and raised back to the whole when a run starts.
const (
	// BalloonIdle is how long the guest must have run nothing.
	BalloonIdle = 15 * time.Second
	// balloonHeadroom is kept above what the guest uses and a run's
	// limit: page cache for the images' hot files, and the guest
	// kernel's own growth while a run starts.
	balloonHeadroom = 256 << 20
	// balloonFloor is the least an idle guest keeps.
	balloonFloor = 768 << 20
)

// BalloonTarget is the memory, in bytes, that an idle guest keeps: what it
// uses now (itself and its warm boxes), a whole run's default limit, and
// headroom, so that a run starting before the target is raised again still
// has all it may use. It is never below the floor nor above the VM's
// memory.
func BalloonTarget(m wire.GuestMemory, memoryMiB int) int64 {
	whole := int64(memoryMiB) << 20
	return min(whole, max(balloonFloor, m.Used+wire.DefaultMemoryBytes+balloonHeadroom))
}
