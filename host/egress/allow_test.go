package egress

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseAllowReads(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"api.example.com", "api.example.com"},
		{"API.Example.COM.", "api.example.com"},
		{"api.example.com:8443", "api.example.com:8443"},
		{"api.example.com:443", "api.example.com:443"},
		{"api.example.com:443,api.example.com:80", "api.example.com"},
		{"api.example.com,api.example.com:8080,api.example.com:443", "api.example.com,api.example.com:8080"},
		{"b.example.com,a.example.com", "a.example.com,b.example.com"},
		{"*.example.com,example.com", "example.com,*.example.com"},
		{"*.Example.com.:8443", "*.example.com:8443"},
		{"*.a.b.example.com", "*.a.b.example.com"},
		{"localhost", "localhost"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"203.0.113.7", "203.0.113.7"},
		{"127.0.0.1:5432", "127.0.0.1:5432"},
		{"[2001:DB8::1]:443", "[2001:db8::1]:443"},
		{"[2001:db8:0::1]", "[2001:db8::1]"},
		{"[::ffff:10.0.0.1]:22", "10.0.0.1:22"},
		{"[::1]:8080", "[::1]:8080"},
		{"a-b.c0.example:65535,a-b.c0.example:1", "a-b.c0.example:1,a-b.c0.example:65535"},
		{strings.Repeat("a", 63) + ".example", strings.Repeat("a", 63) + ".example"},
	} {
		a, err := ParseAllow(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got := a.String(); got != tc.want {
			t.Errorf("%s: String() = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseAllowEntries(t *testing.T) {
	a, err := ParseAllow("*.example.com:8443,example.com,[2001:db8::1]:22,203.0.113.7,example.com:8080")
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Host: "2001:db8::1", Literal: true, Ports: []int{22}},
		{Host: "203.0.113.7", Literal: true, Ports: []int{80, 443}},
		{Host: "example.com", Ports: []int{80, 443, 8080}},
		{Host: "example.com", Wildcard: true, Ports: []int{8443}},
	}
	if got := a.Entries(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Entries() = %+v\nwant %+v", got, want)
	}
	// Entries is a copy.
	a.Entries()[0].Ports[0] = 1
	if a.Entries()[0].Ports[0] != 22 {
		t.Error("Entries() shares its ports with the Allow")
	}
}

func TestParseAllowRefuses(t *testing.T) {
	long := strings.Repeat("a", 63) + "."
	for _, tc := range []struct{ in, want string }{
		{"", "the list of hosts is empty"},
		{"a.example.com,,b.example.com", "entry 2 is empty"},
		{"a.example.com,", "entry 2 is empty"},
		{",a.example.com", "entry 1 is empty"},
		{"a.example.com, b.example.com", `entry " b.example.com": it has whitespace`},
		{"a.example .com", "whitespace"},
		{"a.example.com\t", "whitespace"},
		{"a\x00.example.com", "control character"},
		{"bücher.example", "not ASCII: give an international name in its xn-- (punycode) form"},
		{"https://api.example.com/v1", `entry "https://api.example.com/v1": give a host, not a URL: api.example.com`},
		{"http://user@api.example.com", "give a host, not a URL: api.example.com"},
		{"api.example.com/v1", "it has a path"},
		{"api.example.com?x", "it has a path"},
		{"user@api.example.com", "it has a user name"},
		{"*", "* alone would allow every host"},
		{"*:443", "* alone would allow every host"},
		{"*.com", "*.com would allow every name of a top-level domain"},
		{"*.com.", "*.com would allow every name of a top-level domain"},
		{"*.*.example.com", "a wildcard is only the whole first label"},
		{"a.*.example.com", "a wildcard is only the whole first label"},
		{"*example.com", "a wildcard is only the whole first label"},
		{"*.", "* alone"},
		{"example.com:0", `port "0" is not a number from 1 to 65535`},
		{"example.com:65536", `port "65536"`},
		{"example.com:0443", `port "0443"`},
		{"example.com:+443", `port "+443"`},
		{"example.com:", "the : is not followed by a port"},
		{":443", "it names no host"},
		{"example.com:443:1", "more than one :"},
		{"2001:db8::1", "put an IPv6 address in brackets, as [2001:db8::1]"},
		{"[2001:db8::1", "has no ]"},
		{"[2001:db8::1]x", `"x" after the ]`},
		{"[2001:db8::1]:", "the : is not followed by a port"},
		{"[203.0.113.7]:443", "is not an IPv6 address"},
		{"[fe80::1%eth0]:22", "zone"},
		{"[]", "is not an IPv6 address"},
		{"0.0.0.0", "which no server has"},
		{"224.0.0.1:80", "multicast address, which no server has"},
		{"255.255.255.255", "broadcast"},
		{"[::]:80", "unspecified"},
		{"[ff02::1]", "multicast"},
		{"127.1", "looks like an IP address"},
		{"1.2.3.04", "looks like an IP address"},
		{"0x7f.0.0.1", "looks like an IP address"},
		{"a..example.com", "empty label"},
		{".example.com", "empty label"},
		{"a_b.example.com", `has '_'`},
		{"-a.example.com", "begins or ends with -"},
		{"a-.example.com", "begins or ends with -"},
		{strings.Repeat("a", 64) + ".example", "a label of 64 characters"},
		{strings.Repeat(long, 4) + "example", "characters long; a DNS name has at most 253"},
		{"*." + strings.Repeat(long, 3) + strings.Repeat("a", 60), "too long to have a subdomain"},
	} {
		_, err := ParseAllow(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.in, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), "each entry is HOST or HOST:PORT") {
			t.Errorf("%q: %v; it does not say the accepted forms", tc.in, err)
		}
	}
}

func TestAllows(t *testing.T) {
	a, err := ParseAllow("api.example.com,*.example.com:8443,*.files.example.com,db.example.net:5432,203.0.113.7:443,[2001:db8::1]:22,127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host  string
		port  int
		allow bool
		by    string // the entry's Host, with "*." if a wildcard
	}{
		{"api.example.com", 443, true, "api.example.com"},
		{"api.example.com", 80, true, "api.example.com"},
		{"API.example.COM.", 443, true, "api.example.com"},
		{"api.example.com", 8443, true, "*.example.com"},
		{"api.example.com", 8080, false, ""},
		{"a.b.example.com", 8443, true, "*.example.com"},
		{"example.com", 8443, false, ""},
		{"badexample.com", 8443, false, ""},
		{"x.badexample.com", 8443, false, ""},
		{"a.files.example.com", 443, true, "*.files.example.com"},
		{"a.b.files.example.com", 8443, true, "*.example.com"},
		{"files.example.com", 443, false, ""},
		{"files.example.com", 8443, true, "*.example.com"},
		{"db.example.net", 5432, true, "db.example.net"},
		{"db.example.net", 443, false, ""},
		{"203.0.113.7", 443, true, "203.0.113.7"},
		{"203.0.113.7", 80, false, ""},
		{"[::ffff:203.0.113.7]", 443, true, "203.0.113.7"},
		{"::ffff:203.0.113.7", 443, true, "203.0.113.7"},
		{"2001:db8::1", 22, true, "2001:db8::1"},
		{"[2001:DB8:0::1]", 22, true, "2001:db8::1"},
		{"[2001:db8::1%eth0]", 22, false, ""},
		{"127.0.0.1", 8080, true, "127.0.0.1"},
		{"127.0.0.2", 8080, false, ""},
		{"localhost", 8080, false, ""},
		{"api.example.com", 0, false, ""},
		{"api.example.com", 70000, false, ""},
		{"", 443, false, ""},
		{"*.example.com", 8443, false, ""},
		{"api.example.com:443", 443, false, ""},
		{"a_b.example.com", 8443, false, ""},
		{"0x7f.0.0.1", 8080, false, ""},
	} {
		e, ok := a.Allows(tc.host, tc.port)
		if ok != tc.allow {
			t.Errorf("Allows(%q, %d) = %v, want %v", tc.host, tc.port, ok, tc.allow)
			continue
		}
		by := e.Host
		if e.Wildcard {
			by = "*." + by
		}
		if ok && by != tc.by {
			t.Errorf("Allows(%q, %d) by %s, want %s", tc.host, tc.port, by, tc.by)
		}
	}
	if _, ok := (Allow{}).Allows("example.com", 443); ok {
		t.Error("the zero Allow allows something")
	}
}

func TestNamedAddress(t *testing.T) {
	a, err := ParseAllow("10.0.0.5:5432,[fd00::1],db.example.com")
	if err != nil {
		t.Fatal(err)
	}
	es := a.Entries()
	for _, tc := range []struct {
		ip    string
		named bool
	}{
		{"10.0.0.5", true},
		{"::ffff:10.0.0.5", true},
		{"10.0.0.6", false},
		{"fd00::1", true},
		{"fd00::1%eth0", false},
		{"fd00::2", false},
	} {
		named := false
		for _, e := range es {
			named = named || e.NamedAddress(netip.MustParseAddr(tc.ip))
		}
		if named != tc.named {
			t.Errorf("%s named: %v, want %v", tc.ip, named, tc.named)
		}
	}
	if (Entry{Host: "10.0.0.5"}).NamedAddress(netip.MustParseAddr("10.0.0.5")) {
		t.Error("a name that is no Literal names an address")
	}
}

func TestNarrow(t *testing.T) {
	server, err := ParseAllow("api.example.com,*.example.com:8443,*.cdn.example.net,203.0.113.7:22,[2001:db8::1]")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ sub, want string }{
		{"api.example.com", ""},
		{"api.example.com:443", ""},
		{"API.example.com.:80", ""},
		{"x.example.com:8443", ""},
		{"*.example.com:8443", ""},
		{"*.a.example.com:8443", ""},
		{"*.cdn.example.net", ""},
		{"*.img.cdn.example.net:443", ""},
		{"a.cdn.example.net,203.0.113.7:22", ""},
		{"[2001:db8::1]:443", ""},
		{"api.example.com:8080", `api.example.com:8080 is not allowed by this server, which allows ` + server.String()},
		{"api.example.com:443,example.com:8443", "example.com:8443 is not allowed"},
		{"*.example.com", "*.example.com:80 is not allowed"},
		{"*.example.com:8443,*.example.org:8443", "*.example.org:8443 is not allowed"},
		{"*.com.example.net", "*.com.example.net:80 is not allowed"},
		{"*.example.net", "*.example.net:80 is not allowed"},
		{"cdn.example.net", "cdn.example.net:80 is not allowed"},
		{"203.0.113.7", "203.0.113.7:80 is not allowed"},
		{"203.0.113.8:22", "203.0.113.8:22 is not allowed"},
		{"[2001:db8::2]", "[2001:db8::2]:80 is not allowed"},
	} {
		sub, err := ParseAllow(tc.sub)
		if err != nil {
			t.Fatalf("%s: %v", tc.sub, err)
		}
		got, err := server.Narrow(sub)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Narrow(%s): %v", tc.sub, err)
		case tc.want == "" && got.String() != sub.String():
			t.Errorf("Narrow(%s) = %s", tc.sub, got)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Narrow(%s): %v; want %q", tc.sub, err, tc.want)
		}
	}
	if _, err := (Allow{}).Narrow(mustAllow(t, "example.com")); err == nil || !strings.Contains(err.Error(), "this server allows no network") {
		t.Errorf("narrowing nothing: %v", err)
	}
	if got, err := server.Narrow(Allow{}); err != nil || got.String() != "" {
		t.Errorf("Narrow to nothing = %q, %v", got, err)
	}
}

func mustAllow(t testing.TB, s string) Allow {
	t.Helper()
	a, err := ParseAllow(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// FuzzParseAllow: whatever the user writes, ParseAllow refuses it or
// reads an Allow whose String reads back to the same Allow, that allows
// each of its entries' hosts on their ports, and that narrows to itself.
func FuzzParseAllow(f *testing.F) {
	for _, s := range []string{
		"api.example.com", "*.example.com:8443,example.com", "[2001:db8::1]:443,203.0.113.7",
		"[::ffff:127.0.0.1]:80", "A.B.C.:1,a.b.c:65535", "*.com", "https://x.example/", "a,,b", "127.1",
		"xn--bcher-kva.example", "[fe80::1%25eth0]", "0.0.0.0", "*.*.x.y", "a.example.com, b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAllow(s)
		if err != nil {
			if !strings.Contains(err.Error(), "each entry is HOST or HOST:PORT") {
				t.Fatalf("%q: the error does not say the accepted forms: %v", s, err)
			}
			return
		}
		back, err := ParseAllow(a.String())
		if err != nil {
			t.Fatalf("%q read as %q, which does not read back: %v", s, a, err)
		}
		if !reflect.DeepEqual(back.Entries(), a.Entries()) {
			t.Fatalf("%q read as %q, which reads back as %q", s, a, back)
		}
		for _, e := range a.Entries() {
			if e.Host != strings.ToLower(e.Host) || strings.HasSuffix(e.Host, ".") || len(e.Ports) == 0 || !slices.IsSorted(e.Ports) {
				t.Fatalf("%q: entry %+v", s, e)
			}
			for _, p := range e.Ports {
				if p < 1 || p > 65535 {
					t.Fatalf("%q: port %d", s, p)
				}
				host := e.Host
				if e.Wildcard {
					host = "x." + host
				}
				if _, ok := a.Allows(host, p); !ok {
					t.Fatalf("%q does not allow %s:%d", s, host, p)
				}
			}
			if e.Wildcard {
				if _, ok := a.Allows(e.Host, e.Ports[0]); ok && !a.hasName(e.Host) {
					t.Fatalf("%q allows %s itself", s, e.Host)
				}
			}
		}
		if n, err := a.Narrow(a); err != nil || n.String() != a.String() {
			t.Fatalf("%q does not narrow to itself: %v", s, err)
		}
	})
}

// hasName says whether a allows name by an entry of its own, or by a
// wildcard of a domain above it.
func (a Allow) hasName(name string) bool {
	for _, e := range a.entries {
		if !e.Wildcard && e.Host == name || e.Wildcard && strings.HasSuffix(name, "."+e.Host) {
			return true
		}
	}
	return false
}
