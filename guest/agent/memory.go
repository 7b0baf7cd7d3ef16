package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"pybox/shared/wire"
)

// readMemory reads the guest's memory from the kernel's count
// (proc/meminfo in files). Cache is what the kernel may drop: the page
// cache less what lives in memory only (Shmem: the initramfs and tmpfs
// files, which count as Used).
func readMemory(files fs.FS) (*wire.GuestMemory, error) {
	b, err := fs.ReadFile(files, "proc/meminfo")
	if err != nil {
		return nil, err
	}
	kb := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			kb[name] = n
		}
	}
	for _, k := range []string{"MemTotal", "MemFree", "Cached", "Buffers", "Shmem"} {
		if _, ok := kb[k]; !ok {
			return nil, fmt.Errorf("agent: /proc/meminfo has no %s", k)
		}
	}
	m := &wire.GuestMemory{
		Total: kb["MemTotal"] << 10,
		Free:  kb["MemFree"] << 10,
		Cache: max(0, kb["Cached"]+kb["Buffers"]-kb["Shmem"]) << 10,
	}
	m.Used = max(0, m.Total-m.Free-m.Cache)
	return m, nil
}
