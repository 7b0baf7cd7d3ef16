// Package guestfiles finds the guest kernel and initramfs that pybox
// boots, and reads and writes the manifest that describes them.
//
// A pybox looks for each file in this order, and takes the first place
// that names one:
//
//  1. the flag (--kernel, --initramfs);
//  2. the environment ($PYBOX_KERNEL, $PYBOX_INITRAMFS);
//  3. the installed guest files, <dir of the real executable>/../lib/pybox/<arch>/
//     (what `make install` and the release bundle lay out);
//  4. the build tree, <dir of the real executable>/../build/<arch>/
//     (bin/pybox in a checkout after `make`).
//
// A flag or variable that names a missing file is an error, not a reason
// to look further: the person asked for that file. When no place has the
// file, the error lists every place looked at and how to fix it.
//
// The manifest (manifest.json, beside the files) records each file's
// sha256 and the version of the guest agent inside the initramfs, so
// `pybox version` can say what a VM would boot without booting it.
package guestfiles
