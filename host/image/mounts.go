package image

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A build tree has mounts in it while mmdebstrap runs (/proc, /sys, /dev
// nodes, and our bind mount of the .deb cache). A build that is killed can
// leave them. Deleting such a tree would reach into the host's /dev or
// the cache, so every removal first detaches what is mounted below the
// tree and refuses to go on if anything is left.

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == real || strings.HasPrefix(mp, real+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount at or below dir.
func unmountUnder(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, mp := range mps {
		detach(mp)
	}
	left, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("still mounted: %s", strings.Join(left, ", "))
	}
	return nil
}

// removeTree unmounts what is below dir, then deletes it.
func removeTree(dir string) error {
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		return nil
	}
	if err := unmountUnder(dir); err != nil {
		return fmt.Errorf("image: not removing %s: %w (unmount them, then delete it)", dir, err)
	}
	return os.RemoveAll(dir)
}
