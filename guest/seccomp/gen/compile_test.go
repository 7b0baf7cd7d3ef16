//go:build linux && cgo

package main

import (
	"bytes"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"pybox/guest/seccomp"
)

// TestEmbeddedMatchesPolicy fails when the committed programs are not
// what the table compiles to now.
func TestEmbeddedMatchesPolicy(t *testing.T) {
	for goarch := range arches {
		prog, _, err := Compile(goarch)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(prog, seccomp.Embedded(goarch)) {
			t.Errorf("policy_%s.bpf is stale: the table compiles to something else; run `go generate ./guest/seccomp`", goarch)
		}
	}
}

// TestEveryArchByName evaluates each architecture's program with that
// architecture's own call numbers, which only libseccomp knows here.
func TestEveryArchByName(t *testing.T) {
	perm := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	nosys := unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	for goarch, arch := range arches {
		nr := func(name string) (int32, bool) {
			n, err := libseccomp.GetSyscallFromNameByArch(name, arch)
			return int32(n), err == nil && n >= 0
		}
		verdict := func(name string, args ...uint64) uint32 {
			n, ok := nr(name)
			if !ok {
				t.Fatalf("%s has no %s", goarch, name)
			}
			d := seccomp.Data{Nr: n, Arch: seccomp.AuditArch(goarch)}
			copy(d.Args[:], args)
			v, err := seccomp.Evaluate(goarch, d)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		for _, r := range seccomp.Policy {
			if _, ok := nr(r.Name); !ok || len(r.When) > 0 || r.Errno != 0 {
				continue
			}
			if v := verdict(r.Name); v != unix.SECCOMP_RET_ALLOW {
				t.Errorf("%s: %s: verdict %#x, want allow", goarch, r.Name, v)
			}
		}
		for _, name := range []string{"mount", "unshare", "setns", "ptrace", "bpf", "keyctl",
			"io_uring_setup", "userfaultfd", "perf_event_open", "init_module", "kexec_load",
			"process_vm_readv", "pivot_root", "setuid"} {
			if v := verdict(name); v != perm {
				t.Errorf("%s: %s: verdict %#x, want EPERM", goarch, name, v)
			}
		}
		if v := verdict("clone3"); v != nosys {
			t.Errorf("%s: clone3: verdict %#x, want ENOSYS", goarch, v)
		}
		// The policy's last call is what LastKnownCall says it is; the
		// calls after it are newer than the policy.
		if name, err := libseccomp.ScmpSyscall(seccomp.LastKnownCall).GetNameByArch(arch); err != nil || name != "set_mempolicy_home_node" {
			t.Errorf("%s: call %d is %q (%v), want set_mempolicy_home_node", goarch, seccomp.LastKnownCall, name, err)
		}
		if v := verdict("set_mempolicy_home_node"); v != perm {
			t.Errorf("%s: set_mempolicy_home_node: verdict %#x, want EPERM", goarch, v)
		}
		for _, nr := range []int32{seccomp.LastKnownCall + 1, 452 /* fchmodat2 */, 1000} {
			d := seccomp.Data{Nr: nr, Arch: seccomp.AuditArch(goarch)}
			if v, err := seccomp.Evaluate(goarch, d); err != nil || v != nosys {
				t.Errorf("%s: call %d, newer than the policy: verdict %#x (%v), want ENOSYS", goarch, nr, v, err)
			}
		}
		if v := verdict("socket", unix.AF_VSOCK, unix.SOCK_STREAM); v != perm {
			t.Errorf("%s: socket(AF_VSOCK): verdict %#x, want EPERM", goarch, v)
		}
		if v := verdict("socket", unix.AF_INET, unix.SOCK_STREAM); v != unix.SECCOMP_RET_ALLOW {
			t.Errorf("%s: socket(AF_INET): verdict %#x, want allow", goarch, v)
		}
		if v := verdict("clone", unix.CLONE_NEWUSER); v != perm {
			t.Errorf("%s: clone(CLONE_NEWUSER): verdict %#x, want EPERM", goarch, v)
		}
		if v := verdict("ioctl", 0, unix.TIOCSTI); v != perm {
			t.Errorf("%s: ioctl(TIOCSTI): verdict %#x, want EPERM", goarch, v)
		}
	}
}

// TestConditionsEveryArch evaluates the rules with conditions on their
// arguments (clone's flags, socket's family and type, ioctl's request,
// mknodat's mode) with each architecture's own call numbers: the
// arguments mean the same on amd64 and arm64, the numbers do not.
func TestConditionsEveryArch(t *testing.T) {
	const allow = unix.SECCOMP_RET_ALLOW
	perm := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
		unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	cases := []struct {
		what string
		call string
		args []uint64
		want uint32
	}{
		{"a thread", "clone", []uint64{thread}, allow},
		{"a fork", "clone", []uint64{uint64(unix.SIGCHLD)}, allow},
		{"a new user namespace", "clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, perm},
		{"a new mount namespace", "clone", []uint64{unix.CLONE_NEWNS}, perm},
		{"a new network namespace", "clone", []uint64{unix.CLONE_NEWNET | unix.CLONE_VM}, perm},
		{"a new pid namespace", "clone", []uint64{unix.CLONE_NEWPID}, perm},
		{"unix", "socket", []uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, allow},
		{"unix, high bits set", "socket", []uint64{1<<32 | unix.AF_UNIX, unix.SOCK_STREAM}, allow},
		{"inet datagram", "socket", []uint64{unix.AF_INET, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK}, allow},
		{"inet6", "socket", []uint64{unix.AF_INET6, unix.SOCK_STREAM}, allow},
		{"netlink", "socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW}, perm},
		{"packet", "socket", []uint64{unix.AF_PACKET, unix.SOCK_RAW}, perm},
		{"alg", "socket", []uint64{unix.AF_ALG, unix.SOCK_SEQPACKET}, perm},
		{"raw inet", "socket", []uint64{unix.AF_INET, unix.SOCK_RAW}, perm},
		{"unix pair", "socketpair", []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, allow},
		{"inet pair", "socketpair", []uint64{unix.AF_INET, unix.SOCK_STREAM}, perm},
		{"TCGETS", "ioctl", []uint64{1, unix.TCGETS}, allow},
		{"TIOCSTI, high bits set", "ioctl", []uint64{0, 1<<32 | unix.TIOCSTI}, perm},
		{"TIOCSETD", "ioctl", []uint64{0, unix.TIOCSETD}, perm},
		{"a fifo", "mknodat", []uint64{0, 0, unix.S_IFIFO | 0o644}, allow},
		{"a character device", "mknodat", []uint64{0, 0, unix.S_IFCHR | 0o644, 0x103}, perm},
		{"a block device", "mknodat", []uint64{0, 0, unix.S_IFBLK | 0o644}, perm},
	}
	for goarch, arch := range arches {
		for _, c := range cases {
			n, err := libseccomp.GetSyscallFromNameByArch(c.call, arch)
			if err != nil || n < 0 {
				t.Fatalf("%s has no %s", goarch, c.call)
			}
			d := seccomp.Data{Nr: int32(n), Arch: seccomp.AuditArch(goarch)}
			copy(d.Args[:], c.args)
			v, err := seccomp.Evaluate(goarch, d)
			if err != nil {
				t.Fatal(err)
			}
			if v != c.want {
				t.Errorf("%s: %s (%s, call %d): verdict %#x, want %#x", goarch, c.call, c.what, n, v, c.want)
			}
		}
	}
}

// TestArm64HasNoLegacyCalls checks that on arm64 the numbers x86-64 gives
// its legacy calls (open, fork, ...) reach no allowed call by accident:
// arm64 has only the *at and clone forms, and the policy allows what each
// arm64 number is, not what it would be on x86-64.
func TestArm64HasNoLegacyCalls(t *testing.T) {
	arch := arches["arm64"]
	for _, name := range []string{"open", "fork", "vfork", "stat", "lstat", "access", "pipe", "dup2", "poll", "select", "rename", "mkdir", "rmdir", "unlink", "symlink", "readlink", "chmod", "chown"} {
		if n, err := libseccomp.GetSyscallFromNameByArch(name, arch); err == nil && n >= 0 {
			t.Errorf("arm64 has %s (call %d): the policy's table would need it", name, n)
		}
	}
	for nr := int32(0); nr <= seccomp.LastKnownCall; nr++ {
		name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(arch)
		if err != nil {
			continue
		}
		v, err := seccomp.Evaluate("arm64", seccomp.Data{Nr: nr, Arch: seccomp.AuditArch("arm64")})
		if err != nil {
			t.Fatal(err)
		}
		if v == unix.SECCOMP_RET_ALLOW && !allowed(name) {
			t.Errorf("arm64: call %d (%s) is allowed with no arguments, but the policy has no rule for it", nr, name)
		}
	}
}

// allowed reports whether the policy has a rule that allows name.
func allowed(name string) bool {
	for _, r := range seccomp.Policy {
		if r.Name == name && r.Errno == 0 {
			return true
		}
	}
	return false
}
