package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// What ReadRequestHead's errors wrap, one for each answer the caller
// gives: 400, 405, 414 and 431.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrMethod       = errors.New("method not allowed")
	ErrURITooLong   = errors.New("request line too long")
	ErrHeadTooLarge = errors.New("request head too large")
)

// Bounds of a request head. Real clients send a few hundred bytes.
const (
	maxRequestLine = 8 << 10  // without its CRLF
	maxHead        = 16 << 10 // the request line, the fields and every CRLF
	maxFields      = 64
)

// methods are the methods of a plain-HTTP request through the proxy;
// CONNECT is the way to HTTPS.
var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// Head is the head of a proxy request a box sent.
type Head struct {
	Method string // CONNECT, RESOLVE, or one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS
	Target string // the request target as read: host:port, or an http:// URL
	Proto  string // HTTP/1.1 or HTTP/1.0
	// Host is the host of the target: a DNS name, lower-case without a
	// trailing dot, or an IP address (IPv6 without brackets); Port its
	// port, 80 if an http:// URL names none.
	Host string
	Port int
	// Header is the header fields as read, in order, each value without
	// the whitespace around it.
	Header []Field
	path   string // the origin form of an http:// URL: path and query
}

// Field is one header field.
type Field struct {
	Name  string
	Value string
}

// headError is an error of ReadRequestHead: a sentence that says what is
// wrong, and the kind of answer it gets.
type headError struct {
	kind error
	msg  string
}

func (e *headError) Error() string { return e.msg }
func (e *headError) Unwrap() error { return e.kind }

func badRequest(format string, a ...any) error {
	return &headError{ErrBadRequest, fmt.Sprintf(format, a...)}
}

// ReadRequestHead reads the head of one HTTP/1.x proxy request from r,
// and not a byte more: what follows it (a request's body, or TLS after a
// CONNECT) stays in r. It accepts
//
//   - CONNECT host:port, for a tunnel (to HTTPS): the authority form,
//     with its port;
//   - METHOD http://host[:port]/path, a plain-HTTP request in absolute
//     form, which Head.OriginForm rewrites for the server. An https://
//     URL is refused: a client goes to HTTPS with CONNECT;
//   - RESOLVE host, with no header fields: the box's resolver asking
//     whether a name may have an address (Port is 0).
//
// It refuses what a well-behaved client never sends: a request line over
// 8 KiB (ErrURITooLong), a head over 16 KiB or of more than 64 fields
// (ErrHeadTooLarge), a method other than those (ErrMethod), and
// (ErrBadRequest) lines that do not end in CRLF, a CR anywhere else,
// folded lines, field names that are not tokens, control characters in
// values, userinfo in the target, more than one Host field or one that
// names another host or port than the target (a Host without a port
// names 443 for a CONNECT, 80 for http://), and a body whose framing
// two servers could read two ways (Content-Length and Transfer-Encoding
// together, two Content-Lengths, a body on a CONNECT).
//
// A stream that ends before the head's first byte gives io.EOF; one that
// ends inside it, an error wrapping io.ErrUnexpectedEOF.
func ReadRequestHead(r *bufio.Reader) (*Head, error) {
	line, err := readLine(r, maxRequestLine)
	if err != nil {
		if errors.Is(err, errLineTooLong) {
			return nil, &headError{ErrURITooLong, fmt.Sprintf("the request line is longer than %d bytes", maxRequestLine)}
		}
		return nil, err
	}
	total := len(line) + 2
	h, err := parseRequestLine(line)
	if err != nil {
		return nil, err
	}
	for {
		line, err := readLine(r, maxHead-total-2)
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("the request head ends before its empty line: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				return nil, &headError{ErrHeadTooLarge, fmt.Sprintf("the request head is longer than %d bytes", maxHead)}
			}
			return nil, err
		}
		total += len(line) + 2
		if len(line) == 0 {
			break
		}
		if len(h.Header) == maxFields {
			return nil, &headError{ErrHeadTooLarge, fmt.Sprintf("the request has more than %d header fields", maxFields)}
		}
		f, err := parseField(line)
		if err != nil {
			return nil, err
		}
		h.Header = append(h.Header, f)
	}
	if err := h.checkFields(); err != nil {
		return nil, err
	}
	return h, nil
}

// errLineTooLong is readLine's error for a line over its bound.
var errLineTooLong = errors.New("line too long")

// readLine reads one line ending in CRLF and gives it without the CRLF;
// a line longer than max without it is refused. A line ending in a bare
// LF, or with a CR elsewhere, is refused: a client that sends them reads
// HTTP another way than a server might. io.EOF only at the line's
// start; io.ErrUnexpectedEOF inside it.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max+2 {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) > 0 {
			return nil, fmt.Errorf("the request head ends inside a line: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			return nil, err
		}
		break
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, badRequest("a line of the request head ends in a bare LF: end every line with CRLF")
	}
	line = line[:len(line)-2]
	for _, c := range line {
		if c == '\r' {
			return nil, badRequest("a line of the request head has a CR inside it")
		}
	}
	if len(line) > max {
		return nil, errLineTooLong
	}
	return line, nil
}

// parseRequestLine reads METHOD SP TARGET SP HTTP/1.x.
func parseRequestLine(line []byte) (*Head, error) {
	parts := strings.Split(string(line), " ")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return nil, badRequest("the request line %s is not METHOD TARGET HTTP/1.1, separated by single spaces", clip(string(line)))
	}
	h := &Head{Method: parts[0], Target: parts[1], Proto: parts[2]}
	if h.Proto != "HTTP/1.1" && h.Proto != "HTTP/1.0" {
		return nil, badRequest("the request's version %s is not HTTP/1.1 or HTTP/1.0", clip(h.Proto))
	}
	if !isToken(h.Method) {
		return nil, badRequest("the method %s is not a token", clip(h.Method))
	}
	for i := 0; i < len(h.Target); i++ {
		if c := h.Target[i]; c <= ' ' || c >= 0x7f {
			return nil, badRequest("the request target has the byte %q: a target is printable ASCII", c)
		}
	}
	if strings.Contains(h.Target, "#") {
		return nil, badRequest("the request target %s has a fragment (#)", clip(h.Target))
	}
	var err error
	switch {
	case h.Method == "CONNECT":
		if strings.Contains(h.Target, "/") {
			return nil, badRequest("the CONNECT target %s is not host:port", clip(h.Target))
		}
		h.Host, h.Port, err = parseAuthority(h.Target, 0)
		if err != nil {
			return nil, badRequest("the CONNECT target %s: %v", clip(h.Target), err)
		}
	case h.Method == "RESOLVE":
		host, _, err := canonicalHost(h.Target)
		if err != nil {
			return nil, badRequest("the RESOLVE target %s: %v", clip(h.Target), err)
		}
		h.Host = host
	case isMethod(h.Method):
		if err := h.parseURL(); err != nil {
			return nil, err
		}
	default:
		return nil, &headError{ErrMethod, fmt.Sprintf("the method %s is not allowed: use CONNECT host:port for HTTPS, or %s with an http:// URL",
			clip(h.Method), strings.Join(methods, ", "))}
	}
	return h, nil
}

func isMethod(m string) bool {
	for _, x := range methods {
		if m == x {
			return true
		}
	}
	return false
}

// parseURL reads h.Target, an http:// URL in absolute form.
func (h *Head) parseURL() error {
	t := h.Target
	switch {
	case len(t) >= 8 && strings.EqualFold(t[:8], "https://"):
		return badRequest("the target %s is an https:// URL: a client goes to HTTPS through the proxy with CONNECT host:443", clip(t))
	case strings.HasPrefix(t, "/"):
		return badRequest("the target %s is a path: a request to a proxy names the whole URL (http://host/path), or is a CONNECT", clip(t))
	case len(t) < 7 || !strings.EqualFold(t[:7], "http://"):
		return badRequest("the target %s is not an http:// URL", clip(t))
	}
	rest := t[7:]
	auth, path := rest, "/"
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		auth, path = rest[:i], rest[i:]
		if path[0] == '?' {
			path = "/" + path
		}
	}
	var err error
	h.Host, h.Port, err = parseAuthority(auth, 80)
	if err != nil {
		return badRequest("the URL %s: %v", clip(t), err)
	}
	h.path = path
	return nil
}

// parseAuthority reads host[:port] (an IPv6 address in brackets) into
// the canonical host and the port; defPort is the port when none is
// given, 0 if one must be.
func parseAuthority(s string, defPort int) (string, int, error) {
	if s == "" {
		return "", 0, errors.New("it names no host")
	}
	if strings.Contains(s, "@") {
		return "", 0, errors.New("it has userinfo (@)")
	}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, errors.New("its [ has no ]")
		}
		host = s[:end+1]
		switch rest := s[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			port = rest[1:]
			if port == "" {
				return "", 0, errors.New("its : is not followed by a port")
			}
		default:
			return "", 0, errors.New("it has something after the ] of its IPv6 address")
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 {
		if strings.Count(s, ":") > 1 {
			return "", 0, errors.New("it has more than one : (put an IPv6 address in brackets)")
		}
		host, port = s[:i], s[i+1:]
		if port == "" {
			return "", 0, errors.New("its : is not followed by a port")
		}
	}
	if host == "" {
		return "", 0, errors.New("it names no host")
	}
	h, _, err := canonicalHost(host)
	if err != nil {
		return "", 0, err
	}
	p := defPort
	if port != "" {
		var ok bool
		if p, ok = parsePort(port); !ok {
			return "", 0, fmt.Errorf("the port %s is not a number from 1 to 65535", clip(port))
		}
	}
	if p == 0 {
		return "", 0, errors.New("it names no port: give host:port")
	}
	return h, p, nil
}

// parseField reads NAME: VALUE.
func parseField(line []byte) (Field, error) {
	if line[0] == ' ' || line[0] == '\t' {
		return Field{}, badRequest("a header line begins with whitespace: folded header lines are not accepted")
	}
	colon := -1
	for i, c := range line {
		if c == ':' {
			colon = i
			break
		}
	}
	if colon < 0 {
		return Field{}, badRequest("the header line %s has no colon", clip(string(line)))
	}
	name := string(line[:colon])
	if !isToken(name) {
		return Field{}, badRequest("the header name %s is not a token (no spaces, nothing before the colon but the name)", clip(name))
	}
	value := strings.Trim(string(line[colon+1:]), " \t")
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return Field{}, badRequest("the header %s has the control character %q in its value", name, c)
		}
	}
	return Field{Name: name, Value: value}, nil
}

// checkFields checks what the fields say together: the Host field
// against the target, and the framing of the body.
func (h *Head) checkFields() error {
	if h.Method == "RESOLVE" && len(h.Header) > 0 {
		return badRequest("a RESOLVE has no header fields")
	}
	var host, length, coding []string
	for _, f := range h.Header {
		switch {
		case strings.EqualFold(f.Name, "Host"):
			host = append(host, f.Value)
		case strings.EqualFold(f.Name, "Content-Length"):
			length = append(length, f.Value)
		case strings.EqualFold(f.Name, "Transfer-Encoding"):
			coding = append(coding, f.Value)
		}
	}
	if len(host) > 1 {
		return badRequest("the request has %d Host fields; one at most", len(host))
	}
	if len(host) == 1 {
		def := 80
		if h.Method == "CONNECT" {
			def = 443
		}
		hh, hp, err := parseAuthority(host[0], def)
		if err != nil {
			return badRequest("the Host field %s: %v", clip(host[0]), err)
		}
		if hh != h.Host || hp != h.Port {
			return badRequest("the Host field %s names another host or port than the target %s", clip(host[0]), clip(h.Target))
		}
	}
	if len(length) > 1 {
		return badRequest("the request has %d Content-Length fields; one at most", len(length))
	}
	if len(length) == 1 {
		v := length[0]
		if v == "" || len(v) > 18 || strings.Trim(v, "0123456789") != "" {
			return badRequest("the Content-Length %s is not a number of bytes", clip(v))
		}
	}
	if len(coding) > 0 && len(length) > 0 {
		return badRequest("the request has both Content-Length and Transfer-Encoding")
	}
	if h.Method == "CONNECT" {
		if len(coding) > 0 || len(length) > 0 && strings.Trim(length[0], "0") != "" {
			return badRequest("a CONNECT request has a body")
		}
		return nil
	}
	if len(coding) > 0 {
		if h.Proto == "HTTP/1.0" {
			return badRequest("an HTTP/1.0 request has Transfer-Encoding")
		}
		all := strings.Split(strings.Join(coding, ","), ",")
		if last := strings.Trim(all[len(all)-1], " \t"); !strings.EqualFold(last, "chunked") {
			return badRequest("the request's Transfer-Encoding does not end in chunked")
		}
	}
	return nil
}

// OriginForm is the head to send to the server of a plain-HTTP request:
// the request line in origin form (METHOD /path?query HTTP/1.x), then the
// fields as read, without those for the proxy (every Proxy-* field:
// Proxy-Authorization, Proxy-Connection, ...) and without Connection and
// Keep-Alive, a Host field first if the request had none, and
// Connection: close last: one request a connection. It is nil for a
// CONNECT and a RESOLVE.
func (h *Head) OriginForm() []byte {
	if h.Method == "CONNECT" || h.Method == "RESOLVE" {
		return nil
	}
	var b strings.Builder
	b.WriteString(h.Method + " " + h.path + " " + h.Proto + "\r\n")
	hasHost := false
	for _, f := range h.Header {
		hasHost = hasHost || strings.EqualFold(f.Name, "Host")
	}
	if !hasHost {
		host := h.Host
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		if h.Port != 80 {
			host += ":" + strconv.Itoa(h.Port)
		}
		b.WriteString("Host: " + host + "\r\n")
	}
	for _, f := range h.Header {
		if len(f.Name) >= 6 && strings.EqualFold(f.Name[:6], "Proxy-") ||
			strings.EqualFold(f.Name, "Connection") || strings.EqualFold(f.Name, "Keep-Alive") {
			continue
		}
		b.WriteString(f.Name + ": " + f.Value + "\r\n")
	}
	// One request a connection: the next request's head would reach the
	// server unread by the gate.
	b.WriteString("Connection: close\r\n\r\n")
	return []byte(b.String())
}

// isToken says whether s is an HTTP token (RFC 9110): one or more of the
// visible ASCII characters but delimiters.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// clip quotes s for an error, cut to 64 bytes: it is the box's, of any
// length and bytes.
func clip(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}
