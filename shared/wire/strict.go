package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// decodeStrict unmarshals exactly one JSON value into v, refusing what
// encoding/json lets through: keys that match a field only when case is
// ignored, unknown keys, duplicate keys and trailing data. A peer that
// sends any of these speaks another version or is trying something.
func decodeStrict(p []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	if err := checkValue(d, reflect.TypeOf(v).Elem(), 0); err != nil {
		return err
	}
	if _, err := d.Token(); err == nil {
		return errors.New("trailing data after the message")
	}
	return json.Unmarshal(p, v)
}

// maxDepth bounds nesting; no message is deeper than a few levels.
const maxDepth = 16

// checkValue reads one value from d and checks its object keys against the
// json tags of t, recursively.
func checkValue(d *json.Decoder, t reflect.Type, depth int) error {
	if depth > maxDepth {
		return errors.New("message nested too deeply")
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := d.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar: json.Unmarshal checks its type
	}
	switch delim {
	case '[':
		var elem reflect.Type // nil: the element's shape is not checked
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for d.More() {
			if err := checkValue(d, elem, depth+1); err != nil {
				return err
			}
		}
	case '{':
		if err := checkObject(d, t, depth); err != nil {
			return err
		}
	}
	_, err = d.Token() // the closing delimiter
	return err
}

func checkObject(d *json.Decoder, t reflect.Type, depth int) error {
	fields := jsonFields(t)
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		key := tok.(string)
		if seen[key] {
			return fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		ft, known := fields[key]
		if t != nil && t.Kind() == reflect.Struct && !known {
			return fmt.Errorf("unknown key %q", key)
		}
		if err := checkValue(d, ft, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// jsonFields maps the exact json names of a struct's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	if t == nil || t.Kind() != reflect.Struct {
		return fields
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}
