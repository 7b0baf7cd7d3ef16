package boot

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMountString(t *testing.T) {
	for _, tc := range []struct {
		m    Mount
		want string
	}{
		{Mount{Source: "proc", Target: "/proc", FSType: "proc", Flags: nosuidNodevNoexec},
			"mount -t proc -o nosuid,nodev,noexec proc /proc"},
		{Mount{Source: "tmp", Target: "/tmp", FSType: "tmpfs", Flags: nosuidNodev, Data: "mode=1777"},
			"mount -t tmpfs -o nosuid,nodev,mode=1777 tmp /tmp"},
		{Mount{Source: "/dev/vdb", Target: "/images/x", FSType: "erofs", Flags: unix.MS_RDONLY},
			"mount -t erofs -o ro /dev/vdb /images/x"},
		{Mount{Source: "none", Target: "/x", FSType: "tmpfs"}, "mount -t tmpfs none /x"},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// The table must mount each target after the filesystem it lies on:
// /dev/pts after /dev, /sys/fs/cgroup after /sys.
func TestMountsOrdered(t *testing.T) {
	for i, m := range Mounts {
		for _, later := range Mounts[i+1:] {
			if strings.HasPrefix(m.Target, later.Target+"/") {
				t.Errorf("%s comes before %s, which it lies on", m, later)
			}
		}
	}
}

func TestCgroupStepString(t *testing.T) {
	if got, want := CgroupSteps[0].String(), `echo "+memory +pids +cpu" > /sys/fs/cgroup/cgroup.subtree_control`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := CgroupSteps[1].String(), "mkdir /sys/fs/cgroup/agent"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestDiskFor(t *testing.T) {
	disks := map[string][]string{
		"stdlib":               {"/dev/vda"},
		"a-very-long-image-na": {"/dev/vdb"},
		"twin":                 {"/dev/vdc", "/dev/vdd"},
	}
	if dev, err := diskFor("stdlib", disks); dev != "/dev/vda" || err != nil {
		t.Errorf("stdlib: %q, %v", dev, err)
	}
	if dev, err := diskFor("a-very-long-image-name-cut-by-virtio", disks); dev != "/dev/vdb" || err != nil {
		t.Errorf("long name: %q, %v", dev, err)
	}
	if _, err := diskFor("twin", disks); err == nil {
		t.Error("two disks with one serial: no error")
	}
	if _, err := diskFor("data", disks); err == nil {
		t.Error("missing disk: no error")
	}
}
