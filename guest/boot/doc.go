// Package boot holds the steps the guest's PID 1 takes before it serves:
// the filesystems it mounts, the cgroup tree it sets up, the images it
// mounts read-only, and the way it powers the VM off. It also holds the
// console logger, which keeps recent lines for the console prompt.
//
// Setup sequences are tables of steps with a String method, so a log line
// names exactly the step that failed.
package boot
