package egress

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

// recordingConn keeps a copy of every byte written to it.
type recordingConn struct {
	net.Conn
	mu      sync.Mutex
	written []byte
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.written = append(c.written, p...)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// goClientHello starts a crypto/tls client for name over a pipe, reads
// its first flight with ReadClientHello, and gives what that returned,
// with every byte the client wrote.
func goClientHello(t testing.TB, name string) (raw []byte, sni string, written []byte, err error) {
	t.Helper()
	client, server := net.Pipe()
	rec := &recordingConn{Conn: client}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tls.Client(rec, &tls.Config{ServerName: name}).Handshake()
	}()
	raw, sni, err = ReadClientHello(server)
	server.Close()
	<-done
	client.Close()
	return raw, sni, rec.written, err
}

func TestReadClientHelloOfCryptoTLS(t *testing.T) {
	raw, sni, written, err := goClientHello(t, "files.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if sni != "files.example.com" {
		t.Errorf("sni = %q", sni)
	}
	if !bytes.Equal(raw, written) {
		t.Errorf("raw is %d bytes, not the %d the client wrote", len(raw), len(written))
	}
	// The same hello split into two records, at every point of its
	// handshake message, and with a byte after it that stays unread.
	msg := raw[recordHeader:]
	for _, cut := range []int{1, 3, 4, 5, 40, len(msg) / 2, len(msg) - 1} {
		stream := append(records(msg, cut, len(msg)-cut), 0x17)
		r := bytes.NewReader(stream)
		got, sni, err := ReadClientHello(r)
		if err != nil || sni != "files.example.com" || !bytes.Equal(got, stream[:len(stream)-1]) || r.Len() != 1 {
			t.Errorf("split at %d: %q, %v, %d bytes of %d, %d left", cut, sni, err, len(got), len(stream), r.Len())
		}
	}
	// A byte at a time, as a slow client sends it.
	if _, sni, err := ReadClientHello(iotest.OneByteReader(bytes.NewReader(raw))); err != nil || sni != "files.example.com" {
		t.Errorf("a byte at a time: %q, %v", sni, err)
	}
}

func TestReadClientHelloCut(t *testing.T) {
	raw, _, _, err := goClientHello(t, "files.example.com")
	if err != nil {
		t.Fatal(err)
	}
	msg := raw[recordHeader:]
	for _, stream := range [][]byte{raw, records(msg, 3, len(msg)-3), records(msg, 100, 200, len(msg)-300)} {
		for i := 0; i < len(stream); i++ {
			got, _, err := ReadClientHello(bytes.NewReader(stream[:i]))
			if i == 0 && err != io.EOF || i > 0 && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("cut at %d of %d: %v", i, len(stream), err)
			}
			if !bytes.Equal(got, stream[:i]) {
				t.Fatalf("cut at %d: raw is %d bytes", i, len(got))
			}
		}
	}
}

func TestReadClientHelloRefuses(t *testing.T) {
	msg := handshake(helloBody(sniExt(0, "a.example")))
	huge := handshake(helloBody(sniExt(0, "a.example"), ext(21, make([]byte, maxHello))))
	record := func(typ byte, version uint16, length int, data []byte) []byte {
		b := []byte{typ, byte(version >> 8), byte(version), byte(length >> 8), byte(length)}
		return append(b, data...)
	}
	var ones []byte
	for _, c := range msg {
		ones = append(ones, record(22, 0x0301, 1, []byte{c})...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"application data", record(23, 0x0303, 5, []byte("hello")), "does not begin with a TLS handshake record (its first byte is 23, not 22)"},
		{"plain HTTP", []byte("GET / HTTP/1.1\r\n\r\n"), "its first byte is 71"},
		{"SSL 3", record(22, 0x0300, len(msg), msg), "the version 0x0300"},
		{"version 0x0305", record(22, 0x0305, len(msg), msg), "the version 0x0305"},
		{"empty record", record(22, 0x0301, 0, nil), "a record is empty"},
		{"record over 16 KiB", record(22, 0x0301, maxRecord+1, nil), "declares 16385 bytes"},
		{"alert inside", append(record(22, 0x0301, 10, msg[:10]), record(21, 0x0303, 2, []byte{2, 40})...), "a record of type 21"},
		{"not a ClientHello", record(22, 0x0301, 4, []byte{2, 0, 0, 0}), "of type 2, not a ClientHello"},
		{"hello over 16 KiB", records(huge, maxRecord, len(huge)-maxRecord), "declares"},
		{"hello over 16 KiB, its header split", append(record(22, 0x0301, 2, []byte{1, 0}), record(22, 0x0301, maxRecord, make([]byte, maxRecord))...), "longer than 16384 bytes"},
		{"data after it in its record", record(22, 0x0301, len(msg)+1, append(slices.Clone(msg), 0)), "its last record goes on after it"},
		{"data after it in its second record", append(record(22, 0x0301, 10, msg[:10]), record(22, 0x0301, len(msg)-9, append(slices.Clone(msg[10:]), 0))...), "goes on after it"},
		{"65 records", ones, "more than 64 records"},
		{"no SNI", records(handshake(helloBody()), len(handshake(helloBody()))), "names no server"},
	} {
		r := bytes.NewReader(tc.in)
		raw, _, err := ReadClientHello(r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
		if !errors.Is(err, ErrClientHello) && !errors.Is(err, ErrNoSNI) {
			t.Errorf("%s: %v is not ErrClientHello", tc.name, err)
		}
		if read := len(tc.in) - r.Len(); read != len(raw) {
			t.Errorf("%s: read %d bytes, raw has %d", tc.name, read, len(raw))
		}
	}
	// 64 records are read.
	if len(msg) <= 64 {
		t.Fatalf("a hello of %d bytes", len(msg))
	}
	sizes := make([]int, 63)
	for i := range sizes {
		sizes[i] = 1
	}
	if _, sni, err := ReadClientHello(bytes.NewReader(records(msg, append(sizes, len(msg)-63)...))); err != nil || sni != "a.example" {
		t.Errorf("64 records: %q, %v", sni, err)
	}
}

func TestParseClientHello(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		sni  string
	}{
		{"a name", helloBody(sniExt(0, "api.example.com")), "api.example.com"},
		{"a name in capitals with a dot", helloBody(sniExt(0, "API.Example.COM.")), "api.example.com"},
		{"with other extensions", helloBody(ext(10, []byte{0, 2, 0, 29}), sniExt(0, "a.example"), ext(0x0a0a, nil), ext(0x1a1a, []byte{0})), "a.example"},
		{"TLS 1.0", withVersion(helloBody(sniExt(0, "a.example")), 0x0301), "a.example"},
	} {
		sni, err := ParseClientHello(tc.body)
		if err != nil || sni != tc.sni {
			t.Errorf("%s: %q, %v; want %q", tc.name, sni, err, tc.sni)
		}
	}
}

func TestParseClientHelloRefuses(t *testing.T) {
	good := helloBody(sniExt(0, "a.example"))
	// good is: version 2, random 32, session id 1+32, suites 2+2,
	// compression 1+1, extensions 2+...
	const (
		atSessionID = 2 + 32
		atSuites    = atSessionID + 1 + 32
		atComp      = atSuites + 2 + 2
		atExts      = atComp + 1 + 1
	)
	set := func(b []byte, i int, v ...byte) []byte {
		b = slices.Clone(b)
		copy(b[i:], v)
		return b
	}
	for _, tc := range []struct {
		name string
		body []byte
		kind error
		want string
	}{
		{"no extensions", good[:atExts], ErrNoSNI, "names no server"},
		{"an empty extension list", append(slices.Clone(good[:atExts]), 0, 0), ErrNoSNI, "names no server"},
		{"no server_name", helloBody(ext(10, []byte{0, 2, 0, 29})), ErrNoSNI, "names no server"},
		{"ECH", helloBody(sniExt(0, "public.example"), ext(extECH, []byte{0})), ErrECH, "Encrypted Client Hello"},
		{"ECH before the name", helloBody(ext(extECH, nil), sniExt(0, "public.example")), ErrECH, "turn ECH off"},
		{"ECH without a name", helloBody(ext(extECH, nil)), ErrECH, "Encrypted Client Hello"},
		{"ESNI", helloBody(ext(extESNI, nil), sniExt(0, "a.example")), ErrECH, "Encrypted Client Hello"},
		{"ECH and a malformed name", helloBody(ext(extECH, nil), sniExt(1, "a.example")), ErrClientHello, "not host_name"},
		{"an extension twice", helloBody(sniExt(0, "a.example"), ext(10, nil), ext(10, nil)), ErrClientHello, "the extension 10 appears twice"},
		{"server_name twice", helloBody(sniExt(0, "a.example"), sniExt(0, "a.example")), ErrClientHello, "the extension 0 appears twice"},
		{"two names", helloBody(sniExt(0, "a.example", "b.example")), ErrClientHello, "more than one server"},
		{"a name of type 1", helloBody(sniExt(1, "a.example")), ErrClientHello, "not host_name"},
		{"an empty list", helloBody(ext(0, []byte{0, 0})), ErrClientHello, "list is empty"},
		{"an empty extension", helloBody(ext(0, nil)), ErrClientHello, "cut short"},
		{"bytes after the list", helloBody(ext(0, append(sniExt(0, "a.example")[4:], 0))), ErrClientHello, "bytes after its list"},
		{"a list longer than its extension", helloBody(ext(0, []byte{0, 9, 0, 0, 1, 'a'})), ErrClientHello, "cut short"},
		{"a name longer than its list", helloBody(ext(0, []byte{0, 4, 0, 0, 9, 'a'})), ErrClientHello, "server name is cut short"},
		{"an empty name", helloBody(sniExt(0, "")), ErrClientHello, "is empty"},
		{"an IP address", helloBody(sniExt(0, "203.0.113.7")), ErrClientHello, "looks like an IP address"},
		{"an IPv6 address", helloBody(sniExt(0, "2001:db8::1")), ErrClientHello, "has ':'"},
		{"a NUL", helloBody(sniExt(0, "a.example\x00.evil.example")), ErrClientHello, `has '\x00'`},
		{"not ASCII", helloBody(sniExt(0, "bücher.example")), ErrClientHello, "not ASCII"},
		{"a name too long", helloBody(sniExt(0, strings.Repeat("a.", 127)+"example")), ErrClientHello, "characters long"},
		{"a wildcard", helloBody(sniExt(0, "*.example.com")), ErrClientHello, "has '*'"},
		{"bytes after the extensions", append(slices.Clone(good), 0), ErrClientHello, "1 bytes follow its extensions"},
		{"extensions cut short", good[:len(good)-1], ErrClientHello, "extensions are cut short"},
		{"an extension's type cut short", withExts(good[:atExts], []byte{0}), ErrClientHello, "type is cut short"},
		{"an extension's length cut short", withExts(good[:atExts], []byte{0, 0, 0}), ErrClientHello, "the extension 0 is cut short"},
		{"an extension's data cut short", withExts(good[:atExts], []byte{0, 0, 0, 9, 1}), ErrClientHello, "the extension 0 is cut short"},
		{"SSL 3", withVersion(good, 0x0300), ErrClientHello, "its version is 0x0300"},
		{"version 0x0304", withVersion(good, 0x0304), ErrClientHello, "its version is 0x0304"},
		{"empty", nil, ErrClientHello, "it has no version"},
		{"random cut short", good[:20], ErrClientHello, "random is cut short"},
		{"a session id of 33", set(good, atSessionID, 33), ErrClientHello, "session id"},
		{"no cipher suites", set(good, atSuites, 0, 0), ErrClientHello, "cipher suites"},
		{"an odd cipher suite", set(good, atSuites, 0, 3), ErrClientHello, "cipher suites"},
		{"no compression", set(good, atComp, 0), ErrClientHello, "compression"},
	} {
		sni, err := ParseClientHello(tc.body)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) || sni != "" {
			t.Errorf("%s: %q, %v; want %v, %q", tc.name, sni, err, tc.kind, tc.want)
		}
	}
	for i := 0; i < len(good); i++ {
		if _, err := ParseClientHello(good[:i]); err == nil {
			t.Errorf("cut at %d of %d: read", i, len(good))
		}
	}
}

// ext is a TLS extension.
func ext(typ uint16, data []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

// sniExt is a server_name extension of names, each of type typ.
func sniExt(typ byte, names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, typ)
		list = binary.BigEndian.AppendUint16(list, uint16(len(n)))
		list = append(list, n...)
	}
	data := binary.BigEndian.AppendUint16(nil, uint16(len(list)))
	return ext(extServerName, append(data, list...))
}

// helloBody is the body of a TLS 1.3 ClientHello with exts; without
// any, it has no extension list at all.
func helloBody(exts ...[]byte) []byte {
	b := []byte{3, 3}
	b = append(b, make([]byte, 32)...)
	b = append(b, 32)
	b = append(b, bytes.Repeat([]byte{7}, 32)...)
	b = append(b, 0, 2, 0x13, 0x01)
	b = append(b, 1, 0)
	if len(exts) == 0 {
		return b
	}
	all := bytes.Join(exts, nil)
	b = binary.BigEndian.AppendUint16(b, uint16(len(all)))
	return append(b, all...)
}

// withExts is head, a body up to its extensions, with the extension
// list block.
func withExts(head, block []byte) []byte {
	b := binary.BigEndian.AppendUint16(slices.Clone(head), uint16(len(block)))
	return append(b, block...)
}

func withVersion(body []byte, v uint16) []byte {
	b := slices.Clone(body)
	binary.BigEndian.PutUint16(b, v)
	return b
}

// handshake is body as a ClientHello handshake message.
func handshake(body []byte) []byte {
	n := len(body)
	return append([]byte{typeClientHello, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

// records is msg in handshake records of the sizes given, which add up
// to len(msg).
func records(msg []byte, sizes ...int) []byte {
	var out []byte
	for _, n := range sizes {
		out = append(out, recordHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	if len(msg) != 0 {
		panic("records: sizes do not add up")
	}
	return out
}

// FuzzParseClientHello: whatever the body, ParseClientHello refuses it
// or gives a server name in canonical form, and ReadClientHello gives
// the same answer for the body in a record.
func FuzzParseClientHello(f *testing.F) {
	raw, _, _, err := goClientHello(f, "files.example.com")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw[recordHeader+handshakeHeader:])
	for _, b := range [][]byte{
		helloBody(sniExt(0, "API.Example.COM.")),
		helloBody(),
		helloBody(ext(10, []byte{0, 2, 0, 29}), sniExt(0, "a.example"), ext(extECH, nil)),
		helloBody(sniExt(0, "a.example", "b.example")),
		helloBody(sniExt(0, "a.example"), sniExt(0, "a.example")),
		helloBody(ext(0, []byte{0, 9, 0, 0, 1, 'a'})),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sni, err := ParseClientHello(body)
		if err == nil {
			if canon, cerr := canonicalName(sni); cerr != nil || canon != sni || strings.HasSuffix(sni, ".") {
				t.Fatalf("server name %q is not canonical (%q, %v)", sni, canon, cerr)
			}
		} else if sni != "" {
			t.Fatalf("server name %q with an error", sni)
		}
		if n := len(body) + handshakeHeader; n > maxRecord {
			return
		}
		stream := records(handshake(body), len(body)+handshakeHeader)
		raw, sni2, err2 := ReadClientHello(bytes.NewReader(stream))
		if sni2 != sni || (err == nil) != (err2 == nil) || !bytes.Equal(raw, stream) {
			t.Fatalf("ParseClientHello: %q, %v; ReadClientHello: %q, %v, %d bytes of %d", sni, err, sni2, err2, len(raw), len(stream))
		}
	})
}

// FuzzReadClientHello: whatever a box sends through a tunnel,
// ReadClientHello reads a bounded prefix of it, gives exactly that
// prefix as raw, and refuses it or gives a server name in canonical form.
func FuzzReadClientHello(f *testing.F) {
	raw, _, _, err := goClientHello(f, "files.example.com")
	if err != nil {
		f.Fatal(err)
	}
	msg := raw[recordHeader:]
	f.Add(raw)
	f.Add(records(msg, 3, len(msg)-3))
	f.Add(append(slices.Clone(raw), 0x17, 3, 3, 0, 1, 0))
	f.Add(records(handshake(helloBody(sniExt(0, "a.example"))), 20, 20, len(handshake(helloBody(sniExt(0, "a.example"))))-40))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		raw, sni, err := ReadClientHello(r)
		if !bytes.Equal(raw, in[:len(in)-r.Len()]) {
			t.Fatalf("raw is %d bytes, %d were read", len(raw), len(in)-r.Len())
		}
		if len(raw) > maxHello+maxRecords*recordHeader+maxRecord {
			t.Fatalf("read %d bytes", len(raw))
		}
		if err != nil {
			if sni != "" {
				t.Fatalf("server name %q with an error", sni)
			}
			return
		}
		if canon, cerr := canonicalName(sni); cerr != nil || canon != sni {
			t.Fatalf("server name %q is not canonical (%q, %v)", sni, canon, cerr)
		}
	})
}
