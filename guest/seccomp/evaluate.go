//go:build linux

package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Data is what a filter sees of one call: the kernel's struct seccomp_data.
type Data struct {
	Nr   int32
	Arch uint32 // AUDIT_ARCH_*
	IP   uint64
	Args [6]uint64
}

// AuditArch is the AUDIT_ARCH_* value the kernel reports for goarch's
// native system calls, or 0.
func AuditArch(goarch string) uint32 {
	switch goarch {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64
	}
	return 0
}

// Evaluate runs the compiled policy for goarch on d outside the kernel
// and returns its verdict (SECCOMP_RET_ACTION_FULL | data), so that the
// policy can be checked call by call, for either architecture, without
// loading it.
func Evaluate(goarch string, d Data) (uint32, error) {
	prog, err := Program(goarch)
	if err != nil {
		return 0, err
	}
	insts := make([]bpf.Instruction, len(prog))
	for i, f := range prog {
		insts[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}.Disassemble()
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		return 0, fmt.Errorf("seccomp: %w", err)
	}
	v, err := vm.Run(d.bytes())
	return uint32(v), err
}

// bytes lays d out as the filter reads it. A seccomp filter loads 32-bit
// words in host order, and the packet VM loads them big-endian, so each
// word is written big-endian at the offset the kernel gives it on a
// little-endian machine: a 64-bit argument's low half first.
func (d Data) bytes() []byte {
	b := make([]byte, 64)
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(d.Nr))
	be.PutUint32(b[4:], d.Arch)
	put64 := func(off int, v uint64) {
		be.PutUint32(b[off:], uint32(v))
		be.PutUint32(b[off+4:], uint32(v>>32))
	}
	put64(8, d.IP)
	for i, a := range d.Args {
		put64(16+8*i, a)
	}
	return b
}
