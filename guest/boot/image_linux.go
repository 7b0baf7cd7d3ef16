package boot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// ImagesDir holds one read-only mount per image: /images/<name>.
const ImagesDir = "/images"

// serialBytes is how much of a disk's serial virtio-blk carries
// (VIRTIO_BLK_ID_BYTES): longer image names arrive cut to this length.
const serialBytes = 20

// imageFS are tried in order: erofs is what the host builds; squashfs is
// accepted for images built elsewhere.
var imageFS = []string{"erofs", "squashfs"}

// Image is an image the guest mounted.
type Image struct {
	wire.ImageInfo
	Device string // /dev/vdX
	Dir    string // ImagesDir/<name>
	FSType string
}

// MountImages mounts every image named on the kernel command line. An
// image that cannot be found or mounted is logged and left out: the agent
// serves the others and its hello lists only what it mounted.
func MountImages(cmdline string, logf func(string, ...any)) []Image {
	want, errs := ParseImages(cmdline)
	for _, err := range errs {
		logf("%v", err)
	}
	if len(want) == 0 {
		return nil
	}
	disks := findDisks(want)
	var mounted []Image
	for _, info := range want {
		dev, err := diskFor(info.Name, disks)
		if err != nil {
			logf("boot: image %s left out: %v", info.Name, err)
			continue
		}
		img, err := mountImage(info, dev)
		if err != nil {
			logf("boot: image %s left out: %v", info.Name, err)
			continue
		}
		about, err := readAbout(img.Dir)
		switch {
		case err != nil:
			logf("boot: image %s: %v; its runs will not name its Python", img.Name, err)
		case about != nil:
			img.Python, img.Suite = about.Python, about.Suite
		}
		logf("boot: image %s (sha256 %.12s, python %s, %s) from %s mounted at %s (%s)",
			img.Name, img.Digest, orNone(img.Python), orNone(img.Suite), img.Device, img.Dir, img.FSType)
		mounted = append(mounted, img)
	}
	return mounted
}

// findDisks maps each virtio-blk disk's serial to its device node. Disks
// are probed before PID 1 starts, but it waits up to a second for every
// wanted disk to show, in case one is still being added.
func findDisks(want []wire.ImageInfo) map[string][]string {
	var disks map[string][]string
	for deadline := time.Now().Add(time.Second); ; time.Sleep(20 * time.Millisecond) {
		disks = scanDisks()
		missing := false
		for _, w := range want {
			if _, err := diskFor(w.Name, disks); err != nil {
				missing = true
			}
		}
		if !missing || time.Now().After(deadline) {
			return disks
		}
	}
}

func scanDisks() map[string][]string {
	disks := map[string][]string{}
	paths, _ := filepath.Glob("/sys/block/vd*/serial")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		serial := strings.TrimRight(string(b), "\x00\n ")
		dev := "/dev/" + filepath.Base(filepath.Dir(p))
		disks[serial] = append(disks[serial], dev)
	}
	return disks
}

// diskFor finds the one disk whose serial is the image's name (cut to
// what a serial can hold).
func diskFor(name string, disks map[string][]string) (string, error) {
	serial := name
	if len(serial) > serialBytes {
		serial = serial[:serialBytes]
	}
	switch devs := disks[serial]; len(devs) {
	case 0:
		return "", fmt.Errorf("no virtio-blk disk with serial %q (the host attaches each image with serial=<name>)", serial)
	case 1:
		return devs[0], nil
	default:
		return "", fmt.Errorf("disks %v all have serial %q; image names must differ in their first %d bytes", devs, serial, serialBytes)
	}
}

func mountImage(info wire.ImageInfo, dev string) (Image, error) {
	dir := filepath.Join(ImagesDir, info.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Image{}, err
	}
	var errs []string
	for _, fs := range imageFS {
		err := unix.Mount(dev, dir, fs, unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, "")
		if err == nil {
			return Image{ImageInfo: info, Device: dev, Dir: dir, FSType: fs}, nil
		}
		errs = append(errs, fs+": "+err.Error())
	}
	os.Remove(dir)
	return Image{}, fmt.Errorf("mount %s at %s read-only: %s", dev, dir, strings.Join(errs, "; "))
}

// readAbout reads what the image mounted at dir says it holds
// (wire.ImageAboutFile), or nil for an image that says nothing (built by
// an older pybox, or elsewhere). The file is read inside the image only:
// a link that leads out of it is not followed.
func readAbout(dir string) (*wire.ImageAbout, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(strings.TrimPrefix(wire.ImageAboutFile, "/"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, wire.MaxImageAboutBytes+1))
	if err != nil {
		return nil, err
	}
	a, err := wire.DecodeImageAbout(b)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
