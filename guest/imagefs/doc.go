// Package imagefs reads the files of a mounted image as untrusted input.
//
// Users import images that others made, and the agent that reads them is
// PID 1 and root. A link in an image could lead anywhere the agent sees
// (a data folder's mount under /run/data, /dev/zero), a FIFO would block
// the agent at its first read, and a file of gigabytes would keep it
// reading. So every file the guest reads of an image is read through a
// [Root]: resolved from the image's root with openat2, with no symbolic
// link anywhere on its path and no mount crossed; opened non-blocking;
// read only if it is a regular file no larger than the caller's limit.
// What does not fit is an [*Error] that names the image, the path inside
// it and what was wrong, never a hang.
package imagefs
