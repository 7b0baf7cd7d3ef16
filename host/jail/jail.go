package jail

import (
	"fmt"
	"strings"
)

// Modes of the jail. Auto picks Namespaces where they work, else
// Landlock, else runs QEMU unjailed only when no data folder is shared
// (see Plan).
const (
	Auto       = "auto"
	Namespaces = "namespaces"
	Landlock   = "landlock"
	None       = "none"
)

// MinLandlockABI is the first Landlock ABI that controls truncation
// (Linux 6.2): below it, a 9p open with the truncate bit would still
// empty a data folder's file.
const MinLandlockABI = 3

// Build is the jail of an image build's programs that run code not from
// Debian (pip, and whatever imports a wheel's modules): the tree being
// built is their root, read-only but for the directories the build
// names, and they run as Spec.User, not as root (see BuildSpec). It is
// the builder's alone: CheckMode refuses it.
const Build = "build"

// CheckMode checks a mode the user asked for.
func CheckMode(mode string) error {
	switch mode {
	case Auto, Namespaces, Landlock, None:
		return nil
	}
	return fmt.Errorf("jail: %q: use %s, %s, %s or %s", mode, Auto, Namespaces, Landlock, None)
}

// Spec is what one jail holds and the program it then runs. It travels
// to the helper as JSON.
type Spec struct {
	Mode string `json:"mode"` // Namespaces or Landlock
	// Program is the host path of the program to run (QEMU); Args are
	// its arguments after argv[0], naming files by their Jail paths.
	Program string   `json:"program"`
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	// Files are files the program reads: the kernel, the initramfs,
	// the images.
	Files []File `json:"files,omitempty"`
	// Folders are the data folders, read-only.
	Folders []Folder `json:"folders,omitempty"`
	// Devices are host device nodes the program opens beyond the few
	// every process needs (/dev/null, /dev/urandom, ...): /dev/kvm,
	// /dev/vhost-vsock.
	Devices []string `json:"devices,omitempty"`
	// Listener says whether descriptor 3 is a listening socket the
	// program inherits (QEMU's end of the guest channel).
	Listener bool `json:"listener,omitempty"`

	// Build mode only: Root is the tree that becomes the jail's root,
	// bound read-only; Binds are bound into it, in order; Network keeps
	// the host's network (else the jail has only its own loopback, down);
	// User is the uid and gid the program runs as, never 0.
	Root    string `json:"root,omitempty"`
	Binds   []Bind `json:"binds,omitempty"`
	Network bool   `json:"network,omitempty"`
	User    int    `json:"user,omitempty"`
	// Dir is the program's working directory in the jail ("/" if empty).
	Dir string `json:"dir,omitempty"`
}

// Bind is a host file or directory a build's jail shows at Jail (a path
// in Root), read-only unless Write. Jail must exist in Root, or lie in
// a directory bound with Write before it.
type Bind struct {
	Host  string `json:"host"`
	Jail  string `json:"jail"`
	Write bool   `json:"write,omitempty"`
}

// File is a host file and where the program finds it in the jail (the
// same path under Landlock, which has no root of its own).
type File struct {
	Host string `json:"host"`
	Jail string `json:"jail"`
}

// Folder is a data folder: the directory the supervisor opened and walks
// (Dev and Ino, from its open descriptor), which the helper finds again
// by Host and gives the program only if it is the same directory.
type Folder struct {
	Host string `json:"host"`
	Jail string `json:"jail"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// HelperCommand is the `pybox vm` subcommand that is the helper (Main).
const HelperCommand = "_jail"

// Helper is the helper's argv: the running pybox binary itself, whatever
// has become of its path since it started.
func Helper() []string { return []string{"/proc/self/exe", "vm", HelperCommand} }

// Root is where the namespaces mode puts the VM's own files in the jail.
const Root = "/pybox"

// Place is where a jail of mode shows host path host: under Root, named
// by kind and name, in a jail with a root of its own; the host path
// itself under Landlock and without a jail.
func Place(mode, host, kind, name string) string {
	if mode != Namespaces {
		return host
	}
	if name == "" {
		return Root + "/" + kind
	}
	return Root + "/" + kind + "/" + name
}

// Describe says in one line what confines a program run in mode, for
// `pybox vm status`.
func Describe(mode string, landlockABI int) string {
	switch mode {
	case Namespaces:
		return "namespaces (user, mount, pid, net, ipc, uts, cgroup): QEMU sees /usr, a few devices, the guest files and the data folders, " +
			"read-only, nothing of your home; no capabilities, no network"
	case Landlock:
		var extra []string
		if landlockABI >= 4 {
			extra = append(extra, "no TCP")
		}
		if landlockABI >= 6 {
			extra = append(extra, "no signals or abstract sockets outside it")
		}
		s := fmt.Sprintf("landlock ABI %d in a user namespace: QEMU may read /usr, a few devices, the guest files and the data folders, and write none of them; no capabilities", landlockABI)
		if len(extra) > 0 {
			s += "; " + strings.Join(extra, ", ")
		}
		return s
	}
	return "none"
}
