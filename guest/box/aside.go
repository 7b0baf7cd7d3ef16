//go:build linux

package box

import (
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// What a failed cleanup leaves is set aside: the box's cgroup, tmpfs and
// host ids (its slot) stay out of use, what it holds counts against
// admission as the guest's own, `pybox vm status` lists it, and each
// later run tries again to remove it. Other runs go on: one box that
// would not go away does not refuse every agent.

// removeBox removes a box's tmpfs and cgroup, then checks that they are
// gone: only then is it REMOVED, and its slot free again. What is left
// is set aside, with its slot.
func (b *Runner) removeBox(id string, cg *runCgroup, st *staging, empty bool, slot int) wire.Cleanup {
	var errs []string
	if cg != nil && !empty {
		// A box that never emptied: one more try, in part of the
		// cleanup's allowance (removal takes the rest).
		cg.kill()
		cg.waitEmpty(wire.CleanupAllowance - time.Second)
	}
	if st != nil {
		if err := st.remove(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if cg != nil {
		if err := cg.remove(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	l := leftover{runID: id, st: st, cg: cg, slot: slot}
	left := l.what()
	if len(left) == 0 {
		b.freeSlot(slot)
		return wire.Cleanup{Status: wire.CleanupRemoved}
	}
	b.mu.Lock()
	b.left = append(b.left, l)
	b.mu.Unlock()
	detail := "left: " + strings.Join(left, ", ")
	if len(errs) > 0 {
		detail += " (" + strings.Join(errs, "; ") + ")"
	}
	return wire.Cleanup{Status: wire.CleanupFailed, Detail: detail}
}

// leftover is what a failed cleanup left of one box.
type leftover struct {
	runID string
	st    *staging
	cg    *runCgroup
	slot  int // its host ids, free again once it is gone; -1 for none
}

// what lists what of the box still exists.
func (l leftover) what() []string {
	var left []string
	if l.st != nil {
		left = append(left, l.st.leftovers()...)
	}
	if l.cg != nil && !l.cg.gone() {
		left = append(left, "cgroup "+l.cg.dir)
	}
	return left
}

// recover tries again to remove the box, less gently than cleanup (a
// busy mount is detached), and says what is still left.
func (l leftover) recover() []string {
	if l.cg != nil && !l.cg.gone() {
		l.cg.kill()
		l.cg.waitEmpty(200 * time.Millisecond)
		l.cg.remove()
	}
	if l.st != nil {
		if err := l.st.remove(); err != nil {
			unix.Unmount(l.st.tmp, unix.MNT_DETACH)
			l.st.remove()
		}
	}
	return l.what()
}

// SetAside tries again to remove what failed cleanups left, frees the
// slots of what is gone now, and lists what is still left. Removal
// happens outside b.mu (it may wait for a cgroup to empty): admission
// goes on meanwhile.
func (b *Runner) SetAside() []string {
	b.asideMu.Lock()
	defer b.asideMu.Unlock()
	b.mu.Lock()
	left := slices.Clone(b.left)
	b.mu.Unlock()
	if len(left) == 0 {
		return nil
	}
	var still []leftover
	var what []string
	var freed []int
	for _, l := range left {
		if rest := l.recover(); len(rest) > 0 {
			still = append(still, l)
			what = append(what, l.runID+": "+strings.Join(rest, ", "))
		} else if l.slot >= 0 {
			freed = append(freed, l.slot)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// Boxes set aside meanwhile are kept.
	b.left = append(still, b.left[len(left):]...)
	for _, n := range freed {
		b.slots[n] = false
	}
	return what
}
