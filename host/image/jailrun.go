package image

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"pybox/host/jail"
)

// buildUser is the uid and gid of a build's jailed programs: the
// overflow id, "nobody", which owns no file of this machine.
const buildUser = 65534

// jailRun is how a program runs in a build jail.
type jailRun struct {
	network bool        // the host's network (pip); else none at all
	binds   []jail.Bind // beyond the tree, read-only
	env     []string
	onLine  func(string)
}

func writableList(binds []jail.Bind) string {
	var w []string
	for _, b := range binds {
		if b.Write {
			w = append(w, b.Jail)
		}
	}
	if len(w) == 0 {
		return "nothing"
	}
	return strings.Join(w, " ")
}

// python3 runs the tree's python3: chrooted, as root, while the tree
// holds Debian's code only; once it holds code from elsewhere (a wheel,
// a package from an index, its own or its base's), in a build jail with
// no network, /tmp and the tree's directories writable writable (lent to
// the jail's user for the run). Python runs a site directory's .pth files
// as it starts, so no Python may run as root in such a tree.
func (bd *build) python3(ctx context.Context, onLine func(string), env, writable []string, args ...string) error {
	if !bd.thirdParty {
		return bd.inTree(ctx, onLine, env, "/usr/bin/python3", args...)
	}
	binds, giveBack, err := bd.lend(writable)
	defer giveBack()
	if err != nil {
		return err
	}
	return bd.inJail(ctx, jailRun{binds: binds, env: env, onLine: onLine}, "/usr/bin/python3", args...)
}

// lend makes the tree's /tmp and dirs writable binds of a jail, and gives
// dirs (and all in them) to the jail's user until giveBack gives them
// back to root.
func (bd *build) lend(dirs []string) (binds []jail.Bind, giveBack func(), err error) {
	tmp := filepath.Join(bd.tree, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, func() {}, err
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		return nil, func() {}, err
	}
	binds = []jail.Bind{{Host: tmp, Jail: "/tmp", Write: true}}
	var lent []string
	giveBack = func() {
		for _, d := range lent {
			if err := chownTree(d, 0); err != nil {
				bd.p.Say("%v", err)
			}
		}
	}
	for _, d := range dirs {
		host := filepath.Join(bd.tree, d)
		if err := os.MkdirAll(host, 0o755); err != nil {
			return nil, giveBack, err
		}
		lent = append(lent, host)
		if err := chownTree(host, buildUser); err != nil {
			return nil, giveBack, err
		}
		binds = append(binds, jail.Bind{Host: host, Jail: d, Write: true})
	}
	return binds, giveBack, nil
}

// chownTree gives dir and everything in it to id (links themselves, not
// what they point to).
func chownTree(dir string, id int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, id, id)
	})
}
