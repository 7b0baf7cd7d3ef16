//go:build linux

package seccomp

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

//go:generate go run ./gen -out .

// The compiled policies, both embedded on every architecture so that
// tests can evaluate either one; a few kilobytes each.
var (
	//go:embed policy_amd64.bpf
	policyAMD64 []byte
	//go:embed policy_arm64.bpf
	policyARM64 []byte
)

// Embedded returns the compiled policy for goarch as libseccomp wrote it
// (an array of struct sock_filter, little-endian), or nil if there is
// none.
func Embedded(goarch string) []byte {
	switch goarch {
	case "amd64":
		return policyAMD64
	case "arm64":
		return policyARM64
	}
	return nil
}

// Program decodes the compiled policy for goarch.
func Program(goarch string) ([]unix.SockFilter, error) {
	raw := Embedded(goarch)
	if raw == nil {
		return nil, fmt.Errorf("seccomp: no policy for %s; the box runs on amd64 and arm64 only", goarch)
	}
	return decode(raw)
}

// decode reads struct sock_filter {u16 code; u8 jt; u8 jf; u32 k} records.
// Both architectures with a policy are little-endian.
func decode(raw []byte) ([]unix.SockFilter, error) {
	const size = 8
	if len(raw) == 0 || len(raw)%size != 0 || len(raw)/size > 4096 {
		return nil, fmt.Errorf("seccomp: compiled policy of %d bytes is not a BPF program (run `go generate ./guest/seccomp`)", len(raw))
	}
	prog := make([]unix.SockFilter, len(raw)/size)
	for i := range prog {
		r := raw[i*size:]
		prog[i] = unix.SockFilter{
			Code: binary.LittleEndian.Uint16(r[0:]),
			Jt:   r[2],
			Jf:   r[3],
			K:    binary.LittleEndian.Uint32(r[4:]),
		}
	}
	return prog, nil
}

// native is the policy Load installs.
func native() ([]unix.SockFilter, error) { return Program(runtime.GOARCH) }
