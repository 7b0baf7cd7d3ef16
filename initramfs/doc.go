// Package initramfs writes the guest's initramfs: a newc ("070701") cpio
// archive holding the static guest agent as /init, the /dev/console node
// the kernel needs to give /init a console, and the empty directories the
// agent mounts over.
//
// The archive is reproducible: entries are sorted, and every field that
// would vary between builds (mtime, owner, inode numbers, device numbers
// of the build host) is fixed, so the same inputs give the same bytes.
package initramfs
