package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrAddress is what every refusal of CheckAddress and Resolve wraps: the
// caller answers it as a refusal (403), not as a host it failed to reach.
var ErrAddress = errors.New("address refused")

// AddressError is an address CheckAddress refused, and why.
type AddressError struct {
	Addr netip.Addr
	// Class is what the address is: "loopback", "private",
	// "link-local", "cloud metadata", ...
	Class string
	// Never says that no server has such an address (unspecified,
	// multicast, broadcast): it is refused even when the user names it.
	Never bool
	what  string // the class in a sentence: "a loopback address"
}

func (e *AddressError) Error() string {
	if !e.Addr.IsValid() {
		return "the zero address is not an IP address: refused"
	}
	if e.Never {
		return fmt.Sprintf("%s is %s, which no server has: refused", e.Addr, e.what)
	}
	lit := e.Addr.String()
	if e.Addr.Is6() {
		lit = "[" + lit + "]"
	}
	return fmt.Sprintf("%s is %s: refused; to open it, name the address itself in --allow-net (as %s or %s:PORT)", e.Addr, e.what, lit, lit)
}

// Unwrap makes every AddressError an ErrAddress.
func (e *AddressError) Unwrap() error { return ErrAddress }

// addrClass is a range of addresses a box may not reach unless the user
// names the address.
type addrClass struct {
	prefix netip.Prefix
	name   string // AddressError.Class
	what   string // the class in a sentence
	never  bool   // AddressError.Never
}

func class(prefix, name, what string, never bool) addrClass {
	return addrClass{netip.MustParsePrefix(prefix), name, what, never}
}

// classes are the ranges CheckAddress refuses, the narrowest of
// overlapping ones first (a metadata address is link-local or private
// too). IPv6 outside 2000::/3 is refused as reserved after these (see
// classify), NAT64 and 6to4 addresses by the IPv4 address they embed.
var classes = []addrClass{
	class("0.0.0.0/8", "this network", `an address of "this network" (0.0.0.0/8)`, true),
	class("127.0.0.0/8", "loopback", "a loopback address", false),
	class("169.254.169.254/32", "cloud metadata", "the cloud metadata address", false),
	class("100.100.100.200/32", "cloud metadata", "a cloud metadata address", false),
	class("169.254.0.0/16", "link-local", "a link-local address", false),
	class("10.0.0.0/8", "private", "a private address", false),
	class("172.16.0.0/12", "private", "a private address", false),
	class("192.168.0.0/16", "private", "a private address", false),
	class("100.64.0.0/10", "shared", "a shared address of carrier-grade NAT (100.64.0.0/10)", false),
	class("192.0.0.0/24", "protocol assignment", "an address reserved for protocol assignments (192.0.0.0/24)", false),
	class("192.0.2.0/24", "documentation", "a documentation address", false),
	class("198.51.100.0/24", "documentation", "a documentation address", false),
	class("203.0.113.0/24", "documentation", "a documentation address", false),
	class("198.18.0.0/15", "benchmarking", "a benchmarking address (198.18.0.0/15)", false),
	class("224.0.0.0/4", "multicast", "a multicast address", true),
	class("255.255.255.255/32", "broadcast", "the broadcast address", true),
	class("240.0.0.0/4", "reserved", "a reserved address (240.0.0.0/4)", false),

	class("::/128", "unspecified", "the unspecified address", true),
	class("::1/128", "loopback", "a loopback address", false),
	class("::ffff:0:0:0/96", "reserved", "an IPv4-translated address (::ffff:0:0:0/96)", false),
	class("::/96", "reserved", "a deprecated IPv4-compatible address (::/96)", false),
	class("64:ff9b:1::/48", "private", "a local-use NAT64 address (64:ff9b:1::/48)", false),
	class("fd00:ec2::254/128", "cloud metadata", "a cloud metadata address", false),
	class("fc00::/7", "private", "a private (unique local) address", false),
	class("fe80::/10", "link-local", "a link-local address", false),
	class("fec0::/10", "private", "a site-local address", false),
	class("ff00::/8", "multicast", "a multicast address", true),
	class("2001::/32", "reserved", "a Teredo tunnel address", false),
	class("2001:2::/48", "benchmarking", "a benchmarking address (2001:2::/48)", false),
	class("2001:db8::/32", "documentation", "a documentation address", false),
	class("3fff::/20", "documentation", "a documentation address", false),
}

var (
	nat64         = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour     = netip.MustParsePrefix("2002::/16")
	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// classify is the class of a, if CheckAddress refuses it. a is unmapped
// first, and its zone ignored.
func classify(a netip.Addr) (addrClass, bool) {
	a = a.Unmap().WithZone("")
	for _, c := range classes {
		if c.prefix.Contains(a) {
			return c, true
		}
	}
	if !a.Is6() {
		return addrClass{}, false
	}
	b := a.As16()
	var v4 netip.Addr
	var via string
	switch {
	case nat64.Contains(a):
		v4, via = netip.AddrFrom4([4]byte(b[12:16])), "NAT64"
	case sixToFour.Contains(a):
		v4, via = netip.AddrFrom4([4]byte(b[2:6])), "6to4"
	case !globalUnicast.Contains(a):
		return addrClass{name: "reserved", what: "a reserved address (outside 2000::/3)"}, true
	default:
		return addrClass{}, false
	}
	c, ok := classify(v4)
	if !ok {
		return addrClass{}, false
	}
	return addrClass{name: c.name, what: fmt.Sprintf("a %s address of %s, which is %s", via, v4, c.what), never: c.never}, true
}

// CheckAddress says whether a box may connect to ip. It refuses the
// addresses of the host itself and of the networks around it, which the
// user did not mean to open by naming a host on the internet: loopback,
// private, link-local, cloud metadata (169.254.169.254, fd00:ec2::254,
// 100.100.100.200), carrier-grade NAT, reserved, documentation and
// benchmarking ranges, and the NAT64 and 6to4 addresses of any of these.
// An IPv4-mapped IPv6 address is checked as the IPv4 address it maps,
// and a zone is ignored.
//
// named says that the user named ip itself (Entry.NamedAddress): then
// ip is allowed, unless no server has such an address (unspecified,
// multicast, broadcast), which is refused always. The error is an
// *AddressError.
func CheckAddress(ip netip.Addr, named bool) error {
	if !ip.IsValid() {
		return &AddressError{Class: "invalid", Never: true}
	}
	c, ok := classify(ip)
	if !ok || named && !c.never {
		return nil
	}
	return &AddressError{Addr: ip.Unmap().WithZone(""), Class: c.name, Never: c.never, what: c.what}
}

// Resolve is the addresses of host a box may connect to: host's own if
// it is an IP address, else those lookup gives (on the host, not in the
// box), each checked by CheckAddress, named if the user named that very
// address in allow (on whatever port). The addresses come unmapped,
// without zones, each once, in lookup's order; the caller dials these
// and never resolves host again, so that a name that resolves to a
// public address for the check and to loopback for the dial reaches
// nothing.
//
// Resolve does not check that host is on allow: Allow.Allows does,
// before. When every address is refused the error says which and why,
// and wraps ErrAddress and each *AddressError; a failed lookup is
// wrapped as it is.
func Resolve(ctx context.Context, lookup func(ctx context.Context, host string) ([]netip.Addr, error), host string, allow Allow) ([]netip.Addr, error) {
	h, lit, err := canonicalHost(host)
	if err != nil {
		return nil, err
	}
	addrs := []netip.Addr{lit}
	if !lit.IsValid() {
		addrs, err = lookup(ctx, h)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", h, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: it has no address", h)
		}
	}
	var ok []netip.Addr
	var refused []error
	seen := make(map[netip.Addr]bool)
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if seen[a] {
			continue
		}
		seen[a] = true
		if err := CheckAddress(a, allow.names(a)); err != nil {
			refused = append(refused, err)
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		return nil, &refusedError{host: h, literal: lit.IsValid(), errs: refused}
	}
	return ok, nil
}

// names says whether the user named a itself.
func (a Allow) names(ip netip.Addr) bool {
	for _, e := range a.entries {
		if e.NamedAddress(ip) {
			return true
		}
	}
	return false
}

// refusedError is Resolve's error when it refused every address of a
// host.
type refusedError struct {
	host    string
	literal bool // the host is the address itself
	errs    []error
}

func (e *refusedError) Error() string {
	if e.literal && len(e.errs) == 1 {
		return e.errs[0].Error()
	}
	var list []string
	var open string
	for _, err := range e.errs {
		var ae *AddressError
		if !errors.As(err, &ae) {
			list = append(list, err.Error())
			continue
		}
		if ae.Addr.IsValid() {
			list = append(list, fmt.Sprintf("%s (%s)", ae.Addr, ae.Class))
		} else {
			list = append(list, "an invalid address")
		}
		if !ae.Never && open == "" {
			open = ae.Addr.String()
			if ae.Addr.Is6() {
				open = "[" + open + "]"
			}
		}
	}
	s := fmt.Sprintf("%s resolves only to addresses a box may not reach: %s", e.host, strings.Join(list, ", "))
	if open != "" {
		s += fmt.Sprintf("; to open one, name the address itself in --allow-net as well as the host (as --allow-net %s,%s)", e.host, open)
	}
	return s
}

// Unwrap is every refusal: each an *AddressError, and so ErrAddress.
func (e *refusedError) Unwrap() []error { return e.errs }
