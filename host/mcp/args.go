package mcp

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"pybox/host/egress"
	"pybox/shared/wire"
)

// Input file encodings.
const (
	encodingUTF8   = "utf-8"
	encodingBase64 = "base64"
)

// callArgs are run_python's arguments as a client sends them. They are
// read by wire.DecodeStrict, PyBox's one strict JSON reader, which
// refuses what encoding/json lets through (keys in another case, repeated
// keys, the last one silently winning, null for a string, a fraction for
// a whole number); omitempty on a list or a pointer is how it is told
// that null is refused there too. An argument not given is nil, and the
// server's default (defaultImage, defaultTimeout) or the product's
// applies.
type callArgs struct {
	Code           string     `json:"code" strict:"required"`
	Image          *string    `json:"image,omitempty"`
	TimeoutSeconds *float64   `json:"timeout_s,omitempty"`
	MaxOutputBytes *int       `json:"max_output_bytes,omitempty"`
	Files          []callFile `json:"files,omitempty"`
	ReturnFiles    bool       `json:"return_files"`
	// Data is an argument only on a server with data folders.
	Data []string `json:"data,omitempty"`
	// Network is an argument only on a server that opens the network
	// (--allow-net).
	Network []string `json:"network,omitempty"`
}

// callFile is one of the files argument's {name, content, encoding}.
type callFile struct {
	Name     string  `json:"name" strict:"required"`
	Content  string  `json:"content" strict:"required"`
	Encoding *string `json:"encoding,omitempty"` // utf-8 when not given
}

// allowedArgs lists the arguments, for the message that refuses another.
func allowedArgs(o *Options) string {
	args := "code, image, timeout_s, max_output_bytes, files, return_files"
	if len(o.Data) > 0 {
		args += ", data"
	}
	if o.netOpen() {
		args += ", network"
	}
	return args
}

// parseArgs reads run_python's arguments from the raw JSON the client
// sent, by the tool's rules (their JSON, the files' encodings), and
// checks them against this server's ceilings (checkCeilings). The
// product's rules of a run (sizes, names, bounds) are not checked here:
// client.CheckRun checks every run the host sends, once. The run it
// returns has no RunID. A call that names hosts in network gets a run
// with Net, and the hosts it may reach: the server's list narrowed to
// them (netArg); any other call, a run without Net and an empty list.
func parseArgs(raw []byte, o *Options) (*wire.Run, egress.Allow, error) {
	var none egress.Allow
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	var a callArgs
	if err := wire.DecodeStrict(raw, &a, "the arguments"); err != nil {
		return nil, none, argError(err, o)
	}
	if a.Data != nil && len(o.Data) == 0 {
		return nil, none, argError(&wire.KeyError{Key: "data", Problem: wire.KeyUnknown}, o)
	}
	if a.Network != nil && !o.netOpen() {
		return nil, none, argError(&wire.KeyError{Key: "network", Problem: wire.KeyUnknown}, o)
	}
	r := &wire.Run{Code: a.Code, Image: given(a.Image, o.defaultImage()), TimeoutSeconds: given(a.TimeoutSeconds, o.defaultTimeout()),
		MaxOutputBytes: given(a.MaxOutputBytes, wire.DefaultOutputBytes), ReturnFiles: a.ReturnFiles}
	for i, f := range a.Files {
		content, err := decodeContent(f.Content, f.Encoding)
		if err != nil {
			return nil, none, fmt.Errorf("files[%d] (%q): %w", i, f.Name, err)
		}
		r.Files = append(r.Files, wire.InputFile{Name: f.Name, Content: content})
	}
	for _, name := range a.Data {
		r.Data = append(r.Data, wire.DataFolder{Name: name})
	}
	if err := checkCeilings(r, o); err != nil {
		return nil, none, err
	}
	if a.Network == nil {
		return r, none, nil
	}
	allow, err := netArg(a.Network, o)
	if err != nil {
		return nil, none, err
	}
	r.Net, r.NetPorts = true, allow.Ports()
	return r, allow, nil
}

// netArg reads the network argument, and narrows the server's list to
// it: a call may name fewer hosts or ports than the server opens, never
// more. Each entry is one of the server's HOST[:PORT] forms.
func netArg(list []string, o *Options) (egress.Allow, error) {
	if len(list) == 0 {
		return egress.Allow{}, errors.New("network is empty: name at least one host, or leave network out for a run without network")
	}
	if len(list) > maxNetworkEntries {
		return egress.Allow{}, fmt.Errorf("network names %d hosts; at most %d", len(list), maxNetworkEntries)
	}
	for i, e := range list {
		switch {
		case len(e) > maxNetworkEntryBytes:
			return egress.Allow{}, fmt.Errorf("network[%d] has %d bytes; at most %d (a host name and a port)", i, len(e), maxNetworkEntryBytes)
		case e == "":
			return egress.Allow{}, fmt.Errorf("network[%d] is empty: give a host, as HOST or HOST:PORT", i)
		case strings.Contains(e, ","):
			return egress.Allow{}, fmt.Errorf("network[%d] (%q) has a comma: give one host per entry", i, wire.EscapeName(e))
		}
	}
	sub, err := egress.ParseAllow(strings.Join(list, ","))
	if err != nil {
		return egress.Allow{}, fmt.Errorf("network: %w", err)
	}
	allow, err := o.Net.Narrow(sub)
	if err != nil {
		return egress.Allow{}, fmt.Errorf("network: %w", err)
	}
	return allow, nil
}

// given is what an argument gives, or def when it is not given.
func given[T any](arg *T, def T) T {
	if arg == nil {
		return def
	}
	return *arg
}

// argError says what the reader refused of the arguments' keys in the
// tool's own words, which say what it takes.
func argError(err error, o *Options) error {
	var ke *wire.KeyError
	if !errors.As(err, &ke) {
		return err
	}
	what := ke.In
	if what == "" {
		what = "the arguments"
	}
	switch {
	case ke.Problem == wire.KeyRepeated:
		return fmt.Errorf("%s name %q twice", what, ke.Key)
	case ke.Problem == wire.KeyUnknown && ke.In == "":
		return fmt.Errorf("unknown argument %q: run_python takes only %s", ke.Key, allowedArgs(o))
	case ke.Problem == wire.KeyUnknown:
		return fmt.Errorf("%s has an unknown field %q: a file has only name, content and encoding", what, ke.Key)
	case ke.In == "": // code, the one argument required
		return errors.New("code is required: give the Python source to run")
	case ke.Key == "name":
		return fmt.Errorf("%s has no name", what)
	}
	return fmt.Errorf("%s has no content (give \"\" for an empty file)", what)
}

// checkCeilings checks what this server allows, below the product's
// rules: its images, its --max-timeout, its data folders.
func checkCeilings(r *wire.Run, o *Options) error {
	if !o.allows(r.Image) {
		return fmt.Errorf("image %q is not allowed on this server: use one of %s", wire.EscapeName(r.Image), strings.Join(o.Images, ", "))
	}
	if err := wire.CheckTimeout(r.TimeoutSeconds, o.MaxTimeout); err != nil {
		return err
	}
	for _, d := range r.Data {
		if !o.allowsData(d.Name) {
			return fmt.Errorf("data folder %q is not allowed on this server: use one of %s", wire.EscapeName(d.Name), strings.Join(o.Data, ", "))
		}
	}
	return nil
}

// decodeContent is a file's content as its encoding (utf-8 when nil)
// says.
func decodeContent(content string, encoding *string) ([]byte, error) {
	switch enc := given(encoding, encodingUTF8); enc {
	case encodingUTF8:
		return []byte(content), nil
	case encodingBase64:
		return decodeBase64(content)
	default:
		return nil, fmt.Errorf("encoding %q is not known: use %q or %q", wire.EscapeName(enc), encodingUTF8, encodingBase64)
	}
}

// decodeBase64 accepts only standard base64 with padding. The alphabet is
// checked first because Go's decoder skips newlines even in strict mode,
// and a message naming the offending byte helps the agent fix it.
func decodeBase64(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '+', c == '/', c == '=':
		case c == '-' || c == '_':
			return nil, fmt.Errorf("content has %q at byte %d: that is the URL-safe alphabet; use standard base64 (+ and /)", c, i)
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			return nil, fmt.Errorf("content has whitespace at byte %d: base64 content must be one unbroken string", i)
		default:
			return nil, fmt.Errorf("content has a character that is not base64 at byte %d", i)
		}
	}
	data, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("content is not standard base64 with padding (%v)", err)
	}
	return data, nil
}
