package image

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// dpkgOptions keep what a runtime never reads out of every tree from the
// start (dpkg never unpacks it). They stay in the tree's dpkg.cfg.d, so
// later layers get the same.
var dpkgOptions = []string{
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/locale/*",
	"path-include=/usr/share/locale/locale.alias",
	"path-exclude=/usr/share/lintian/*",
	// A build tree is thrown away after packing: no fsync per file.
	"force-unsafe-io",
}

// Hooks run by sh with the tree as $1; values come in through the
// environment (PYBOX_DEBS, PYBOX_APT), never spliced into the script.
const (
	// The .deb cache outside the tree is bind-mounted where apt keeps its
	// archives, so downloads survive the build and are not copied around.
	hookMountDebs  = `mkdir -p "$1/var/cache/apt/archives" && mount --bind "$PYBOX_DEBS" "$1/var/cache/apt/archives"`
	hookUmountDebs = `umount "$1/var/cache/apt/archives"`
	// The tree of a layered build has no apt of its own: run the host's
	// apt with mmdebstrap's configuration for the tree, and dpkg chrooted
	// into it, as mmdebstrap itself does for its install stage. Without
	// DPkg::Chroot-Directory dpkg would install into the host: refuse an
	// empty or root $1 outright. A package asked for whose direct
	// dependencies the base stripped (PYBOX_STRIPPED; a stand-in provides
	// them) gets those installed for real too: python3-scipy needs
	// liblbfgsb0 at run time, not the compilers behind python3-pythran.
	hookAptInstall = `[ -n "$1" ] && [ "$1" != / ] || exit 1; export APT_CONFIG="$MMDEBSTRAP_APT_CONFIG"; ` +
		`want="$PYBOX_APT"; ` +
		`for d in $(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances $PYBOX_APT | sed -n 's/^ *|*Depends: //p' | sort -u); do ` +
		`case " $PYBOX_STRIPPED " in *" $d "*) want="$want $d";; esac; done; ` +
		`echo "installing: $want"; ` +
		`apt-get -o Dir::Bin::dpkg=env -o DPkg::Options::=--unset=TMPDIR -o DPkg::Options::=dpkg -o DPkg::Options::=--force-unsafe-io ` +
		`-o DPkg::Chroot-Directory="$1" --yes --no-install-recommends install $want`
)

// bootstrapArgs are mmdebstrap's arguments for a root image: Debian's
// essential set plus the recipe's packages, for debArch (Debian's name of
// the architecture: amd64, arm64).
func bootstrapArgs(tree, sources, debArch string, apt []string) []string {
	args := []string{
		"--mode=root", "--variant=essential", "--format=directory", "--verbose", "--arch=" + debArch,
		"--include=" + strings.Join(apt, ","),
		`--aptopt=Acquire::Languages "none"`,
		"--skip=essential/unlink", // the .debs live in our cache: keep them
		"--setup-hook=" + hookMountDebs,
		"--customize-hook=" + hookUmountDebs,
	}
	for _, o := range dpkgOptions {
		args = append(args, "--dpkgopt="+o)
	}
	return append(args, "", tree, sources)
}

// layerArgs are mmdebstrap's arguments for installing packages into a
// tree that already holds the base image (variant custom installs
// nothing itself; the hook does). The hook's apt reads mmdebstrap's
// configuration, which holds debArch: it fetches that architecture's
// packages.
func layerArgs(tree, sources, debArch string) []string {
	return []string{
		"--mode=root", "--variant=custom", "--format=directory", "--verbose", "--arch=" + debArch,
		"--skip=check/empty",
		`--aptopt=Acquire::Languages "none"`,
		"--setup-hook=" + hookMountDebs,
		"--customize-hook=" + hookAptInstall,
		"--customize-hook=" + hookUmountDebs,
		"", tree, sources,
	}
}

// aptCounter follows mmdebstrap's verbose output (its own "I:" lines,
// apt's and dpkg's) and turns it into progress.
type aptCounter struct {
	mu              sync.Mutex
	phase           string
	fetched, total  int
	unpacked, setUp int
	notFound        []string
	noKey           []string
	onChange        func(string)
}

var (
	newlyInstalled = regexp.MustCompile(`^\d+ upgraded, (\d+) newly installed`)
	unableToLocate = regexp.MustCompile(`^E: Unable to locate package (\S+)`)
	noPubkey       = regexp.MustCompile(`NO_PUBKEY ([0-9A-F]+)`)
)

func (c *aptCounter) line(l string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.HasPrefix(l, "I: running "):
		// A hook's command line says nothing a person needs here.
		c.phase = "running hooks"
	case strings.HasPrefix(l, "I: "):
		c.phase = shorten(strings.TrimSuffix(strings.TrimPrefix(l, "I: "), "..."), 50)
	case strings.HasPrefix(l, "Get:"):
		c.fetched++
	case strings.HasPrefix(l, "Unpacking "):
		c.unpacked++
	case strings.HasPrefix(l, "Setting up "):
		c.setUp++
	default:
		if m := newlyInstalled.FindStringSubmatch(l); m != nil {
			c.total, _ = strconv.Atoi(m[1])
		} else if m := unableToLocate.FindStringSubmatch(l); m != nil {
			c.notFound = append(c.notFound, m[1])
		} else if m := noPubkey.FindStringSubmatch(l); m != nil && !slices.Contains(c.noKey, m[1]) {
			c.noKey = append(c.noKey, m[1])
		}
		return
	}
	if c.onChange != nil {
		c.onChange(c.summary())
	}
}

func (c *aptCounter) summary() string {
	s := c.phase
	if c.fetched > 0 {
		s += ", " + strconv.Itoa(c.fetched) + " fetched"
	}
	if c.unpacked > 0 || c.setUp > 0 {
		s += ", " + strconv.Itoa(c.unpacked) + " unpacked, " + strconv.Itoa(c.setUp) + " set up"
		if c.total > 0 {
			s += " (apt: " + strconv.Itoa(c.total) + " new)"
		}
	}
	return s
}
