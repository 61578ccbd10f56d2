package worker

import (
	"encoding/json"
	"reflect"
	"strings"
)

// A typed tool whose input schema its author wrote is guarded against keys
// in another case: the router checked the input's exact keys against that
// schema, while the decoder (goccy/go-json, as encoding/json) also fills a
// field from a key that differs from the field's JSON name only in case, a
// key the schema may leave unchecked: {"mode":"safe","MODE":"rm"} ran in
// mode rm (docs/security.md). A schema derived by schemas.For closes every
// object, so the router refuses such keys itself.

// foldedKey returns a key of the JSON input that the decoder would put in
// a field of t (at any depth t's fields reach) although it is not that
// field's JSON name; "" when there is none or the input does not decode.
func foldedKey(t reflect.Type, input json.RawMessage) string {
	var v any
	if json.Unmarshal(input, &v) != nil {
		return "" // the typed decode reports it
	}
	return foldedIn(t, v)
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

func foldedIn(t reflect.Type, v any) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		return "" // it reads its own keys
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, _ := v.(map[string]any)
		names := map[string]reflect.Type{}
		fieldNames(t, names)
		for k, sub := range obj {
			if ft, ok := names[k]; ok {
				if bad := foldedIn(ft, sub); bad != "" {
					return bad
				}
				continue
			}
			for name := range names {
				if strings.EqualFold(k, name) {
					return k
				}
			}
		}
	case reflect.Slice, reflect.Array:
		arr, _ := v.([]any)
		for _, e := range arr {
			if bad := foldedIn(t.Elem(), e); bad != "" {
				return bad
			}
		}
	case reflect.Map:
		obj, _ := v.(map[string]any)
		for _, e := range obj {
			if bad := foldedIn(t.Elem(), e); bad != "" {
				return bad
			}
		}
	}
	return ""
}

// fieldNames adds the JSON names of struct t's fields to names, with each
// field's type: the tag's name or the field's, an untagged embedded
// struct's fields promoted, as encoding/json matches them (every candidate
// of a name conflict kept: refusing more is safe).
func fieldNames(t reflect.Type, names map[string]reflect.Type) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				fieldNames(ft, names)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = ft
	}
}
