//go:build linux && cgo

package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"pybox/guest/seccomp"
)

// arches are the architectures a policy is compiled for, by GOARCH.
var arches = map[string]libseccomp.ScmpArch{
	"amd64": libseccomp.ArchAMD64,
	"arm64": libseccomp.ArchARM64,
}

// Compile turns seccomp.Policy into a classic BPF program for goarch, as
// the kernel reads it (struct sock_filter, little-endian): newerCalls,
// then libseccomp's program for the table. It also returns the names of
// the calls that goarch does not have.
func Compile(goarch string) (prog []byte, missing []string, err error) {
	arch, ok := arches[goarch]
	if !ok {
		return nil, nil, fmt.Errorf("gen: no policy for %s (have amd64, arm64)", goarch)
	}
	f, err := newFilter(arch)
	if err != nil {
		return nil, nil, err
	}
	defer f.Release()
	seen := map[string]bool{}
	for _, r := range seccomp.Policy {
		// libseccomp knows every name on every architecture: a call
		// that goarch lacks resolves to a negative pseudo number.
		if nr, err := libseccomp.GetSyscallFromNameByArch(r.Name, arch); err != nil || nr < 0 {
			if !seen[r.Name] {
				missing = append(missing, r.Name)
			}
			seen[r.Name] = true
			continue
		}
		if err := addRule(f, r); err != nil {
			return nil, nil, fmt.Errorf("gen: %s rule for %s: %w", goarch, r.Name, err)
		}
	}
	table, err := export(f)
	if err != nil {
		return nil, nil, err
	}
	prog, err = newerCalls(goarch)
	if err != nil {
		return nil, nil, err
	}
	return append(prog, table...), missing, nil
}

// newerCalls answers a native call numbered above seccomp.LastKnownCall
// with ENOSYS, and hands every other call to the program that follows
// (libseccomp's, which loads what it needs again): a call through a
// foreign ABI, and on amd64 an x32 call (bit 30 set), so that those still
// kill. libseccomp cannot say this itself: its default action covers
// every call it does not name, and it knows calls newer than the policy
// (Debian 12's knows fchmodat2).
func newerCalls(goarch string) ([]byte, error) {
	const (
		offNr   = 0 // struct seccomp_data
		offArch = 4
		x32Bit  = 0x40000000
	)
	insts := []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: offArch, Size: 4},
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: seccomp.AuditArch(goarch), SkipFalse: 4},
		/* 2 */ bpf.LoadAbsolute{Off: offNr, Size: 4},
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: seccomp.LastKnownCall, SkipFalse: 2},
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipTrue: 1},
		/* 5 */ bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		/* 6: the table's program */
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("gen: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.LittleEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.LittleEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

// newFilter makes an empty filter for arch alone: a call made through
// any other ABI (i386 int 0x80 or x32 on amd64, arm32 on arm64) kills.
func newFilter(arch libseccomp.ScmpArch) (*libseccomp.ScmpFilter, error) {
	f, err := libseccomp.NewFilter(libseccomp.ActErrno.SetReturnCode(int16(seccomp.DefaultErrno)))
	if err != nil {
		return nil, fmt.Errorf("gen: %w", err)
	}
	steps := []func() error{
		func() error { return f.SetBadArchAction(libseccomp.ActKillProcess) },
		// A binary tree of call numbers rather than a list: a call is
		// decided in about log2(200) jumps instead of up to 200, and
		// Python makes many calls.
		func() error { return f.SetOptimize(2) },
		func() error { return f.AddArch(arch) },
	}
	// A new filter holds the native architecture; drop it unless it is
	// the one asked for. Rules still name calls by their native number:
	// libseccomp translates them by name.
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, fmt.Errorf("gen: %w", err)
	}
	if native != arch {
		steps = append(steps, func() error { return f.RemoveArch(native) })
	}
	for _, step := range steps {
		if err := step(); err != nil && err != libseccomp.ErrSyscallDoesNotExist {
			f.Release()
			return nil, fmt.Errorf("gen: %w", err)
		}
	}
	return f, nil
}

func addRule(f *libseccomp.ScmpFilter, r seccomp.Rule) error {
	call, err := libseccomp.GetSyscallFromName(r.Name)
	if err != nil {
		return err
	}
	act := libseccomp.ActAllow
	if r.Errno != 0 {
		act = libseccomp.ActErrno.SetReturnCode(int16(r.Errno))
	}
	if len(r.When) == 0 {
		return f.AddRule(call, act)
	}
	var conds []libseccomp.ScmpCondition
	for _, c := range r.When {
		sc, err := condition(c)
		if err != nil {
			return err
		}
		conds = append(conds, sc)
	}
	return f.AddRuleConditional(call, act, conds)
}

func condition(c seccomp.Cond) (libseccomp.ScmpCondition, error) {
	switch c.Op {
	case seccomp.Eq:
		return libseccomp.MakeCondition(c.Arg, libseccomp.CompareEqual, c.Value)
	case seccomp.MaskedEq:
		return libseccomp.MakeCondition(c.Arg, libseccomp.CompareMaskedEqual, c.Mask, c.Value)
	}
	return libseccomp.ScmpCondition{}, fmt.Errorf("unknown comparison %d", c.Op)
}

// export writes the program through a temporary file: libseccomp 2.5
// exports only to a descriptor.
func export(f *libseccomp.ScmpFilter) ([]byte, error) {
	tmp, err := os.CreateTemp("", "pybox-seccomp-*.bpf")
	if err != nil {
		return nil, fmt.Errorf("gen: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := f.ExportBPF(tmp); err != nil {
		return nil, fmt.Errorf("gen: export: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("gen: %w", err)
	}
	return io.ReadAll(tmp)
}
