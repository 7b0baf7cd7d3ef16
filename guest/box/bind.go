//go:build linux

package box

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// A warm box is made before its run is known, so the data folders a run
// names are bound into it at the hand-over, by the agent, before the
// program starts: the same mounts box-init makes in a cold box (a small
// read-only tmpfs at /data holding one read-only, nosuid, nodev, noexec
// bind of each folder), made in the box's mount namespace, then checked
// from outside as box-init's posture check does.

// dataAttrs are a data folder's mount flags in the box.
const dataAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC

// bindData binds data into the mount namespace of the box whose box-init
// is pid (in the agent's pid namespace). ids are the box's: the /data
// tmpfs belongs to the box's root, as box-init's own does.
func bindData(pid int, ids hostIDs, data []dataMount) error {
	// Each folder as a detached copy of its mount, made read-only here,
	// in the agent's namespace where its source is.
	var trees []int
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	for _, d := range data {
		fd, err := unix.OpenTree(unix.AT_FDCWD, d.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return &os.PathError{Op: "open_tree", Path: d.Source, Err: err}
		}
		trees = append(trees, fd)
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: dataAttrs}); err != nil {
			return &os.PathError{Op: "mount_setattr", Path: d.Source, Err: err}
		}
	}
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err != nil {
		return err
	}
	defer ns.Close()
	done := make(chan error, 1)
	go func() {
		// setns(CLONE_NEWNS) needs a thread that shares no filesystem
		// context: this one gets its own, and enters the box. It is
		// never unlocked, so it ends with this goroutine and no other
		// goroutine ever runs in the box's namespace.
		runtime.LockOSThread()
		done <- func() error {
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return &os.SyscallError{Syscall: "unshare(CLONE_FS)", Err: err}
			}
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
				return &os.SyscallError{Syscall: "setns(mnt)", Err: err}
			}
			// The thread's root is now the box's.
			return attachData("/data", ids, data, trees)
		}()
	}()
	return <-done
}

// attachData mounts dir's tmpfs and moves each detached folder onto its
// mount point, then makes the tmpfs read-only: mountData's steps, with
// the folders already bound.
func attachData(dir string, ids hostIDs, data []dataMount, trees []int) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("this image has no /data to mount data folders on: rebuild it with this pybox (pybox image build NAME)")
	}
	opts := fmt.Sprintf("%s,uid=%d,gid=%d", dataTmpfsOptions, ids.root, ids.root)
	if err := mount("pybox-data", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return err
	}
	for i, d := range data {
		target := filepath.Join(dir, d.Name)
		if err := unix.Mkdir(target, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", target, err)
		}
		if err := unix.Lchown(target, ids.root, ids.root); err != nil {
			return fmt.Errorf("chown %s: %w", target, err)
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return &os.PathError{Op: "move_mount", Path: target, Err: err}
		}
	}
	return mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts)
}

// checkData is the posture check of a warm box's data folders, from
// outside: each read-only, nosuid, nodev and noexec, and no mount in the
// box but its own and these.
func checkData(pid int, data []dataMount) []string {
	var problems []string
	proc := "/proc/" + strconv.Itoa(pid)
	for _, d := range data {
		if !hasFlags(proc+"/root/data/"+d.Name, unix.ST_RDONLY|unix.ST_NOSUID|unix.ST_NODEV|unix.ST_NOEXEC) {
			problems = append(problems, fmt.Sprintf("data folder %s is not read-only,nosuid,nodev,noexec", d.Name))
		}
	}
	extra, err := unexpectedMounts(proc+"/mountinfo", data)
	if err != nil {
		problems = append(problems, "read mountinfo: "+err.Error())
	}
	for _, m := range extra {
		problems = append(problems, "unexpected mount "+m)
	}
	return problems
}
