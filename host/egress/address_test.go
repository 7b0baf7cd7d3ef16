package egress

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestCheckAddress(t *testing.T) {
	for _, tc := range []struct {
		ip    string
		class string // "" if allowed
		never bool
	}{
		{"93.184.215.14", "", false},
		{"1.1.1.1", "", false},
		{"8.8.8.8", "", false},
		{"2606:4700:4700::1111", "", false},
		{"2a00:1450:4001:82b::200e", "", false},
		{"64:ff9b::93.184.215.14", "", false},
		{"2002:5db8:d70e::1", "", false}, // 6to4 of 93.184.215.14
		{"::ffff:93.184.215.14", "", false},
		{"100.63.255.255", "", false},
		{"100.128.0.0", "", false},
		{"172.15.255.255", "", false},
		{"172.32.0.0", "", false},
		{"192.169.0.0", "", false},
		{"169.253.255.255", "", false},
		{"223.255.255.255", "", false},

		{"0.0.0.0", "this network", true},
		{"0.1.2.3", "this network", true},
		{"127.0.0.1", "loopback", false},
		{"127.255.255.254", "loopback", false},
		{"::1", "loopback", false},
		{"::ffff:127.0.0.1", "loopback", false},
		{"10.0.0.1", "private", false},
		{"172.16.0.1", "private", false},
		{"172.31.255.255", "private", false},
		{"192.168.1.1", "private", false},
		{"::ffff:192.168.1.1", "private", false},
		{"fc00::1", "private", false},
		{"fd12:3456::1", "private", false},
		{"fec0::1", "private", false},
		{"169.254.0.1", "link-local", false},
		{"fe80::1", "link-local", false},
		{"fe80::1%eth0", "link-local", false},
		{"169.254.169.254", "cloud metadata", false},
		{"::ffff:169.254.169.254", "cloud metadata", false},
		{"fd00:ec2::254", "cloud metadata", false},
		{"100.100.100.200", "cloud metadata", false},
		{"100.64.0.1", "shared", false},
		{"100.127.255.255", "shared", false},
		{"224.0.0.1", "multicast", true},
		{"239.255.255.250", "multicast", true},
		{"ff02::1", "multicast", true},
		{"255.255.255.255", "broadcast", true},
		{"240.0.0.1", "reserved", false},
		{"::", "unspecified", true},
		{"192.0.2.1", "documentation", false},
		{"198.51.100.1", "documentation", false},
		{"203.0.113.1", "documentation", false},
		{"2001:db8::1", "documentation", false},
		{"3fff::1", "documentation", false},
		{"198.18.0.1", "benchmarking", false},
		{"192.0.0.8", "protocol assignment", false},
		{"64:ff9b::127.0.0.1", "loopback", false},
		{"64:ff9b::10.1.2.3", "private", false},
		{"64:ff9b::169.254.169.254", "cloud metadata", false},
		{"64:ff9b::224.0.0.1", "multicast", true},
		{"64:ff9b:1::a00:1", "private", false},
		{"2002:7f00:1::1", "loopback", false},
		{"2002:a9fe:a9fe::", "cloud metadata", false},
		{"::127.0.0.1", "reserved", false},
		{"::ffff:0:7f00:1", "reserved", false},
		{"100::1", "reserved", false},
		{"4000::1", "reserved", false},
		{"2001::1", "reserved", false},
	} {
		ip := netip.MustParseAddr(tc.ip)
		err := CheckAddress(ip, false)
		if tc.class == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.ip, err)
			}
			continue
		}
		var ae *AddressError
		if !errors.As(err, &ae) || ae.Class != tc.class || ae.Never != tc.never || !errors.Is(err, ErrAddress) {
			t.Errorf("%s: %#v; want class %q, never %v", tc.ip, err, tc.class, tc.never)
			continue
		}
		err = CheckAddress(ip, true)
		if tc.never != (err != nil) {
			t.Errorf("%s named: %v", tc.ip, err)
		}
	}
}

func TestCheckAddressSays(t *testing.T) {
	for ip, want := range map[string]string{
		"127.0.0.1":            "127.0.0.1 is a loopback address: refused; to open it, name the address itself in --allow-net (as 127.0.0.1 or 127.0.0.1:PORT)",
		"::ffff:10.0.0.1":      "10.0.0.1 is a private address: refused; to open it, name the address itself in --allow-net (as 10.0.0.1 or 10.0.0.1:PORT)",
		"fd00:ec2::254":        "fd00:ec2::254 is a cloud metadata address: refused; to open it, name the address itself in --allow-net (as [fd00:ec2::254] or [fd00:ec2::254]:PORT)",
		"64:ff9b::7f00:1":      "64:ff9b::7f00:1 is a NAT64 address of 127.0.0.1, which is a loopback address: refused",
		"255.255.255.255":      "255.255.255.255 is the broadcast address, which no server has: refused",
		"169.254.169.254":      "169.254.169.254 is the cloud metadata address: refused",
		"fe80::1%eth0":         "fe80::1 is a link-local address",
		"2002:a00:1:0:0:0:0:1": "2002:a00:1::1 is a 6to4 address of 10.0.0.1, which is a private address",
	} {
		err := CheckAddress(netip.MustParseAddr(ip), false)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v\nwant %s", ip, err, want)
		}
	}
	if err := CheckAddress(netip.Addr{}, true); err == nil || !errors.Is(err, ErrAddress) {
		t.Errorf("the zero address: %v", err)
	}
}

// lookupTable is a resolver of a fixed table.
func lookupTable(table map[string][]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		as, ok := table[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		var out []netip.Addr
		for _, a := range as {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
}

func TestResolve(t *testing.T) {
	lookup := lookupTable(map[string][]string{
		"public.example.com":  {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"mixed.example.com":   {"127.0.0.1", "93.184.215.14", "::ffff:93.184.215.14", "10.0.0.1"},
		"rebind.example.com":  {"127.0.0.1", "::1"},
		"private.example.com": {"10.0.0.5", "10.0.0.6"},
		"meta.example.com":    {"169.254.169.254"},
		"multi.example.com":   {"224.0.0.1"},
		"mapped.example.com":  {"::ffff:127.0.0.1"},
		"empty.example.com":   {},
		"zoned.example.com":   {"2606:4700::1%eth0"},
	})
	allow := mustAllow(t, "*.example.com,10.0.0.5:5432")
	ctx := context.Background()
	for _, tc := range []struct {
		host string
		want []string
		err  string
	}{
		{"public.example.com", []string{"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"}, ""},
		{"PUBLIC.example.com.", []string{"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"}, ""},
		{"mixed.example.com", []string{"93.184.215.14"}, ""},
		{"private.example.com", []string{"10.0.0.5"}, ""},
		{"zoned.example.com", []string{"2606:4700::1"}, ""},
		{"10.0.0.5", []string{"10.0.0.5"}, ""},
		{"93.184.215.14", []string{"93.184.215.14"}, ""},
		{"[2606:4700::1]", []string{"2606:4700::1"}, ""},
		{"rebind.example.com", nil, "rebind.example.com resolves only to addresses a box may not reach: 127.0.0.1 (loopback), ::1 (loopback); " +
			"to open one, name the address itself in --allow-net as well as the host (as --allow-net rebind.example.com,127.0.0.1)"},
		{"mapped.example.com", nil, "127.0.0.1 (loopback)"},
		{"meta.example.com", nil, "169.254.169.254 (cloud metadata)"},
		{"multi.example.com", nil, "224.0.0.1 (multicast)"},
		{"127.0.0.1", nil, "127.0.0.1 is a loopback address: refused"},
		{"10.0.0.6", nil, "10.0.0.6 is a private address"},
		{"empty.example.com", nil, "resolve empty.example.com: it has no address"},
		{"nx.example.com", nil, "resolve nx.example.com: no such host"},
		{"a_b.example.com", nil, `the host "a_b.example.com" has '_'`},
		{"[fe80::1%eth0]", nil, "zone"},
	} {
		got, err := Resolve(ctx, lookup, tc.host, allow)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Resolve(%s) = %v, %v; want %q", tc.host, got, err, tc.err)
			}
			if strings.Contains(tc.err, "(") && !errors.Is(err, ErrAddress) {
				t.Errorf("Resolve(%s): %v is not ErrAddress", tc.host, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Resolve(%s): %v", tc.host, err)
			continue
		}
		var want []netip.Addr
		for _, w := range tc.want {
			want = append(want, netip.MustParseAddr(w))
		}
		if !slices.Equal(got, want) {
			t.Errorf("Resolve(%s) = %v, want %v", tc.host, got, want)
		}
	}
	var ae *AddressError
	if _, err := Resolve(ctx, lookup, "rebind.example.com", allow); !errors.As(err, &ae) || ae.Class != "loopback" {
		t.Errorf("a refusal does not give its AddressError: %#v", err)
	}
	// An address the user named is not resolved: a literal needs no lookup.
	never := func(context.Context, string) ([]netip.Addr, error) {
		t.Fatal("lookup of a literal")
		return nil, nil
	}
	if _, err := Resolve(ctx, never, "10.0.0.5", allow); err != nil {
		t.Error(err)
	}
}
