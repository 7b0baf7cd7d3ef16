package image

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// trim removes what a runtime image does without, clears setuid bits and
// measures the tree.
func (bd *build) trim(ctx context.Context) error {
	if err := trim(bd.tree); err != nil {
		return err
	}
	// /data is where a box mounts the data folders its run names; the
	// image is read-only, so the directory must be in it.
	if err := os.MkdirAll(filepath.Join(bd.tree, "data"), 0o755); err != nil {
		return err
	}
	size, err := seal(bd.tree)
	bd.size = size
	bd.p.Status("tree is %s", mib(size))
	return err
}

// pack makes the erofs image: lz4hc (under TCG it cold-reads much faster
// than squashfs), every file owned by root and stamped with
// SOURCE_DATE_EPOCH, no xattrs (no file capabilities), and a UUID derived
// from the key, so the same tree gives the same bytes.
func (bd *build) pack(ctx context.Context) error {
	args := []string{"-zlz4hc", "-T" + bd.epoch(), "--all-root", "-x-1", "-U", uuidFromKey(bd.key), "--quiet", bd.image, bd.tree}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
				if fi, err := os.Stat(bd.image); err == nil {
					bd.p.Status("%s written (tree %s)", mib(fi.Size()), mib(bd.size))
				}
			}
		}
	}()
	err := run(ctx, bd.log, command{path: "mkfs.erofs", args: args})
	close(stop)
	wg.Wait()
	return err
}

func uuidFromKey(key string) string {
	h := sha256.Sum256([]byte("pybox image uuid " + key))
	x := fmt.Sprintf("%x", h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// meta describes the packed image.
func (bd *build) meta() (*Meta, error) {
	fi, err := os.Stat(bd.image)
	if err != nil {
		return nil, err
	}
	digest, err := fileSHA256(bd.image)
	if err != nil {
		return nil, err
	}
	installed, err := installedPackages(bd.tree)
	if err != nil {
		return nil, err
	}
	m := &Meta{
		Name: bd.r.Name, Digest: digest, Size: fi.Size(), RecipeHash: bd.key, Python: bd.pyver, Suite: bd.r.Suite, Arch: bd.arch,
		Main: mainPackages(bd.r, bd.base, installed), AptPackages: bd.r.Apt, Wheels: bd.r.Wheels,
		BuiltAt: time.Now().UTC().Truncate(time.Second), TreeBytes: bd.size, Builder: BuilderVersion,
		Recipe: bd.r.redacted(), Checks: bd.checks(), Packages: installed,
		WarmFiles: bd.warmFiles, WarmBytes: bd.warmBytes, Preload: slices.Clone(bd.preload()),
		IndexPackages: bd.indexed, ThirdParty: bd.thirdParty,
	}
	for _, ip := range bd.indexed {
		if pipRequested(bd.r.Pip, ip.Name) {
			m.Main = append(m.Main, Package{Name: "pip:" + ip.Name, Version: ip.Version})
		}
	}
	if bd.base != nil {
		m.Base = &BaseRef{Name: bd.base.Name, Digest: bd.base.Digest}
		m.Stripped = append(m.Stripped, bd.base.Stripped...)
	}
	m.Stripped = sortedSet(append(m.Stripped, bd.stripped...))
	return m, nil
}
