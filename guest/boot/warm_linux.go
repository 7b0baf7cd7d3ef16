package boot

import (
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"pybox/guest/imagefs"
)

// WarmList is the file in an image that lists, one absolute path a line,
// the files Python reads on start and on the imports the image is for.
// The image builder writes it by running those imports and recording
// every module file and every mapped library.
const WarmList = "usr/share/pybox/warm.list"

// warmListBytes bounds the warm list: a data image's names some
// thousands of files, at well under a hundred bytes a line.
const warmListBytes = 4 << 20

// warmFallback is what an image without a list gets warmed: the
// interpreter and the modules every start imports.
var warmFallback = []string{
	"usr/bin/python3*",
	"usr/lib*/ld-linux*",
	"usr/lib/*-linux-gnu/ld-linux*",
	"usr/lib/*-linux-gnu/libc.so*",
	"usr/lib/*-linux-gnu/libm.so*",
	"usr/lib/*-linux-gnu/libz.so*",
	"usr/lib/*-linux-gnu/libexpat.so*",
	"usr/lib/python3.*/__pycache__",
	"usr/lib/python3.*/encodings/__pycache__",
}

// WarmResult says how much of an image Warm read.
type WarmResult struct {
	Files    int
	Bytes    int64
	Took     time.Duration
	Complete bool  // false when a budget ran out first
	Listed   bool  // the image had a warm list, and it was read
	ListErr  error // why the image's warm list (or its root) could not be read
}

// Warm reads the files of an image that Python needs, so that they sit in
// the page cache before the first run. It runs in the agent's own cgroup:
// the pages are charged there, and a run's memory.peak carries only the
// pages that run caused. It stops at maxBytes or when deadline passes.
//
// Every file is read through imagefs, and one the image has as a link, a
// FIFO, a device or larger than what is left of maxBytes is skipped:
// warming is best effort, and must not keep PID 1 reading.
func Warm(root string, maxBytes int64, deadline time.Time) WarmResult {
	start := time.Now()
	img, err := imagefs.Open(root)
	if err != nil {
		return WarmResult{ListErr: err} // nothing of it can be read
	}
	defer img.Close()
	files, listed, listErr := warmFiles(img, root)
	res := WarmResult{Complete: true, Listed: listed, ListErr: listErr}
	buf := make([]byte, 1<<20)
	for _, f := range files {
		if res.Bytes >= maxBytes || time.Now().After(deadline) {
			res.Complete = false
			break
		}
		n, err := img.Copy(io.Discard, f, maxBytes-res.Bytes, buf)
		if err == nil {
			res.Files++
		}
		if errors.Is(err, imagefs.ErrTooLarge) {
			res.Complete = false // the budget left did not hold this file
		}
		res.Bytes += n
	}
	res.Took = time.Since(start)
	return res
}

// warmFiles lists the image's files to warm, relative to root: those of
// its warm list, or else the fallback patterns'. A warm list that is
// there but not a plain file is not used, and listErr says why.
func warmFiles(img *imagefs.Root, root string) (files []string, listed bool, listErr error) {
	files, err := readWarmList(img)
	switch {
	case err == nil:
		return files, true, nil
	case errors.Is(err, fs.ErrNotExist):
		return fallbackFiles(root), false, nil
	}
	return fallbackFiles(root), false, err
}

// readWarmList reads the image's WarmList, each path cleaned under the
// image's root.
func readWarmList(img *imagefs.Root) ([]string, error) {
	b, err := img.ReadFile(WarmList, warmListBytes)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, l := range strings.Split(string(b), "\n") {
		p := filepath.Clean("/" + strings.TrimSpace(l))
		if p != "/" {
			files = append(files, strings.TrimPrefix(p, "/"))
		}
	}
	return files, nil
}

// fallbackFiles lists the regular files the fallback patterns match. The
// patterns are matched with the agent's own file functions, which follow
// links: only names come of them, and each is read through imagefs like
// any other.
func fallbackFiles(root string) []string {
	var files []string
	for _, g := range warmFallback {
		matches, _ := filepath.Glob(filepath.Join(root, g))
		for _, m := range matches {
			_ = filepath.WalkDir(m, func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					rel, _ := filepath.Rel(root, path)
					files = append(files, rel)
				}
				return nil
			})
		}
	}
	return files
}
