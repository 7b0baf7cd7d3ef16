package boot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"pybox/guest/imagefs"
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
// image that cannot be found or mounted, or whose description
// (wire.ImageAboutFile) is there but unsafe or invalid, is logged and
// left out: the agent serves the others and its hello lists only what it
// mounted.
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
		// An image's maker is not trusted: one whose description is not a
		// plain, valid file inside it is not served at all.
		about, err := readAbout(img.Dir)
		if err != nil {
			logf("boot: image %s left out: %v (rebuild it with `pybox image build %s`, or import a copy built by pybox)", img.Name, err, img.Name)
			unmountImage(img, logf)
			continue
		}
		if about != nil {
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

// unmountImage takes back an image that was mounted but is not served.
func unmountImage(img Image, logf func(string, ...any)) {
	if err := unix.Unmount(img.Dir, 0); err != nil {
		logf("boot: image %s: unmount %s: %v", img.Name, img.Dir, err)
		return
	}
	os.Remove(img.Dir)
}

// readAbout reads what the image mounted at dir says it holds
// (wire.ImageAboutFile), or nil for an image that says nothing (built by
// an older pybox, or elsewhere). The file must be a regular file inside
// the image, reached through no link, of at most wire.MaxImageAboutBytes
// (imagefs); anything else, or content that does not decode, is an error.
func readAbout(dir string) (*wire.ImageAbout, error) {
	img, err := imagefs.Open(dir)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	b, err := img.ReadFile(wire.ImageAboutFile, wire.MaxImageAboutBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a, err := wire.DecodeImageAbout(b)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", dir, err)
	}
	return &a, nil
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
