package vm

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Many images and data folders need more virtio slots than microvm has:
// the default machine becomes pc, and an explicit microvm is refused
// with what to do.
func TestMachineForManyDevices(t *testing.T) {
	k := filepath.Join(t.TempDir(), "k")
	os.WriteFile(k, []byte("k"), 0o644)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	var data []DataShare
	for i := range 5 {
		data = append(data, DataShare{Name: "d" + strconv.Itoa(i), Folder: dir})
	}
	sum := strings.Repeat("ab", 32)
	images := []Image{{Name: "stdlib", Path: k, Digest: sum}, {Name: "data", Path: k, Digest: sum}}
	// The random source, the channel and the balloon take 3 of 8.
	c := Config{Kernel: k, Initramfs: k, Images: images, Data: data[:3]}
	if err := c.Check(); err != nil || c.Machine != MachineMicrovm {
		t.Errorf("2 images and 3 folders: machine %q, %v", c.Machine, err)
	}
	c = Config{Kernel: k, Initramfs: k, Images: images, Data: data[:4]}
	if err := c.Check(); err != nil || c.Machine != MachinePC {
		t.Errorf("2 images and 4 folders: machine %q, %v", c.Machine, err)
	}
	c = Config{Kernel: k, Initramfs: k, Images: images, Data: data[:4], KeepMemory: true}
	if err := c.Check(); err != nil || c.Machine != MachineMicrovm {
		t.Errorf("2 images and 4 folders, no balloon: machine %q, %v", c.Machine, err)
	}
	c = Config{Kernel: k, Initramfs: k, Images: images, Data: data, Machine: MachineMicrovm}
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), "--machine pc") {
		t.Errorf("microvm asked for: %v", err)
	}
}
