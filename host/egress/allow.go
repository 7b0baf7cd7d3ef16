package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"pybox/shared/wire"
)

// defaultPorts are the ports of an entry that names none: HTTP and HTTPS.
var defaultPorts = []int{80, 443}

// Bounds of a DNS name (RFC 1035), in its text form without the
// trailing dot.
const (
	maxName  = 253
	maxLabel = 63
)

// forms says what ParseAllow accepts; every one of its errors ends so.
const forms = "each entry is HOST or HOST:PORT, where HOST is a DNS name (api.example.com), " +
	"*.DOMAIN for every subdomain of DOMAIN (*.example.com), an IPv4 address (203.0.113.7) " +
	"or an IPv6 address in brackets ([2001:db8::1]:443); a HOST alone allows ports 443 and 80"

// Allow is the user's list of the hosts and ports a box may reach, read
// by ParseAllow. Its zero value allows nothing.
type Allow struct {
	entries []Entry // sorted by Host, a name before its wildcard; each (Host, Wildcard) once
}

// Entry is one host of an Allow and its ports.
type Entry struct {
	// Host is a DNS name, lower-case and without a trailing dot; with
	// Wildcard, the domain whose subdomains are allowed (without the
	// "*."); with Literal, an IP address in its canonical form (IPv6
	// without brackets, an IPv4-mapped IPv6 address as IPv4).
	Host string
	// Wildcard allows every subdomain of Host, at any depth, and never
	// Host itself.
	Wildcard bool
	// Literal says that Host is an IP address.
	Literal bool
	// Ports are the ports allowed, ascending, each once.
	Ports []int
}

// NamedAddress says whether the user named ip itself: e is the literal
// of that address. Only such an address may be one that CheckAddress
// otherwise refuses (a loopback or private one).
func (e Entry) NamedAddress(ip netip.Addr) bool {
	if !e.Literal {
		return false
	}
	a, err := netip.ParseAddr(e.Host)
	return err == nil && a == ip.Unmap()
}

// String is e as ParseAllow reads it: the host alone for ports 443 and
// 80, HOST:PORT for each other port, joined by commas.
func (e Entry) String() string {
	h := e.Host
	if e.Literal && strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if e.Wildcard {
		h = "*." + h
	}
	var parts []string
	rest := e.Ports
	if slices.Contains(e.Ports, 80) && slices.Contains(e.Ports, 443) {
		parts = append(parts, h)
		rest = slices.DeleteFunc(slices.Clone(e.Ports), func(p int) bool { return p == 80 || p == 443 })
	}
	for _, p := range rest {
		parts = append(parts, h+":"+strconv.Itoa(p))
	}
	return strings.Join(parts, ",")
}

// ParseAllow reads the user's list: entries HOST[:PORT] separated by
// commas, nothing else (no spaces, no URLs). HOST is a DNS name
// (case-insensitive, a trailing dot ignored), *.DOMAIN for every
// subdomain of DOMAIN at any depth (never DOMAIN itself, and DOMAIN of
// two labels at least: *.com is refused), an IPv4 address, or an IPv6
// address in brackets. An entry without a port allows 443 and 80. Hosts
// named twice have their ports merged.
//
// A literal address that no server has (unspecified, multicast,
// broadcast) is refused: no connection to it can be meant.
func ParseAllow(s string) (Allow, error) {
	if s == "" {
		return Allow{}, errors.New("the list of hosts is empty: " + forms)
	}
	var es []Entry
	for i, raw := range strings.Split(s, ",") {
		e, err := parseEntry(raw, i+1)
		if err != nil {
			return Allow{}, err
		}
		es = append(es, e)
	}
	return Allow{entries: merge(es)}, nil
}

// parseEntry reads the n-th entry of a list (counted from 1).
func parseEntry(raw string, n int) (Entry, error) {
	if raw == "" {
		return Entry{}, fmt.Errorf("entry %d is empty (two commas, or a comma at an end): %s", n, forms)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("entry %q: %s; %s", raw, fmt.Sprintf(format, a...), forms)
	}
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return Entry{}, bad("it has whitespace: separate entries with commas only, as a.example.com,b.example.com")
		case c < 0x20 || c == 0x7f:
			return Entry{}, bad("it has the control character %q", c)
		case c >= 0x80:
			return Entry{}, bad("it is not ASCII: give an international name in its xn-- (punycode) form, as xn--bcher-kva.example")
		}
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		host := raw[i+3:]
		if j := strings.IndexAny(host, "/?#"); j >= 0 {
			host = host[:j]
		}
		if j := strings.LastIndexByte(host, '@'); j >= 0 {
			host = host[j+1:]
		}
		return Entry{}, bad("give a host, not a URL: %s", host)
	}
	if strings.ContainsAny(raw, "/?#") {
		return Entry{}, bad("it has a path: give a host, not a URL")
	}
	if strings.Contains(raw, "@") {
		return Entry{}, bad("it has a user name: give the host alone")
	}

	host, port := raw, ""
	switch {
	case strings.HasPrefix(raw, "["):
		end := strings.IndexByte(raw, ']')
		if end < 0 {
			return Entry{}, bad("the [ of an IPv6 address has no ]")
		}
		host = raw[1:end]
		switch rest := raw[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			port = rest[1:]
			if port == "" {
				return Entry{}, bad("the : is not followed by a port")
			}
		default:
			return Entry{}, bad("%q after the ]: give [IPV6] or [IPV6]:PORT", rest)
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return Entry{}, bad("%q in brackets is not an IPv6 address", host)
		}
		if a.Zone() != "" {
			return Entry{}, bad("an IPv6 address with a zone (%%%s) names no server beyond this machine's link", a.Zone())
		}
		return literalEntry(a, port, bad)
	case strings.Count(raw, ":") > 1:
		if a, err := netip.ParseAddr(raw); err == nil {
			return Entry{}, bad("put an IPv6 address in brackets, as [%s] or [%s]:443", a, a)
		}
		return Entry{}, bad("it has more than one :")
	case strings.Contains(raw, ":"):
		i := strings.IndexByte(raw, ':')
		host, port = raw[:i], raw[i+1:]
		if port == "" {
			return Entry{}, bad("the : is not followed by a port")
		}
	}
	if host == "" {
		return Entry{}, bad("it names no host")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return literalEntry(a, port, bad)
	}
	ports := defaultPorts
	if port != "" {
		p, ok := parsePort(port)
		if !ok {
			return Entry{}, bad("port %q is not a number from 1 to 65535", port)
		}
		ports = []int{p}
	}
	switch {
	case host == "*" || host == "*.":
		return Entry{}, bad("* alone would allow every host: name the hosts, or *.DOMAIN for the subdomains of one")
	case strings.HasPrefix(host, "*."):
		if strings.Contains(host[2:], "*") {
			return Entry{}, bad("a wildcard is only the whole first label, as *.example.com")
		}
		name, err := canonicalName(host[2:])
		if err != nil {
			return Entry{}, bad("the domain %q %v", host[2:], err)
		}
		if !strings.Contains(name, ".") {
			return Entry{}, bad("*.%s would allow every name of a top-level domain: give a domain of two labels at least, as *.example.com", name)
		}
		if len(name) > maxName-2 {
			return Entry{}, bad("the domain %q is too long to have a subdomain", name)
		}
		return Entry{Host: name, Wildcard: true, Ports: ports}, nil
	case strings.Contains(host, "*"):
		return Entry{}, bad("a wildcard is only the whole first label, as *.example.com")
	}
	name, err := canonicalName(host)
	if err != nil {
		return Entry{}, bad("the host %q %v", host, err)
	}
	return Entry{Host: name, Ports: ports}, nil
}

// literalEntry is the entry of address a with port (the default ports if
// empty).
func literalEntry(a netip.Addr, port string, bad func(string, ...any) error) (Entry, error) {
	a = a.Unmap()
	if c, ok := classify(a); ok && c.never {
		return Entry{}, bad("%s is %s, which no server has", a, c.what)
	}
	ports := defaultPorts
	if port != "" {
		p, ok := parsePort(port)
		if !ok {
			return Entry{}, bad("port %q is not a number from 1 to 65535", port)
		}
		ports = []int{p}
	}
	return Entry{Host: a.String(), Literal: true, Ports: ports}, nil
}

// parsePort reads a port: decimal digits without a leading zero, 1 to
// 65535.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, n <= 65535
}

// canonicalName checks that s is a DNS name of host names and gives it
// lower-case, without its trailing dot: labels of 1 to 63 of a-z, 0-9
// and -, neither first nor last a -, 253 characters in all at most. A
// last label of digits alone (as in 127.1, or 1.2.3.04) is refused: no
// top-level domain is numeric, and some resolvers read such a name as an
// IPv4 address. The error completes a sentence that names s.
func canonicalName(s string) (string, error) {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return "", errors.New("is not ASCII: give an international name in its xn-- (punycode) form")
		}
	}
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" {
		return "", errors.New("is empty")
	}
	if len(s) > maxName {
		return "", fmt.Errorf("is %d characters long; a DNS name has at most %d", len(s), maxName)
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" {
			return "", errors.New("has an empty label (two dots, or a dot at the start)")
		}
		if len(l) > maxLabel {
			return "", fmt.Errorf("has a label of %d characters; a label has at most %d", len(l), maxLabel)
		}
		for i := 0; i < len(l); i++ {
			if c := l[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", fmt.Errorf("has %q: a DNS name has only letters a-z, digits, - and dots", c)
			}
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("has the label %q, which begins or ends with -", l)
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || len(last) > 2 && last[:2] == "0x" && strings.Trim(last[2:], "0123456789abcdef") == "" {
		return "", errors.New("looks like an IP address, but is not one in dotted-decimal form (four numbers 0-255, no leading zeros)")
	}
	return s, nil
}

// canonicalHost is host as a client named it, in canonical form: a DNS
// name by canonicalName, or an IP address (IPv6 with or without
// brackets, without a zone) as netip writes it, IPv4-mapped as IPv4,
// and that address.
func canonicalHost(host string) (string, netip.Addr, error) {
	lit := host
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		lit = host[1 : len(host)-1]
		if a, err := netip.ParseAddr(lit); err != nil || !a.Is6() {
			return "", netip.Addr{}, fmt.Errorf("%q in brackets is not an IPv6 address", lit)
		}
	}
	if a, err := netip.ParseAddr(lit); err == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("the address %q has a zone", host)
		}
		a = a.Unmap()
		return a.String(), a, nil
	}
	n, err := canonicalName(host)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("the host %q %v", host, err)
	}
	return n, netip.Addr{}, nil
}

// merge sorts es and merges the ports of entries of the same host.
func merge(es []Entry) []Entry {
	slices.SortStableFunc(es, compareEntries)
	var out []Entry
	for _, e := range es {
		if n := len(out); n > 0 && out[n-1].Host == e.Host && out[n-1].Wildcard == e.Wildcard {
			out[n-1].Ports = append(out[n-1].Ports, e.Ports...)
			continue
		}
		e.Ports = slices.Clone(e.Ports)
		out = append(out, e)
	}
	for i := range out {
		slices.Sort(out[i].Ports)
		out[i].Ports = slices.Compact(out[i].Ports)
	}
	return out
}

func compareEntries(a, b Entry) int {
	if c := strings.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	switch {
	case a.Wildcard == b.Wildcard:
		return 0
	case a.Wildcard:
		return 1
	}
	return -1
}

// Entries are a's entries: sorted by host, a name before its wildcard,
// each host once with all its ports. They are a copy.
func (a Allow) Entries() []Entry {
	out := make([]Entry, len(a.entries))
	for i, e := range a.entries {
		e.Ports = slices.Clone(e.Ports)
		out[i] = e
	}
	return out
}

// String is a in the canonical form ParseAllow reads back to the same
// Allow: its entries sorted, joined by commas. It is "" for an Allow
// that allows nothing.
func (a Allow) String() string {
	parts := make([]string, 0, len(a.entries))
	for _, e := range a.entries {
		parts = append(parts, e.String())
	}
	return strings.Join(parts, ",")
}

// Allows says whether a allows a connection to host (as a client named
// it: a DNS name, case-insensitive, a trailing dot ignored, or an IP
// address, IPv6 with or without brackets) on port, and by which entry:
// the host's own if it has one that allows the port, else the narrowest
// wildcard that does. A host that is no valid name or address is allowed
// by nothing.
func (a Allow) Allows(host string, port int) (Entry, bool) {
	h, _, err := canonicalHost(host)
	if err != nil || port < 1 || port > 65535 {
		return Entry{}, false
	}
	best := -1
	for i, e := range a.entries {
		if !slices.Contains(e.Ports, port) {
			continue
		}
		if !e.Wildcard && e.Host == h {
			best = i
			break
		}
		if e.Wildcard && strings.HasSuffix(h, "."+e.Host) && (best < 0 || len(e.Host) > len(a.entries[best].Host)) {
			best = i
		}
	}
	if best < 0 {
		return Entry{}, false
	}
	e := a.entries[best]
	e.Ports = slices.Clone(e.Ports)
	return e, true
}

// Ports are the ports a's entries name, each once, in order, at most
// wire.MaxNetPorts (the lowest): those a box takes connections on
// straight from clients that ignore its proxy.
func (a Allow) Ports() []int {
	var ports []int
	for _, e := range a.entries {
		ports = append(ports, e.Ports...)
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	return ports[:min(len(ports), wire.MaxNetPorts)]
}

// AllowsName says whether a allows host on some port: whether a box's
// resolver may give it an address.
func (a Allow) AllowsName(host string) bool {
	for _, e := range a.entries {
		for _, p := range e.Ports {
			if _, ok := a.Allows(host, p); ok {
				return true
			}
		}
	}
	return false
}

// Narrow is sub, if a allows everything sub does: a call may ask for
// fewer hosts and ports than the user allowed, never more. Each name and
// address of sub must be allowed by a on each of its ports, and each
// wildcard of sub must be one of a's, or a subdomain of one, with the
// port. The error names the first entry of sub that a does not cover.
func (a Allow) Narrow(sub Allow) (Allow, error) {
	for _, e := range sub.entries {
		for _, p := range e.Ports {
			if a.covers(e, p) {
				continue
			}
			one := Entry{Host: e.Host, Wildcard: e.Wildcard, Literal: e.Literal, Ports: []int{p}}
			if len(a.entries) == 0 {
				return Allow{}, fmt.Errorf("%s is not allowed: this server allows no network", one)
			}
			return Allow{}, fmt.Errorf("%s is not allowed by this server, which allows %s: a call may name only hosts and ports among those", one, a)
		}
	}
	return Allow{entries: sub.Entries()}, nil
}

// covers says whether a allows what e allows on port p.
func (a Allow) covers(e Entry, p int) bool {
	if !e.Wildcard {
		_, ok := a.Allows(e.Host, p)
		return ok
	}
	for _, w := range a.entries {
		if w.Wildcard && (e.Host == w.Host || strings.HasSuffix(e.Host, "."+w.Host)) && slices.Contains(w.Ports, p) {
			return true
		}
	}
	return false
}
