package schemas

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"
)

// For derives the input schema of struct type T (or a pointer to one) with
// invopop/jsonschema: json tags name properties, fields without omitempty or
// omitzero are required, description tags describe, every struct is closed,
// and everything is inlined (docs/schemas.md). It fails for a non-struct, a
// recursive type, a type JSON cannot hold, or a schema Compile rejects.
func For[T any]() (json.RawMessage, error) {
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("schemas: For[%s]: not a struct", t)
	}
	if err := checkRecursion(t, map[reflect.Type]bool{}, map[reflect.Type]bool{}); err != nil {
		return nil, fmt.Errorf("schemas: For[%s]: %w", t, err)
	}
	s, err := reflectType(t)
	if err != nil {
		return nil, fmt.Errorf("schemas: For[%s]: %w", t, err)
	}
	if err := strip(s); err != nil {
		return nil, fmt.Errorf("schemas: For[%s]: %w", t, err)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("schemas: For[%s]: %w", t, err)
	}
	if _, err := Compile(raw); err != nil {
		return nil, fmt.Errorf("schemas: For[%s]: %w", t, err)
	}
	return raw, nil
}

func reflectType(t reflect.Type) (s *jsonschema.Schema, err error) {
	defer func() {
		if r := recover(); r != nil { // invopop panics on chan, func, complex
			err = fmt.Errorf("%v", r)
		}
	}()
	r := &jsonschema.Reflector{
		Anonymous:      true,
		DoNotReference: true,
		ExpandedStruct: true,
		LookupComment:  descriptionTag,
	}
	return r.ReflectFromType(t), nil
}

// descriptionTag returns the description:"..." tag of field name of struct t.
func descriptionTag(t reflect.Type, name string) string {
	if name == "" || t.Kind() != reflect.Struct {
		return ""
	}
	if f, ok := t.FieldByName(name); ok {
		return f.Tag.Get("description")
	}
	return ""
}

// strip removes $schema, $id and titles, failing on references that survived
// inlining. It writes only non-empty fields: invopop shares true/false schemas.
func strip(s *jsonschema.Schema) error {
	if s == nil {
		return nil
	}
	if s.Ref != "" || s.DynamicRef != "" || len(s.Definitions) > 0 {
		return fmt.Errorf("schema has a reference (%q) that cannot be inlined", s.Ref+s.DynamicRef)
	}
	for _, f := range []*string{&s.Version, (*string)(&s.ID), &s.Title} {
		if *f != "" {
			*f = ""
		}
	}
	for _, k := range []string{"$ref", "$dynamicRef", "$defs", "definitions"} {
		if _, ok := s.Extras[k]; ok {
			return fmt.Errorf("schema has a %q extra that cannot be inlined", k)
		}
	}
	for _, k := range []string{"$schema", "$id", "title"} {
		delete(s.Extras, k)
	}
	subs := []*jsonschema.Schema{s.Not, s.If, s.Then, s.Else, s.Items, s.Contains,
		s.AdditionalProperties, s.PropertyNames, s.ContentSchema}
	subs = append(subs, s.AllOf...)
	subs = append(subs, s.AnyOf...)
	subs = append(subs, s.OneOf...)
	subs = append(subs, s.PrefixItems...)
	for _, k := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
		subs = append(subs, s.DependentSchemas[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.PatternProperties)) {
		subs = append(subs, s.PatternProperties[k])
	}
	if s.Properties != nil {
		for p := s.Properties.Oldest(); p != nil; p = p.Next() {
			subs = append(subs, p.Value)
		}
	}
	for _, sub := range subs {
		if err := strip(sub); err != nil {
			return err
		}
	}
	return nil
}

var (
	customSchemaType = reflect.TypeFor[interface{ JSONSchema() *jsonschema.Schema }]()
	aliasSchemaType  = reflect.TypeFor[interface{ JSONSchemaAlias() any }]()
)

// checkRecursion fails when t refers to itself: invopop would overflow the
// stack, which cannot be recovered.
func checkRecursion(t reflect.Type, onPath, done map[reflect.Type]bool) error {
	if done[t] {
		return nil
	}
	if onPath[t] {
		return fmt.Errorf("recursive type %s cannot be inlined", t)
	}
	onPath[t] = true
	defer delete(onPath, t)

	var next []reflect.Type
	switch {
	case t.Kind() == reflect.Pointer:
		next = append(next, t.Elem())
	case t.Implements(aliasSchemaType):
		next = append(next, reflect.TypeOf(reflect.New(t).Interface().(interface{ JSONSchemaAlias() any }).JSONSchemaAlias()))
	case t.Implements(customSchemaType):
		// the type supplies its own schema; strip checks it for references
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map:
		next = append(next, t.Elem())
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.Anonymous && !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			schemaName, _, _ := strings.Cut(f.Tag.Get("jsonschema"), ",")
			if name == "-" || schemaName == "-" {
				continue
			}
			next = append(next, f.Type)
		}
	}
	for _, n := range next {
		if n == nil {
			continue
		}
		if err := checkRecursion(n, onPath, done); err != nil {
			return err
		}
	}
	done[t] = true
	return nil
}
