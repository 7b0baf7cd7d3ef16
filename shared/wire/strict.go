package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// DecodeStrict reads p, exactly one JSON value, into v (a pointer to a
// struct), refusing what encoding/json lets through, because a peer or a
// client that sends any of it speaks another version or is trying
// something:
//
//   - bytes that are not UTF-8, and data after the value;
//   - a key that matches a field only when case is ignored, an unknown
//     key, a key given twice (*KeyError), and a missing key of a field
//     tagged strict:"required";
//   - a value of another JSON type than its field's ("code must be a
//     string, not a number"), nesting deeper than maxDepth;
//   - null, except where Encode writes one: for a pointer or a slice
//     whose field has no omitempty (left nil);
//   - a number that does not fit its field: floats finite, integers whole
//     (1e3 is 1000) and in range.
//
// A []byte is read from standard base64, as encoding/json writes it.
// Errors name where the value is, as "files[0].name"; what names the
// whole value ("the arguments", "the message").
//
// It is the one strict JSON reader of PyBox: every frame's body
// (Decode), an image's ImageAboutFile, and the MCP tool's arguments.
func DecodeStrict(p []byte, v any, what string) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("wire: DecodeStrict into %T, not a pointer", v)
	}
	if !utf8.Valid(p) {
		return errors.New("not valid UTF-8")
	}
	s := &strict{d: json.NewDecoder(bytes.NewReader(p)), what: what}
	s.d.UseNumber()
	if err := s.value(rv.Elem(), "", false, 0); err != nil {
		return err
	}
	if _, err := s.d.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after %s", what)
	}
	return nil
}

// KeyProblem is what is wrong with an object's key (KeyError).
type KeyProblem int

// What DecodeStrict refuses of an object's keys.
const (
	KeyUnknown  KeyProblem = iota + 1 // no field has this key, exactly as written
	KeyRepeated                       // the key is given twice
	KeyMissing                        // a required field's key is not there
)

// KeyError is an object key DecodeStrict refused, or a required one it
// did not find: a caller with its own words for these (the MCP tool's
// "unknown argument") tells them apart by Problem.
type KeyError struct {
	In      string // the object: "" for the whole value, else its path, as "files[0]"
	Key     string
	Problem KeyProblem
}

func (e *KeyError) Error() string {
	where := ""
	if e.In != "" {
		where = " in " + e.In
	}
	switch e.Problem {
	case KeyUnknown:
		return fmt.Sprintf("unknown key %q%s", e.Key, where)
	case KeyRepeated:
		return fmt.Sprintf("key %q appears twice%s", e.Key, where)
	}
	return fmt.Sprintf("key %q is missing%s", e.Key, where)
}

// maxDepth bounds nesting; no message is deeper than a few levels.
const maxDepth = 16

// strict is one DecodeStrict: the tokens of p, read once, each checked
// against the Go type it goes into and stored there.
type strict struct {
	d    *json.Decoder
	what string
}

// value reads one value into v, at path; nullable says whether null is
// read (as v's zero value).
func (s *strict) value(v reflect.Value, path string, nullable bool, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s is nested more than %d deep", s.name(path), maxDepth)
	}
	tok, err := s.d.Token()
	if err != nil {
		return syntax(err)
	}
	if tok == nil {
		if !nullable {
			return s.wrongType(v.Type(), path, tok)
		}
		v.SetZero()
		return nil
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	k, raw := v.Kind(), isBytes(v.Type())
	switch t := tok.(type) {
	case json.Delim:
		switch {
		case t == '{' && k == reflect.Struct:
			return s.object(v, path, depth)
		case t == '[' && k == reflect.Slice && !raw:
			return s.array(v, path, depth)
		}
	case string:
		switch {
		case k == reflect.String:
			v.SetString(t)
			return nil
		case raw:
			return s.bytes(v, path, t)
		}
	case bool:
		if k == reflect.Bool {
			v.SetBool(t)
			return nil
		}
	case json.Number:
		if isNumber(k) {
			return s.number(v, path, string(t))
		}
	}
	return s.wrongType(v.Type(), path, tok)
}

// object reads the members of an object, its '{' read, into the struct v.
func (s *strict) object(v reflect.Value, path string, depth int) error {
	fields := fieldsOf(v.Type())
	seen := map[string]bool{}
	for s.d.More() {
		tok, err := s.d.Token()
		if err != nil {
			return syntax(err)
		}
		key := tok.(string) // inside an object, the decoder yields only string keys here
		if seen[key] {
			return &KeyError{In: path, Key: key, Problem: KeyRepeated}
		}
		seen[key] = true
		f, ok := fields.byName[key]
		if !ok {
			return &KeyError{In: path, Key: key, Problem: KeyUnknown}
		}
		if err := s.value(v.Field(f.index), join(path, key), f.nullable, depth+1); err != nil {
			return err
		}
	}
	if _, err := s.d.Token(); err != nil { // the closing brace
		return syntax(err)
	}
	for _, name := range fields.required {
		if !seen[name] {
			return &KeyError{In: path, Key: name, Problem: KeyMissing}
		}
	}
	return nil
}

// array reads the elements of an array, its '[' read, into the slice v:
// an empty array is an empty slice, not nil.
func (s *strict) array(v reflect.Value, path string, depth int) error {
	elem := v.Type().Elem()
	out := reflect.MakeSlice(v.Type(), 0, 0)
	nullable := elem.Kind() == reflect.Pointer || elem.Kind() == reflect.Slice
	for i := 0; s.d.More(); i++ {
		e := reflect.New(elem).Elem()
		if err := s.value(e, fmt.Sprintf("%s[%d]", path, i), nullable, depth+1); err != nil {
			return err
		}
		out = reflect.Append(out, e)
	}
	if _, err := s.d.Token(); err != nil { // the closing bracket
		return syntax(err)
	}
	v.Set(out)
	return nil
}

// bytes reads standard base64 into the []byte v.
func (s *strict) bytes(v reflect.Value, path string, str string) error {
	b, err := base64.StdEncoding.DecodeString(str)
	if err != nil {
		return fmt.Errorf("%s is not standard base64 (%v)", s.name(path), err)
	}
	v.SetBytes(b)
	return nil
}

// number stores the JSON number n in v, a number kind.
func (s *strict) number(v reflect.Value, path, n string) error {
	if k := v.Kind(); k == reflect.Float32 || k == reflect.Float64 {
		f, err := strconv.ParseFloat(n, v.Type().Bits())
		if err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("%s must be a finite number", s.name(path))
		}
		v.SetFloat(f)
		return nil
	}
	f, err := strconv.ParseFloat(n, 64)
	whole := err == nil && f == math.Trunc(f)
	switch {
	case !whole:
		return fmt.Errorf("%s must be a whole number, not %s", s.name(path), n)
	case v.CanInt():
		i, err := strconv.ParseInt(n, 10, 64)
		if err != nil { // an exponent, or out of range
			i, err = int64(f), boundErr(f >= -(1<<63) && f < 1<<63)
		}
		if err != nil || v.OverflowInt(i) {
			return fmt.Errorf("%s must be a whole number from %d to %d, not %s", s.name(path), minInt(v.Type()), maxInt(v.Type()), n)
		}
		v.SetInt(i)
	default:
		u, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			u, err = uint64(f), boundErr(f >= 0 && f < 1<<64)
		}
		if err != nil || v.OverflowUint(u) {
			return fmt.Errorf("%s must be a whole number from 0 to %d, not %s", s.name(path), uint64(1)<<v.Type().Bits()-1, n)
		}
		v.SetUint(u)
	}
	return nil
}

var errOutOfRange = errors.New("out of range")

func boundErr(in bool) error {
	if in {
		return nil
	}
	return errOutOfRange
}

func minInt(t reflect.Type) int64 { return -1 << (t.Bits() - 1) }
func maxInt(t reflect.Type) int64 { return 1<<(t.Bits()-1) - 1 }

func isBytes(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8
}

func isNumber(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Uint64 || k == reflect.Float32 || k == reflect.Float64
}

// wrongType says what a value of Go type t must be, and what tok is.
func (s *strict) wrongType(t reflect.Type, path string, tok json.Token) error {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var want string
	switch k := t.Kind(); {
	case k == reflect.Struct:
		want = "an object"
	case isBytes(t):
		want = "a base64 string"
	case k == reflect.Slice:
		want = "an array"
	case k == reflect.String:
		want = "a string"
	case k == reflect.Bool:
		want = "true or false"
	case isNumber(k):
		want = "a number"
	default: // a map, an interface: no message of the wire has one
		return fmt.Errorf("wire: DecodeStrict cannot read into %s (%s)", t, s.name(path))
	}
	return fmt.Errorf("%s must be %s, not %s", s.name(path), want, kindOf(tok))
}

// name is how errors name the value at path.
func (s *strict) name(path string) string {
	if path == "" {
		return s.what
	}
	return path
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// syntax is a JSON syntax error (or an end too soon) as the reader says it.
func syntax(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("not valid JSON: %v", err)
}

// kindOf names a JSON token's type for a message.
func kindOf(tok json.Token) string {
	switch tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	}
	if tok == json.Delim('{') {
		return "an object"
	}
	return "an array"
}

// structFields is what DecodeStrict knows of a struct type: its fields by
// their exact json names, and the names it requires.
type structFields struct {
	byName   map[string]field
	required []string
}

type field struct {
	index int
	// nullable: null is read, as nil, where Encode writes it: a pointer
	// or a slice without omitempty.
	nullable bool
}

var fieldCache sync.Map // reflect.Type → *structFields

// fieldsOf is t's structFields, worked out once per type.
func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	fs := &structFields{byName: map[string]field{}}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		k := f.Type.Kind()
		omitempty := strings.Contains(","+opts+",", ",omitempty,")
		fs.byName[name] = field{index: i, nullable: (k == reflect.Pointer || k == reflect.Slice) && !omitempty}
		if f.Tag.Get("strict") == "required" {
			fs.required = append(fs.required, name)
		}
	}
	fieldCache.Store(t, fs)
	return fs
}
