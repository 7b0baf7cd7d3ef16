package mcp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"pybox/shared/wire"
)

// Input file encodings.
const (
	encodingUTF8   = "utf-8"
	encodingBase64 = "base64"
)

// allowedArgs lists the arguments, for the message that refuses another.
func allowedArgs(o *Options) string {
	if len(o.Data) > 0 {
		return "code, image, timeout_s, max_output_bytes, files, return_files, data"
	}
	return "code, image, timeout_s, max_output_bytes, files, return_files"
}

// parseArgs reads run_python's arguments from the raw JSON the client sent
// and checks every rule against the server's options. It does its own
// decoding, not encoding/json into a struct, because a struct would accept
// what must be refused: keys in another case, repeated keys (the last one
// silently winning), null for a string. The run it returns has no RunID.
func parseArgs(raw []byte, o *Options) (*wire.Run, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("the arguments are not valid UTF-8")
	}
	r := &wire.Run{
		Image:          o.defaultImage(),
		TimeoutSeconds: o.defaultTimeout(),
		MaxOutputBytes: wire.DefaultOutputBytes,
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var hasCode bool
	err := readObject(d, "the arguments", func(key string) error {
		switch key {
		case "code":
			hasCode = true
			return readString(d, key, &r.Code)
		case "image":
			return readString(d, key, &r.Image)
		case "timeout_s":
			return readNumber(d, key, &r.TimeoutSeconds)
		case "max_output_bytes":
			return readInt(d, key, &r.MaxOutputBytes)
		case "files":
			return readFiles(d, &r.Files)
		case "return_files":
			return readBool(d, key, &r.ReturnFiles)
		case "data":
			if len(o.Data) > 0 {
				return readData(d, o, &r.Data)
			}
		}
		return fmt.Errorf("unknown argument %q: run_python takes only %s", key, allowedArgs(o))
	})
	if err != nil {
		return nil, err
	}
	if err := expectEOF(d); err != nil {
		return nil, err
	}
	if !hasCode {
		return nil, errors.New("code is required: give the Python source to run")
	}
	if err := checkRun(r, o); err != nil {
		return nil, err
	}
	return r, nil
}

// checkRun checks the bounds that need the whole request.
func checkRun(r *wire.Run, o *Options) error {
	if err := wire.CheckCode(r.Code); err != nil {
		return err
	}
	if !o.allows(r.Image) {
		return fmt.Errorf("image %q is not allowed on this server: use one of %s", wire.EscapeName(r.Image), strings.Join(o.Images, ", "))
	}
	if err := wire.CheckTimeout(r.TimeoutSeconds, o.MaxTimeout); err != nil {
		return err
	}
	if r.MaxOutputBytes < 1 || r.MaxOutputBytes > wire.MaxOutputBytes {
		return fmt.Errorf("max_output_bytes is %d; it must be 1–%d", r.MaxOutputBytes, wire.MaxOutputBytes)
	}
	return wire.CheckInputFiles(r.Files)
}

// readObject reads one JSON object, calling key for each member; key must
// read the member's value. A key given twice is refused.
func readObject(d *json.Decoder, what string, key func(string) error) error {
	if err := expectDelim(d, what, '{', "an object"); err != nil {
		return err
	}
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return syntaxError(err)
		}
		k := tok.(string) // inside an object, the decoder only yields string keys here
		if seen[k] {
			return fmt.Errorf("%s name %q twice", what, k)
		}
		seen[k] = true
		if err := key(k); err != nil {
			return err
		}
	}
	_, err := d.Token() // the closing brace: the decoder checked it matches
	return syntaxError(err)
}

// readData reads the data folders a call names: names the server allows,
// each once.
func readData(d *json.Decoder, o *Options, data *[]wire.DataFolder) error {
	if err := expectDelim(d, "data", '[', "an array of data folder names"); err != nil {
		return err
	}
	for d.More() {
		var name string
		if err := readString(d, fmt.Sprintf("data[%d]", len(*data)), &name); err != nil {
			return err
		}
		if !o.allowsData(name) {
			return fmt.Errorf("data folder %q is not allowed on this server: use one of %s", wire.EscapeName(name), strings.Join(o.Data, ", "))
		}
		for _, have := range *data {
			if have.Name == name {
				return fmt.Errorf("data folder %q is named twice", name)
			}
		}
		*data = append(*data, wire.DataFolder{Name: name})
	}
	_, err := d.Token()
	return syntaxError(err)
}

func readFiles(d *json.Decoder, files *[]wire.InputFile) error {
	if err := expectDelim(d, "files", '[', "an array"); err != nil {
		return err
	}
	total := 0
	for d.More() {
		if len(*files) == wire.MaxInputFiles {
			return fmt.Errorf("more than %d files: at most %d are allowed", wire.MaxInputFiles, wire.MaxInputFiles)
		}
		f, err := readFile(d, len(*files))
		if err != nil {
			return err
		}
		if total += len(f.Content); total > wire.MaxInputBytes {
			return fmt.Errorf("input files hold more than %d bytes together (256 KiB, counted decoded)", wire.MaxInputBytes)
		}
		*files = append(*files, f)
	}
	_, err := d.Token()
	return syntaxError(err)
}

// readFile reads one {name, content, encoding} and decodes its content.
func readFile(d *json.Decoder, i int) (wire.InputFile, error) {
	what := fmt.Sprintf("files[%d]", i)
	var name, content string
	var hasName, hasContent bool
	encoding := encodingUTF8
	err := readObject(d, what, func(key string) error {
		switch key {
		case "name":
			hasName = true
			return readString(d, what+".name", &name)
		case "content":
			hasContent = true
			return readString(d, what+".content", &content)
		case "encoding":
			return readString(d, what+".encoding", &encoding)
		}
		return fmt.Errorf("%s has an unknown field %q: a file has only name, content and encoding", what, key)
	})
	switch {
	case err != nil:
		return wire.InputFile{}, err
	case !hasName:
		return wire.InputFile{}, fmt.Errorf("%s has no name", what)
	case !hasContent:
		return wire.InputFile{}, fmt.Errorf("%s has no content (give \"\" for an empty file)", what)
	}
	if err := wire.CheckFileName(name); err != nil {
		return wire.InputFile{}, fmt.Errorf("%s: %w", what, err)
	}
	data, err := decodeContent(content, encoding)
	if err != nil {
		return wire.InputFile{}, fmt.Errorf("%s (%q): %w", what, name, err)
	}
	return wire.InputFile{Name: name, Content: data}, nil
}

func decodeContent(content, encoding string) ([]byte, error) {
	switch encoding {
	case encodingUTF8:
		return []byte(content), nil
	case encodingBase64:
		return decodeBase64(content)
	}
	return nil, fmt.Errorf("encoding %q is not known: use %q or %q", wire.EscapeName(encoding), encodingUTF8, encodingBase64)
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

func readString(d *json.Decoder, name string, v *string) error {
	tok, err := d.Token()
	if err != nil {
		return syntaxError(err)
	}
	s, ok := tok.(string)
	if !ok {
		return fmt.Errorf("%s must be a string, not %s", name, kind(tok))
	}
	*v = s
	return nil
}

func readBool(d *json.Decoder, name string, v *bool) error {
	tok, err := d.Token()
	if err != nil {
		return syntaxError(err)
	}
	b, ok := tok.(bool)
	if !ok {
		return fmt.Errorf("%s must be true or false, not %s", name, kind(tok))
	}
	*v = b
	return nil
}

func readNumber(d *json.Decoder, name string, v *float64) error {
	tok, err := d.Token()
	if err != nil {
		return syntaxError(err)
	}
	n, ok := tok.(json.Number)
	if !ok {
		return fmt.Errorf("%s must be a number, not %s", name, kind(tok))
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) {
		return fmt.Errorf("%s must be a finite number", name)
	}
	*v = f
	return nil
}

func readInt(d *json.Decoder, name string, v *int) error {
	var f float64
	if err := readNumber(d, name, &f); err != nil {
		return err
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<31 {
		return fmt.Errorf("%s must be a whole number, not %v", name, f)
	}
	*v = int(f)
	return nil
}

func expectDelim(d *json.Decoder, what string, want json.Delim, desc string) error {
	tok, err := d.Token()
	if err != nil {
		return syntaxError(err)
	}
	if tok != want {
		return fmt.Errorf("%s must be %s, not %s", what, desc, kind(tok))
	}
	return nil
}

func expectEOF(d *json.Decoder) error {
	if _, err := d.Token(); err != io.EOF {
		return errors.New("the arguments have trailing data after the object")
	}
	return nil
}

func syntaxError(err error) error {
	if err == nil {
		return nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("the arguments are not valid JSON: %v", err)
}

// kind names a JSON token's type for a message.
func kind(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case json.Delim:
		if t == '{' {
			return "an object"
		}
		if t == '[' {
			return "an array"
		}
	}
	return fmt.Sprintf("%v", tok)
}
