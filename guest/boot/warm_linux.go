package boot

import (
	"bufio"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WarmList is the file in an image that lists, one absolute path a line,
// the files Python reads on start and on the imports the image is for.
// The image builder writes it by running those imports and recording
// every module file and every mapped library.
const WarmList = "usr/share/pybox/warm.list"

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
	Complete bool // false when a budget ran out first
	Listed   bool // the image had a warm list
}

// Warm reads the files of an image that Python needs, so that they sit in
// the page cache before the first run. It runs in the agent's own cgroup:
// the pages are charged there, and a run's memory.peak carries only the
// pages that run caused. It stops at maxBytes or when deadline passes.
func Warm(root string, maxBytes int64, deadline time.Time) WarmResult {
	start := time.Now()
	files, listed := warmFiles(root)
	res := WarmResult{Complete: true, Listed: listed}
	buf := make([]byte, 1<<20)
	for _, f := range files {
		if res.Bytes >= maxBytes || time.Now().After(deadline) {
			res.Complete = false
			break
		}
		n, err := readAll(filepath.Join(root, f), buf)
		if err == nil {
			res.Files++
		}
		res.Bytes += n
	}
	res.Took = time.Since(start)
	return res
}

// warmFiles lists the image's files to warm, relative to root, from its
// warm list or else from the fallback patterns.
func warmFiles(root string) (files []string, listed bool) {
	if f, err := os.Open(filepath.Join(root, WarmList)); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			p := filepath.Clean("/" + strings.TrimSpace(sc.Text()))
			if p != "/" {
				files = append(files, strings.TrimPrefix(p, "/"))
			}
		}
		return files, true
	}
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
	return files, false
}

// readAll reads a file to the end through buf. Paths from a warm list are
// joined under the image root after cleaning, and the image is read-only
// and trusted (the user built it); a symlink in it resolves inside the
// agent's view, which holds nothing secret — still, only regular files
// are read, so a FIFO or device named in a list cannot block the boot.
func readAll(path string, buf []byte) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.CopyBuffer(io.Discard, onlyReader{f}, buf)
}

// onlyReader hides WriterTo so that CopyBuffer really reads through buf.
type onlyReader struct{ io.Reader }
