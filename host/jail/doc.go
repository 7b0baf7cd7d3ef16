// Package jail confines the VM process (QEMU on Linux) to what the VM
// needs, so that a guest taken over, and then QEMU itself, reaches
// nothing else of the user's: the last wall of PyBox, after the box and
// the VM.
//
// QEMU runs with the user's authority. Its own seccomp filter (-sandbox
// on) limits which system calls it makes, not which paths it opens, and
// its readonly=on for a 9p share is a check of the open mode QEMU was
// asked for: a 9P2000.u open carrying the truncate bit passed that check,
// and QEMU then emptied the user's file. The jail makes the host kernel
// the judge instead, as Firecracker's jailer and crosvm's minijail do for
// their VMMs, unprivileged (no root, no setuid helper):
//
//   - namespaces (the default where the kernel lets a user mount in a user
//     namespace, as Debian's does): QEMU runs in new user, mount, pid,
//     network, IPC, UTS and cgroup namespaces, its root a small read-only
//     tmpfs that holds only /usr (its program, libraries and firmware), a
//     few device nodes, the guest files and images read-only, and each
//     data folder bound read-only, nosuid, nodev and noexec by the host
//     kernel, so that whatever QEMU asks for, a write gets EROFS. The
//     user's home and every other path are absent; it has no network.
//   - landlock (where namespaces cannot mount, such as Ubuntu 24.04 and
//     later, which strip a new user namespace of its capabilities): QEMU
//     runs in a new user namespace under a Landlock ruleset of ABI 3 or
//     later (truncation is controlled only from ABI 3, Linux 6.2): it may
//     read the same files and folders and write nothing; from ABI 4 it
//     has no TCP, from ABI 6 it cannot signal processes outside the jail
//     or reach abstract unix sockets.
//
// In both, the user namespace maps the user to uid 0 of the jail and
// everyone else to the overflow id: the guest sees a shared file's owner
// as 0 or 65534, ids no box runs as, so a box reads a data folder as any
// other user of the machine would. QEMU keeps no capability: its
// securebits make uid 0 of the jail an ordinary user across exec, its
// bounding set is empty, and no_new_privs is set.
//
// The jail is built by a helper, the pybox binary itself run as
// `pybox vm _jail`, which the supervisor starts in the new namespaces
// and which execs QEMU as its last step: QEMU keeps the helper's pid,
// which is the pid the supervisor sees, signals and measures. The
// helper arms the parent-death signal itself (Go's cannot check its
// parent from inside a new pid namespace) and checks a pipe the
// supervisor holds, so QEMU never outlives the supervisor. A helper that
// cannot build the jail says which step failed on a status pipe, and
// nothing runs.
package jail
