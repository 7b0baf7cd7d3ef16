package agent

import (
	"testing"
	"testing/fstest"
)

func TestReadMemory(t *testing.T) {
	// What a 1 GiB guest's kernel says just after a pandas run: the
	// initramfs (Shmem) is page cache that cannot be dropped.
	meminfo := `MemTotal:        1015808 kB
MemFree:          700000 kB
MemAvailable:     850000 kB
Buffers:            2048 kB
Cached:           200000 kB
SwapCached:            0 kB
Shmem:             50000 kB
`
	m, err := readMemory(fstest.MapFS{"proc/meminfo": {Data: []byte(meminfo)}})
	if err != nil {
		t.Fatal(err)
	}
	const k = 1024
	if m.Total != 1015808*k || m.Free != 700000*k || m.Cache != (200000+2048-50000)*k {
		t.Errorf("got %+v", m)
	}
	if m.Used != m.Total-m.Free-m.Cache || m.Used != (1015808-700000-152048)*k {
		t.Errorf("used %d: not total less free and cache", m.Used)
	}
}

func TestReadMemoryRefusesWhatItCannotCount(t *testing.T) {
	for name, fs := range map[string]fstest.MapFS{
		"no file":     {},
		"no MemFree":  {"proc/meminfo": {Data: []byte("MemTotal: 100 kB\nCached: 1 kB\nBuffers: 0 kB\nShmem: 0 kB\n")}},
		"not numbers": {"proc/meminfo": {Data: []byte("MemTotal: x kB\nMemFree: 1 kB\nCached: 1 kB\nBuffers: 0 kB\nShmem: 0 kB\n")}},
	} {
		if m, err := readMemory(fs); err == nil {
			t.Errorf("%s: got %+v, want an error", name, m)
		}
	}
}
