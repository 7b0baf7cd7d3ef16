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
