//go:build linux

// Command hostileinit is a guest /init taken over: as PID 1, before the
// real agent starts, it speaks 9p itself to the first data folder's
// share, in every dialect the guest kernel offers, mounted read-write on
// purpose, and tries every kind of write on the host folder behind it.
// It logs one line per attempt on the console, then unmounts and hands
// over to the real agent, so that the VM comes up as usual and the test
// can judge the host folder from outside (e2e/hostwall_e2e_test.go).
//
// Console lines, one per step (the test parses them):
//
//	hostile: DIALECT mount ok (OPTIONS)
//	hostile: DIALECT mount failed: ERRORS
//	hostile: DIALECT ATTEMPT TARGET: RESULT (victim.csv BEFORE -> AFTER bytes)
//	hostile: DIALECT remount: ERROR (only when it fails)
//	hostile: DIALECT umount: RESULT
//	hostile: done
//
// RESULT is "ok" or the guest's error text ("read-only file system");
// the sizes are victim.csv's as the host reports it over the share
// (cache=none), before and after the attempt, -1 when it cannot be
// stat'ed. The folder the test gives holds victim.csv, notes.txt,
// script.sh and the empty directory empty/.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"pybox/guest/agent"
	"pybox/guest/box"
)

// share is the first data folder's 9p mount tag (host/vm.DataTag(0)).
const share = "pyboxdata0"

// mountPoint lies on the initramfs and is removed before the agent
// starts, so the agent's root is as it would be.
const mountPoint = "/hostile"

// dialects are the 9p protocol versions the Linux client speaks; 9p2000.u
// first, since its open mode carries the truncate bit (0x10) that QEMU's
// readonly=on check does not look at. QEMU refuses plain 9p2000 at
// version negotiation (the mount fails with EREMOTEIO); it is tried all
// the same, so that a QEMU that one day accepts it is attacked in it too.
var dialects = []string{"9p2000.u", "9p2000.L", "9p2000"}

// accessModes are tried in order until one mounts: each lets root act as
// root on the share (access=client only exists for 9p2000.L).
var accessModes = []string{"access=any", "access=user", "access=client", ""}

// An attempt is one write the host folder must refuse; do runs it in the
// mounted share dir.
type attempt struct {
	name, target string
	do           func(dir string) error
}

// attempts are every kind of write a guest can send over 9p. The guest
// kernel refuses some by itself in some dialects (setxattr in 9p2000.u:
// operation not supported).
var attempts = []attempt{
	{"open-trunc-rdonly", "victim.csv", func(d string) error { return openClose(d, "victim.csv", unix.O_RDONLY|unix.O_TRUNC, nil) }},
	{"open-trunc-wronly", "victim.csv", func(d string) error { return openClose(d, "victim.csv", unix.O_WRONLY|unix.O_TRUNC, nil) }},
	{"open-write", "victim.csv", func(d string) error { return openClose(d, "victim.csv", unix.O_WRONLY, []byte("HOSTILE")) }},
	{"open-rdwr-write", "victim.csv", func(d string) error { return openClose(d, "victim.csv", unix.O_RDWR, []byte("HOSTILE")) }},
	{"open-append", "victim.csv", func(d string) error {
		return openClose(d, "victim.csv", unix.O_WRONLY|unix.O_APPEND, []byte("HOSTILE"))
	}},
	{"create", "created.txt", func(d string) error {
		return openClose(d, "created.txt", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, []byte("HOSTILE"))
	}},
	{"rename", "script.sh", func(d string) error {
		return unix.Rename(filepath.Join(d, "script.sh"), filepath.Join(d, "renamed.sh"))
	}},
	{"mkdir", "newdir", func(d string) error { return unix.Mkdir(filepath.Join(d, "newdir"), 0o777) }},
	{"chmod", "victim.csv", func(d string) error { return unix.Chmod(filepath.Join(d, "victim.csv"), 0o7777) }},
	{"chown", "victim.csv", func(d string) error { return unix.Chown(filepath.Join(d, "victim.csv"), 65534, 65534) }},
	{"truncate", "victim.csv", func(d string) error { return unix.Truncate(filepath.Join(d, "victim.csv"), 0) }},
	{"link", "victim.csv", func(d string) error {
		return unix.Link(filepath.Join(d, "victim.csv"), filepath.Join(d, "linked.csv"))
	}},
	{"symlink", "evil-link", func(d string) error { return unix.Symlink("/etc/passwd", filepath.Join(d, "evil-link")) }},
	{"setxattr", "victim.csv", func(d string) error {
		return unix.Setxattr(filepath.Join(d, "victim.csv"), "user.x", []byte("hostile"), 0)
	}},
	{"utimes", "victim.csv", func(d string) error {
		return unix.Utimes(filepath.Join(d, "victim.csv"), []unix.Timeval{{Sec: 1}, {Sec: 1}})
	}},
	{"mknod-fifo", "evil-fifo", func(d string) error { return unix.Mknod(filepath.Join(d, "evil-fifo"), unix.S_IFIFO|0o666, 0) }},
}

// removals run last, each on a mount of its own: in 9p2000.u they are a
// Tremove, which clunks its fid even when it fails; QEMU refuses it on a
// read-only share without freeing the fid, and the client's next walk
// that reuses the number then fails with EINVAL before its own request
// is looked at.
var removals = []attempt{
	{"unlink", "notes.txt", func(d string) error { return unix.Unlink(filepath.Join(d, "notes.txt")) }},
	{"rmdir", "empty", func(d string) error { return unix.Rmdir(filepath.Join(d, "empty")) }},
}

func main() {
	// Boxes re-exec /proc/self/exe box-init: this binary is their init
	// too, exactly as cmd/pybox-guest's.
	if len(os.Args) > 1 && os.Args[1] == "box-init" {
		box.ChildMain()
		return
	}
	for _, v := range dialects {
		attack(v)
	}
	// The agent mounts the same share read-only later, and a virtio 9p
	// channel serves one mount at a time: every mount of ours is gone by
	// now (attack unmounts), and so is the mount point.
	os.Remove(mountPoint)
	say("done")
	agent.Main()
}

// attack mounts the share read-write in dialect v, runs every attempt
// and unmounts.
func attack(v string) {
	if err := os.MkdirAll(mountPoint, 0o755); err != nil {
		say("%s mount failed: mkdir %s: %v", v, mountPoint, err)
		return
	}
	opts, err := mount(v)
	if err != nil {
		say("%s mount failed: %v", v, err)
		return
	}
	say("%s mount ok (%s)", v, opts)
	for _, a := range attempts {
		try(v, a)
	}
	for _, a := range removals {
		if err := remount(v); err != nil {
			say("%s remount: %v", v, err)
			break
		}
		try(v, a)
	}
	say("%s umount: %s", v, result(unmount()))
}

// mount tries each access mode in turn, read-write (no MS_RDONLY: the
// guest kernel would refuse every write itself, and the point is what
// the host does). While the share's virtio channel is not there yet
// (ENOENT), it tries again for a while.
func mount(v string) (string, error) {
	var errs []string
	for round := 0; round < 20; round++ {
		errs = errs[:0]
		absent := false
		for _, access := range accessModes {
			opts := "trans=virtio,version=" + v + ",cache=none"
			if access != "" {
				opts += "," + access
			}
			err := unix.Mount(share, mountPoint, "9p", 0, opts)
			if err == nil {
				return opts, nil
			}
			absent = absent || errors.Is(err, unix.ENOENT)
			errs = append(errs, fmt.Sprintf("%s: %v", opts, err))
		}
		if !absent {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", errors.New(strings.Join(errs, "; "))
}

// try runs a and logs what came of it.
func try(v string, a attempt) {
	before := victimSize()
	err := a.do(mountPoint)
	say("%s %s %s: %s (victim.csv %d -> %d bytes)", v, a.name, a.target, result(err), before, victimSize())
}

// remount unmounts the share and mounts it again in dialect v.
func remount(v string) error {
	if err := unmount(); err != nil {
		return fmt.Errorf("umount: %w", err)
	}
	_, err := mount(v)
	return err
}

// unmount unmounts the share and waits until the channel is free.
func unmount() error {
	var err error
	for round := 0; round < 50; round++ {
		if err = unix.Unmount(mountPoint, 0); err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// openClose opens name in dir with flags, writes data if any, closes.
func openClose(dir, name string, flags int, data []byte) error {
	fd, err := unix.Open(filepath.Join(dir, name), flags|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if data != nil {
		if _, err := unix.Write(fd, data); err != nil {
			return fmt.Errorf("opened, write: %w", err)
		}
	}
	return nil
}

// victimSize is victim.csv's size as the host says, or -1.
func victimSize() int64 {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(mountPoint, "victim.csv"), &st); err != nil {
		return -1
	}
	return st.Size
}

func result(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// say writes one line on the console: PID 1's stdout, which the kernel
// opened on /dev/console.
func say(format string, args ...any) {
	fmt.Fprintf(os.Stdout, "hostile: "+format+"\n", args...)
}
