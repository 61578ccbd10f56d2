// Package schemas compiles tool input schemas ([Compile], fail closed, nothing
// fetched), validates inputs with problems a model can act on
// ([Schema.Validate]), parses inputs as models send them ([ParseInput]),
// derives schemas from Go types ([For]) and renders provider listings
// ([Export]). See docs/schemas.md.
package schemas

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/toolbus/toolbus/bus"
)

// MaxSchemaBytes bounds a schema's size.
const MaxSchemaBytes = 64 << 10

// schemaURL is the location the compiler gives a schema; it is never fetched.
const schemaURL = "toolbus:///input_schema.json"

// Schema is a compiled object schema; safe for concurrent use.
type Schema struct {
	raw   json.RawMessage
	doc   any    // the decoded schema (UseNumber), read only
	base  string // Location of the root schema without its fragment
	sch   *jsonschema.Schema
	fast  *fastNode // nil when the schema is outside the fast subset
	mult  []int64   // evaluations per input value at each depth (cost.go)
	nodes int       // subschemas
}

// Subschemas returns the number of subschemas of s (the schema itself
// included), which bounds the cost of compiling it; see MaxSubschemas.
func (s *Schema) Subschemas() int { return s.nodes }

// refusedError is the error of the loader that refuses every URL.
type refusedError struct{ url string }

func (e *refusedError) Error() string { return "schemas: refusing to load " + e.url }

func refuse(url string) (io.ReadCloser, error) { return nil, &refusedError{url: url} }

// Compile compiles raw as a tool input schema, failing closed ("schemas: ..."
// errors) on invalid JSON, a non-object schema, a compile error, an external
// $ref, or more than MaxSchemaBytes compact. Nothing is ever fetched.
func Compile(raw json.RawMessage) (*Schema, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("schemas: schema is empty")
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("schemas: schema is not valid JSON: %v", err)
	}
	if buf.Len() > MaxSchemaBytes {
		return nil, fmt.Errorf("schemas: schema is %d bytes, more than the limit of %d", buf.Len(), MaxSchemaBytes)
	}
	compact := buf.Bytes()
	key := cacheKey(sha256.Sum256(compact))
	if s, err, ok := cache.get(key); ok {
		return s, err
	}
	s, err := compile(compact)
	cache.put(key, s, err, len(compact))
	return s, err
}

// compile compiles a compact schema of at most MaxSchemaBytes.
func compile(compact []byte) (s *Schema, err error) {
	defer func() {
		if r := recover(); r != nil { // fail closed on a validator bug
			s, err = nil, fmt.Errorf("schemas: schema does not compile: %v", r)
		}
	}()
	// Before anything recursive: the compiler's cost grows with the cube
	// of the depth (section 13).
	if jsonDepth(compact, MaxSchemaDepth) > MaxSchemaDepth {
		return nil, fmt.Errorf("schemas: schema nests deeper than %d levels of objects and arrays", MaxSchemaDepth)
	}
	doc, err := decodeInput(compact) // json.Compact checked it: one JSON value
	if err != nil {
		return nil, fmt.Errorf("schemas: schema is not valid JSON: %v", err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("schemas: schema must be a JSON object, got %s", Kind(compact))
	}
	if t, ok := m["type"].(string); !ok || t != "object" {
		got := "none"
		if v, ok := m["type"]; ok {
			got = render(v)
		}
		return nil, fmt.Errorf(`schemas: schema must have "type": "object" at the top level, got %s`, got)
	}
	var w walk
	if err := checkRefs(m, &w); err != nil {
		return nil, err
	}

	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.LoadURL = refuse
	c.Formats["regex"] = isRegex
	if err := c.AddResource(schemaURL, bytes.NewReader(compact)); err != nil {
		return nil, fmt.Errorf("schemas: schema is not valid JSON: %v", err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, compileError(m, err)
	}
	g, err := buildGraph(sch)
	if err != nil {
		return nil, err
	}
	mult := g.multipliers(sch)
	for d, m := range mult {
		if m > MaxChecksPerValue {
			return nil, fmt.Errorf("schemas: schema is too costly to validate: an input value at depth %d may be checked against %s subschemas (references multiply them), more than the limit of %d", d, count(m), MaxChecksPerValue)
		}
	}
	base, _, _ := strings.Cut(sch.Location, "#")
	return &Schema{raw: compact, doc: doc, base: base, sch: sch, fast: buildFast(doc), mult: mult, nodes: w.nodes}, nil
}

// count renders an estimate, saturated ones as "more than".
func count(n int64) string {
	if n >= evalCap {
		return "astronomically many"
	}
	return strconv.FormatInt(n, 10)
}

// Raw returns the schema as given, in compact JSON. The caller must not modify it.
func (s *Schema) Raw() json.RawMessage { return s.raw }

// Validate validates an instance decoded with UseNumber and returns its
// problems (nil when valid): leaf causes, each with the JSON pointer of the
// instance ("/" for the root) and a short message ("missing property 'city'"),
// sorted, without duplicates. Safe for concurrent use.
func (s *Schema) Validate(v any) (details []bus.Detail) {
	defer func() {
		if r := recover(); r != nil { // fail closed on a validator bug
			details = []bus.Detail{{Path: "/", Message: fmt.Sprintf("input could not be validated: %v", r)}}
		}
	}()
	if s.fast != nil && s.fast.ok(v) {
		return nil
	}
	if d := s.tooCostly(v); d != nil {
		return []bus.Detail{*d}
	}
	err := s.sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []bus.Detail{{Path: "/", Message: "input could not be validated: " + strings.TrimPrefix(err.Error(), "jsonschema: ")}}
	}
	details = s.leaves(ve, nil)
	if len(details) == 0 { // never seen; an error must not read as valid
		details = append(details, bus.Detail{Path: cmp.Or(ve.InstanceLocation, "/"), Message: ve.Message})
	}
	details = sortDetails(details)
	if len(details) > MaxDetails {
		more := len(details) - (MaxDetails - 1)
		details = append(details[:MaxDetails-1:MaxDetails-1], bus.Detail{Path: "/", Message: fmt.Sprintf("and %d more problems", more)})
	}
	return details
}

func sortDetails(d []bus.Detail) []bus.Detail {
	slices.SortFunc(d, func(a, b bus.Detail) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Message, b.Message))
	})
	return slices.Compact(d)
}

// leaves appends the leaf errors of ve to out, one Detail per problem.
func (s *Schema) leaves(ve *jsonschema.ValidationError, out []bus.Detail) []bus.Detail {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			out = s.leaves(c, out)
		}
		return out
	}
	path := cmp.Or(ve.InstanceLocation, "/")
	kw := ve.KeywordLocation[strings.LastIndexByte(ve.KeywordLocation, '/')+1:]
	switch {
	case kw == "required" && strings.HasPrefix(ve.Message, "missing properties: "):
		for _, name := range quotedNames(strings.TrimPrefix(ve.Message, "missing properties: ")) {
			out = append(out, bus.Detail{Path: path, Message: "missing property " + name})
		}
		return out
	case kw == "additionalProperties" && strings.HasPrefix(ve.Message, "additionalProperties "):
		list := strings.TrimSuffix(strings.TrimPrefix(ve.Message, "additionalProperties "), " not allowed")
		for _, name := range quotedNames(list) {
			out = append(out, bus.Detail{Path: path, Message: "additional property " + name + " is not allowed"})
		}
		return out
	case (kw == "additionalProperties" || kw == "unevaluatedProperties") && ve.Message == "not allowed":
		i := strings.LastIndexByte(ve.InstanceLocation, '/')
		if i >= 0 {
			name := unescape(ve.InstanceLocation[i+1:])
			return append(out, bus.Detail{Path: cmp.Or(ve.InstanceLocation[:i], "/"),
				Message: "additional property " + quote(name) + " is not allowed"})
		}
	case kw == "enum":
		v, _ := s.lookup(ve.AbsoluteKeywordLocation)
		if vals, ok := v.([]any); ok && len(vals) > 0 {
			return append(out, bus.Detail{Path: path, Message: oneOf(vals)})
		}
	case kw == "const":
		if v, ok := s.lookup(ve.AbsoluteKeywordLocation); ok {
			return append(out, bus.Detail{Path: path, Message: "value must be " + clip(render(v))})
		}
	}
	return append(out, bus.Detail{Path: path, Message: ve.Message})
}

// lookup returns the value at keyword location loc; false outside this document.
func (s *Schema) lookup(loc string) (any, bool) {
	url, frag, ok := strings.Cut(loc, "#")
	if !ok || url != s.base {
		return nil, false
	}
	return Pointer(s.doc, frag)
}

// Pointer returns the value at the JSON pointer ptr (RFC 6901: "" is v
// itself, "/a/0" a member's first item) in the decoded JSON value v.
func Pointer(v any, ptr string) (any, bool) {
	if ptr == "" {
		return v, true
	}
	if ptr[0] != '/' {
		return nil, false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = unescape(tok)
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || tok != strconv.Itoa(i) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// unescape decodes one JSON pointer token.
func unescape(tok string) string {
	if strings.IndexByte(tok, '~') < 0 {
		return tok
	}
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
}

// maxListed bounds the length of an enum message.
const maxListed = 300

// oneOf renders an enum failure: value must be "a", or value must be one of
// "a", "b".
func oneOf(vals []any) string {
	if len(vals) == 1 {
		return "value must be " + clip(render(vals[0]))
	}
	var b strings.Builder
	b.WriteString("value must be one of ")
	for i, v := range vals {
		if i > 0 {
			if b.Len() > maxListed {
				fmt.Fprintf(&b, ", ... (%d more)", len(vals)-i)
				break
			}
			b.WriteString(", ")
		}
		b.WriteString(clip(render(v)))
	}
	return b.String()
}

func clip(s string) string {
	if len(s) > maxListed {
		return s[:maxListed] + "..."
	}
	return s
}

// render returns v as compact JSON, without HTML escaping.
func render(v any) string {
	b, err := marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// quotedNames splits the validator's list of single-quoted names ('a', 'b\'c')
// into its items, each still quoted.
func quotedNames(list string) []string {
	var names []string
	for i := 0; i < len(list); i++ {
		if list[i] != '\'' {
			continue
		}
		j := i + 1
		for j < len(list) && list[j] != '\'' {
			if list[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(list) {
			break
		}
		names = append(names, list[i:j+1])
		i = j
	}
	if len(names) == 0 {
		return []string{list}
	}
	return names
}

// quote single-quotes a property name the way the validator does.
func quote(s string) string {
	q := strconv.Quote(s)
	q = strings.ReplaceAll(q, `\"`, `"`)
	q = strings.ReplaceAll(q, `'`, `\'`)
	return "'" + q[1:len(q)-1] + "'"
}

// Keywords holding schemas: checkRefs walks only these, so "$ref" inside
// "default", "enum" or "const" data is not taken for a reference.
var (
	refKeywords = []string{"$ref", "$dynamicRef", "$recursiveRef"}
	subKeywords = []string{
		"additionalItems", "additionalProperties", "allOf", "anyOf", "contains",
		"contentSchema", "else", "if", "items", "not", "oneOf", "prefixItems",
		"propertyNames", "then", "unevaluatedItems", "unevaluatedProperties",
	}
	mapKeywords = []string{"$defs", "definitions", "dependencies", "dependentSchemas", "patternProperties", "properties"}
)

// checkRefs refuses the first reference that is not a same-document fragment,
// more than MaxSubschemas subschemas and patterns past their bounds (counted
// in w). The caller checked the depth.
func checkRefs(v any, w *walk) error {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if err := checkRefs(e, w); err != nil {
				return err
			}
		}
	case bool:
		w.nodes++
	case map[string]any:
		if w.nodes++; w.nodes > MaxSubschemas {
			return fmt.Errorf("schemas: schema has more than %d subschemas", MaxSubschemas)
		}
		if err := w.patterns(x); err != nil {
			return err
		}
		for _, kw := range refKeywords {
			if ref, ok := x[kw].(string); ok && !strings.HasPrefix(ref, "#") {
				return fmt.Errorf("schemas: external %s %q is not allowed (only same-document references such as \"#/$defs/name\")", kw, ref)
			}
		}
		for _, kw := range subKeywords {
			if err := checkRefs(x[kw], w); err != nil {
				return err
			}
		}
		for _, kw := range mapKeywords {
			m, ok := x[kw].(map[string]any)
			if !ok {
				continue
			}
			for _, k := range slices.Sorted(maps.Keys(m)) {
				if err := checkRefs(m[k], w); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// compileError turns a compiler error into a readable one.
func compileError(doc map[string]any, err error) error {
	if refused, ok := errors.AsType[*refusedError](err); ok {
		if sch, _ := doc["$schema"].(string); sch != "" && strings.HasPrefix(refused.url, strings.TrimSuffix(sch, "#")) {
			return fmt.Errorf("schemas: unsupported $schema %q (known: draft-04, -06, -07, 2019-09, 2020-12)", sch)
		}
		return fmt.Errorf("schemas: external reference %q is not allowed (nothing is fetched)", refused.url)
	}
	if ve, ok := errors.AsType[*jsonschema.ValidationError](err); ok { // the schema does not validate against its meta-schema
		var s Schema
		details := sortDetails(s.leaves(ve, nil))
		msgs := make([]string, 0, len(details))
		for i, d := range details {
			if i == 5 {
				msgs = append(msgs, fmt.Sprintf("and %d more", len(details)-i))
				break
			}
			msgs = append(msgs, d.Path+": "+d.Message)
		}
		return fmt.Errorf("schemas: invalid schema: %s", strings.Join(msgs, "; "))
	}
	msg := err.Error()
	if se, ok := errors.AsType[*jsonschema.SchemaError](err); ok && se.Err != nil {
		msg = se.Err.Error()
	}
	msg = strings.ReplaceAll(msg, "jsonschema: ", "")
	msg = strings.ReplaceAll(msg, " in "+schemaURL, "")
	msg = strings.ReplaceAll(msg, schemaURL, "")
	return fmt.Errorf("schemas: invalid schema: %s", msg)
}

// tooCostly returns the problem of an input too deep or too costly (cost.go) to validate.
func (s *Schema) tooCostly(v any) *bus.Detail {
	counts, ok := levels(v)
	if !ok {
		return &bus.Detail{Path: "/", Message: depthError().Error()}
	}
	values := 0
	for _, n := range counts {
		values += n
	}
	if est, max := checks(s.mult, counts), budget(values); est > max {
		return &bus.Detail{Path: "/", Message: fmt.Sprintf(
			"input is too costly to check against this schema: about %s subschema checks for its %d values, more than the limit of %d", count(est), values, max)}
	}
	return nil
}

// The compile cache, keyed by the SHA-256 of the compact schema, keeps
// results and refusals alike so a schema is compiled once per process.
const (
	CacheEntries = 512     // schemas kept
	CacheBytes   = 8 << 20 // compact bytes kept
)

type cacheKey [sha256.Size]byte

type cacheEntry struct {
	s    *Schema
	err  error
	size int
}

// compileCache is an LRU bounded by entries and by bytes.
type compileCache struct {
	mu           sync.Mutex // guards every field
	lru          *simplelru.LRU[cacheKey, cacheEntry]
	bytes, maxB  int
	hits, misses uint64
}

var cache = newCompileCache(CacheEntries, CacheBytes)

func newCompileCache(entries, bytes int) *compileCache {
	c := &compileCache{maxB: bytes}
	c.lru, _ = simplelru.NewLRU(entries, func(_ cacheKey, e cacheEntry) { c.bytes -= e.size })
	return c
}

func (c *compileCache) get(k cacheKey) (*Schema, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(k)
	if !ok {
		c.misses++
		return nil, nil, false
	}
	c.hits++
	return e.s, e.err, true
}

func (c *compileCache) put(k cacheKey, s *Schema, err error, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.lru.Get(k); ok || size > c.maxB {
		return
	}
	c.lru.Add(k, cacheEntry{s: s, err: err, size: size})
	c.bytes += size
	for c.bytes > c.maxB {
		c.lru.RemoveOldest()
	}
}

// CacheStats reports the compile cache's hits and misses, and the schemas held.
func CacheStats() (hits, misses uint64, held int) {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	return cache.hits, cache.misses, cache.lru.Len()
}
