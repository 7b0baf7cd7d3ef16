// Package mountinfo reads the mount points of a mount table in the
// format of /proc/PID/mountinfo (proc(5)): field 5 of each line, with
// the octal escapes the kernel writes for a space, a tab, a newline and
// a backslash in a path (\040 for a space) undone.
//
// Both sides read mount tables: the guest to check a box's mounts and
// what a cleanup left, the host to find what a killed image build left
// mounted in its tree. It imports only the standard library.
package mountinfo
