package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// What ReadClientHello's and ParseClientHello's errors wrap. A hello
// without a server name, or with its name encrypted, may be well formed;
// the caller refuses it all the same, since it cannot check the name.
var (
	ErrClientHello = errors.New("not a valid TLS ClientHello")
	ErrNoSNI       = errors.New("the TLS ClientHello names no server (no SNI extension): the proxy lets TLS through only to a server name it can check")
	ErrECH         = errors.New("the TLS ClientHello uses Encrypted Client Hello, which hides the server name from the proxy: turn ECH off in the client")
)

// Bounds of the records ReadClientHello reads. A ClientHello is a few
// hundred bytes, about 2 KiB with a post-quantum key share.
const (
	recordHeader = 5
	maxRecord    = 1 << 14  // a TLS plaintext record's fragment, at most
	maxHello     = 16 << 10 // the ClientHello handshake message, its 4-byte header included
	maxRecords   = 64       // records it may be split into
)

// TLS numbers ParseClientHello reads.
const (
	recordHandshake   = 22
	typeClientHello   = 1
	extServerName     = 0
	extECH            = 0xfe0d // encrypted_client_hello
	extESNI           = 0xffce // the draft that came before it
	nameTypeHostName  = 0
	maxSessionID      = 32
	minRecordVersion  = 0x0301
	maxRecordVersion  = 0x0304
	minLegacyVersion  = 0x0301
	maxLegacyVersion  = 0x0303
	handshakeHeader   = 4
	clientRandomBytes = 32
)

// helloError is a ClientHello refused: a sentence that says why, and
// which of the errors above it is.
type helloError struct {
	kind error
	msg  string
}

func (e *helloError) Error() string { return e.msg }
func (e *helloError) Unwrap() error { return e.kind }

func malformed(format string, a ...any) error {
	return &helloError{ErrClientHello, "the TLS ClientHello is malformed: " + fmt.Sprintf(format, a...)}
}

// ReadClientHello reads from r the TLS records that carry one ClientHello
// (a handshake record may carry part of it, and it may span several) and
// not a byte more, and gives every byte it read, to be sent on unchanged,
// and the server name the hello asks for (see ParseClientHello). raw is
// every byte read even when err is not nil.
//
// Each record must be a handshake record of TLS 1.0 to 1.3, of 1 to 16
// KiB; the hello at most 16 KiB in at most 64 records, with nothing
// after it in its last record. A stream that ends before the first byte
// gives io.EOF; one that ends inside the hello, an error wrapping
// io.ErrUnexpectedEOF.
func ReadClientHello(r io.Reader) (raw []byte, sni string, err error) {
	var msg []byte // the handshake message, as far as read
	need := -1     // its length, header included, once its header is read
	for records := 0; need < 0 || len(msg) < need; records++ {
		if records == maxRecords {
			return raw, "", malformed("it is split into more than %d records", maxRecords)
		}
		var hdr [recordHeader]byte
		n, err := io.ReadFull(r, hdr[:])
		raw = append(raw, hdr[:n]...)
		if err != nil {
			return raw, "", endOfHello(err, len(raw))
		}
		if hdr[0] != recordHandshake {
			if records == 0 {
				return raw, "", &helloError{ErrClientHello, fmt.Sprintf("the stream does not begin with a TLS handshake record (its first byte is %d, not %d): the tunnel carries TLS only", hdr[0], recordHandshake)}
			}
			return raw, "", malformed("a record of type %d comes before its end", hdr[0])
		}
		if v := binary.BigEndian.Uint16(hdr[1:3]); v < minRecordVersion || v > maxRecordVersion {
			return raw, "", malformed("a record has the version %#04x, not one of TLS 1.0 to 1.3", v)
		}
		length := int(binary.BigEndian.Uint16(hdr[3:5]))
		switch {
		case length == 0:
			return raw, "", malformed("a record is empty")
		case length > maxRecord:
			return raw, "", malformed("a record declares %d bytes; at most %d", length, maxRecord)
		case len(msg)+length > maxHello:
			return raw, "", malformed("it is longer than %d bytes", maxHello)
		case need >= 0 && len(msg)+length > need:
			return raw, "", malformed("its last record goes on after it")
		}
		start := len(raw)
		raw = slices.Grow(raw, length)[:start+length]
		n, err = io.ReadFull(r, raw[start:])
		raw = raw[:start+n]
		if err != nil {
			return raw, "", endOfHello(err, len(raw))
		}
		msg = append(msg, raw[start:]...)
		if need < 0 && len(msg) >= handshakeHeader {
			if msg[0] != typeClientHello {
				return raw, "", malformed("the first handshake message is of type %d, not a ClientHello", msg[0])
			}
			need = handshakeHeader + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
			if need > maxHello {
				return raw, "", malformed("it declares %d bytes; at most %d", need, maxHello)
			}
			if len(msg) > need {
				return raw, "", malformed("its last record goes on after it")
			}
		}
	}
	sni, err = ParseClientHello(msg[handshakeHeader:])
	return raw, sni, err
}

// endOfHello is ReadClientHello's error for err from reading, after n
// bytes.
func endOfHello(err error, n int) error {
	switch {
	case err == io.EOF && n == 0:
		return io.EOF
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return fmt.Errorf("the TLS stream ends inside its ClientHello: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// ParseClientHello reads the body of a ClientHello handshake message
// (after its 4-byte header) and gives the server name it asks for: the
// one host_name of its server_name extension, lower-case and without a
// trailing dot, a DNS name as ParseAllow reads them (not an IP address,
// which a ClientHello never names).
//
// Every length is checked against what contains it, and the extensions
// are read to their end: a ClientHello with anything left over, an
// extension twice, or a server_name extension of other than exactly one
// host_name is refused (ErrClientHello). One without the extension gives
// ErrNoSNI; one with Encrypted Client Hello gives ErrECH, since its name
// in the clear is not the one the client goes to.
func ParseClientHello(msg []byte) (sni string, err error) {
	s := cursor(msg)
	v, ok := s.u16()
	if !ok {
		return "", malformed("it has no version")
	}
	if v < minLegacyVersion || v > maxLegacyVersion {
		return "", malformed("its version is %#04x, not one of TLS 1.0 to 1.2 (as TLS 1.3 sends too)", v)
	}
	if _, ok := s.bytes(clientRandomBytes); !ok {
		return "", malformed("its random is cut short")
	}
	id, ok := s.vec8()
	if !ok || len(id) > maxSessionID {
		return "", malformed("its session id is cut short or longer than %d bytes", maxSessionID)
	}
	suites, ok := s.vec16()
	if !ok || len(suites) == 0 || len(suites)%2 != 0 {
		return "", malformed("its cipher suites are cut short, none, or an odd number of bytes")
	}
	comp, ok := s.vec8()
	if !ok || len(comp) == 0 {
		return "", malformed("its compression methods are cut short or none")
	}
	if len(s) == 0 {
		return "", ErrNoSNI // no extensions at all, as TLS 1.2 allows
	}
	exts, ok := s.vec16()
	if !ok {
		return "", malformed("its extensions are cut short")
	}
	if len(s) != 0 {
		return "", malformed("%d bytes follow its extensions", len(s))
	}
	seen := make(map[int]bool)
	ech := false
	for len(exts) > 0 {
		typ, ok := exts.u16()
		if !ok {
			return "", malformed("an extension's type is cut short")
		}
		data, ok := exts.vec16()
		if !ok {
			return "", malformed("the extension %d is cut short", typ)
		}
		if seen[typ] {
			return "", malformed("the extension %d appears twice", typ)
		}
		seen[typ] = true
		switch typ {
		case extServerName:
			if sni, err = serverName(data); err != nil {
				return "", err
			}
		case extECH, extESNI:
			ech = true
		}
	}
	switch {
	case ech:
		return "", ErrECH
	case !seen[extServerName]:
		return "", ErrNoSNI
	}
	return sni, nil
}

// serverName reads the data of a server_name extension (RFC 6066): a
// list of exactly one host_name.
func serverName(data cursor) (string, error) {
	list, ok := data.vec16()
	if !ok || len(data) != 0 {
		return "", malformed("its server_name extension is cut short or has bytes after its list")
	}
	typ, ok := list.u8()
	if !ok {
		return "", malformed("its server_name list is empty")
	}
	name, ok := list.vec16()
	if !ok {
		return "", malformed("its server name is cut short")
	}
	if typ != nameTypeHostName {
		return "", malformed("its server name is of type %d, not host_name", typ)
	}
	if len(list) != 0 {
		return "", malformed("it names more than one server")
	}
	sni, err := canonicalName(string(name))
	if err != nil {
		return "", malformed("the server name %s %v", clip(string(name)), err)
	}
	return sni, nil
}

// cursor reads a TLS message from its start, each method taking what it
// reads off the front; ok is false, and nothing taken, when too few
// bytes are left.
type cursor []byte

func (c *cursor) bytes(n int) (cursor, bool) {
	if n > len(*c) {
		return nil, false
	}
	b := (*c)[:n:n]
	*c = (*c)[n:]
	return b, true
}

func (c *cursor) u8() (int, bool) {
	b, ok := c.bytes(1)
	if !ok {
		return 0, false
	}
	return int(b[0]), true
}

func (c *cursor) u16() (int, bool) {
	b, ok := c.bytes(2)
	if !ok {
		return 0, false
	}
	return int(binary.BigEndian.Uint16(b)), true
}

// vec8 and vec16 read a vector with a length of 1 and 2 bytes.
func (c *cursor) vec8() (cursor, bool) {
	save := *c
	n, ok := c.u8()
	if !ok {
		return nil, false
	}
	b, ok := c.bytes(n)
	if !ok {
		*c = save
	}
	return b, ok
}

func (c *cursor) vec16() (cursor, bool) {
	save := *c
	n, ok := c.u16()
	if !ok {
		return nil, false
	}
	b, ok := c.bytes(n)
	if !ok {
		*c = save
	}
	return b, ok
}
