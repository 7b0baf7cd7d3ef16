//go:build linux

package box

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"pybox/shared/mountinfo"
	"pybox/shared/wire"
)

// self is the calling thread's /proc directory: capabilities,
// no_new_privs and seccomp are per thread, and box-init's checks must
// see the thread that will exec.
const self = "/proc/thread-self"

// boxMounts are the only mount points the program may see.
var boxMounts = func() map[string]bool {
	m := map[string]bool{"/": true, "/tmp": true, "/dev": true, "/dev/shm": true, "/proc": true}
	for _, d := range devices {
		m["/dev/"+d] = true
	}
	for _, pm := range procMasks {
		m["/proc/"+pm.path] = true
	}
	return m
}()

// checkPosture looks at what the program is about to inherit. Every
// departure from the sealed box is a problem, and any problem means the
// program does not run.
func checkPosture(cfg childConfig) wire.Posture {
	var p wire.Posture
	problem := func(format string, args ...any) { p.Problems = append(p.Problems, fmt.Sprintf(format, args...)) }

	status, err := readStatus(self + "/status")
	if err != nil {
		problem("read status: %v", err)
	}
	p.CapEff = status["CapEff"]
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if v, err := strconv.ParseUint(status[set], 16, 64); err != nil || v != 0 {
			problem("%s is %q, want 0", set, status[set])
		}
	}
	p.NoNewPrivs = status["NoNewPrivs"] == "1"
	if !p.NoNewPrivs {
		problem("no_new_privs is not set")
	}
	p.Seccomp, _ = strconv.Atoi(status["Seccomp"])
	if p.Seccomp != 2 {
		problem("seccomp mode is %q, want 2 (filter)", status["Seccomp"])
	}
	for _, ids := range []struct{ key, want string }{{"Uid", strconv.Itoa(cfg.UID)}, {"Gid", strconv.Itoa(cfg.GID)}} {
		for _, id := range strings.Fields(status[ids.key]) {
			if id != ids.want {
				problem("%s is %q, want %s throughout", ids.key, status[ids.key], ids.want)
				break
			}
		}
	}
	if g := status["Groups"]; g != "" {
		problem("supplementary groups %q, want none", g)
	}

	p.OpenFDs, err = inheritedFDs()
	if err != nil {
		problem("list descriptors: %v", err)
	}
	if !slices.Equal(p.OpenFDs, []int{0, 1, 2}) {
		problem("descriptors %v survive exec, want only 0, 1, 2", p.OpenFDs)
	}

	p.ReadOnly = hasFlags("/", unix.ST_RDONLY)
	if !p.ReadOnly {
		problem("the root is writable")
	}
	if !hasFlags("/tmp", unix.ST_NOSUID|unix.ST_NODEV) {
		problem("/tmp is not nosuid,nodev")
	}

	p.Namespaces = newNamespaces(cfg.AgentNS)
	if len(p.Namespaces) != len(namespaces) {
		problem("new namespaces %v, want all of %v", p.Namespaces, namespaces)
	}

	for _, d := range cfg.Data {
		if !hasFlags("/data/"+d.Name, unix.ST_RDONLY|unix.ST_NOSUID|unix.ST_NODEV|unix.ST_NOEXEC) {
			problem("data folder %s is not read-only,nosuid,nodev,noexec", d.Name)
		}
	}
	extra, err := unexpectedMounts(self+"/mountinfo", cfg.Data)
	if err != nil {
		problem("read mountinfo: %v", err)
	}
	for _, m := range extra {
		problem("unexpected mount %s", wire.EscapeName(m))
	}
	p.OK = len(p.Problems) == 0
	return p
}

// readStatus reads the "Key:\tvalue" lines of a /proc status file.
func readStatus(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return map[string]string{}, err
	}
	defer f.Close()
	return parseStatus(bufio.NewScanner(f))
}

func parseStatus(sc *bufio.Scanner) (map[string]string, error) {
	m := map[string]string{}
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, sc.Err()
}

// inheritedFDs lists the descriptors that survive execve: those open
// without close-on-exec.
func inheritedFDs() ([]int, error) {
	entries, err := os.ReadDir(self + "/fd")
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if flags&unix.FD_CLOEXEC == 0 {
			fds = append(fds, fd)
		}
	}
	slices.Sort(fds)
	return fds, nil
}

func hasFlags(path string, flags int64) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Flags&flags == flags
}

// newNamespaces names the namespaces whose inode differs from the
// agent's.
func newNamespaces(agent map[string]uint64) []string {
	var fresh []string
	for _, ns := range namespaces {
		link, err := os.Readlink(self + "/ns/" + ns)
		if err != nil {
			continue
		}
		ino, ok := nsInode(link)
		if ok && agent[ns] != 0 && ino != agent[ns] {
			fresh = append(fresh, ns)
		}
	}
	return fresh
}

// nsInode reads the inode from a namespace link such as "net:[4026531840]".
func nsInode(link string) (uint64, bool) {
	_, rest, ok := strings.Cut(link, ":[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
	return n, err == nil
}

// unexpectedMounts lists the mount points in a mountinfo file that are
// not the box's own.
func unexpectedMounts(path string, data []dataMount) ([]string, error) {
	points, err := mountinfo.Read(path)
	var extra []string
	for _, mp := range points {
		if !boxMounts[mp] && !isDataMount(mp, data) {
			extra = append(extra, mp)
		}
	}
	return extra, err
}

// isDataMount says whether mp is /data, or a data folder the run named,
// mounted there.
func isDataMount(mp string, data []dataMount) bool {
	if len(data) > 0 && mp == "/data" {
		return true
	}
	for _, d := range data {
		if mp == "/data/"+d.Name {
			return true
		}
	}
	return false
}
