//go:build linux && !pyboxbench

package box

// benchBuild is false in every build but the benchmark one (the
// pyboxbench tag, `make bench-guest`): here every box is sealed and
// checked, and box-init refuses a configuration that asks otherwise.
const benchBuild = false

// skips says which of the last two seals a run leaves out: none, ever,
// in this build.
func (b *Runner) skips() (posture, seccomp bool) { return false, false }
