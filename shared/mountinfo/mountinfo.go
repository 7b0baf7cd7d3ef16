package mountinfo

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// maxLine bounds one line of a mount table. A line holds two paths of at
// most PATH_MAX (4096) bytes each, escaped to up to four times that, and
// a few short fields: far less than this.
const maxLine = 1 << 20

// escapeLen is the length of one escape: a backslash and three octal
// digits.
const escapeLen = 4

// Read returns the mount points of the mount table at path, in its
// order, unescaped. On an error it returns what it read before it.
func Read(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Points(f)
}

// Points returns the mount point of each line of r, a mount table, in
// its order, unescaped. A line of fewer than five fields is passed over.
// On an error it returns what it read before it.
func Points(r io.Reader) ([]string, error) {
	var points []string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxLine)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		points = append(points, Unescape(fields[4]))
	}
	return points, sc.Err()
}

// Under returns the points that are dir or below it, in their order.
func Under(points []string, dir string) []string {
	var under []string
	for _, p := range points {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			under = append(under, p)
		}
	}
	return under
}

// Unescape undoes a mount table's octal escapes (\040 for a space). A
// backslash not followed by three octal digits of a byte stays as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+escapeLen <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+escapeLen], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += escapeLen - 1
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
