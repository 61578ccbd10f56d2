package schemas

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// fastNode is a schema in the subset tool schemas almost always use. Validate
// asks it first: its yes is final, its no goes to the full validator, which
// explains. A differential test holds the two together.
type fastNode struct {
	types      uint8 // bit set of fast* kinds; 0 means any
	props      map[string]*fastNode
	required   []string
	additional int // 0 any, 1 none, 2 must match extra
	extra      *fastNode
	items      *fastNode
	enum       []string // string enum; nil when absent
	minLen     int
	maxLen     int // -1 when absent
	minItems   int
	maxItems   int // -1 when absent
	// numeric bounds, only with plain-integer values; an instance that is
	// not a plain integer of at most 15 digits goes to the full validator.
	min, max bound
}

// bound is a minimum or maximum: v, exclusive or not; unset when !set.
type bound struct {
	v         int64
	set, excl bool
}

const (
	fastString = 1 << iota
	fastNumber
	fastInteger
	fastBoolean
	fastObject
	fastArray
	fastNull
)

var fastTypes = map[string]uint8{"string": fastString, "number": fastNumber, "integer": fastInteger,
	"boolean": fastBoolean, "object": fastObject, "array": fastArray, "null": fastNull}

// annotations never change whether an instance is valid.
var annotations = map[string]bool{"description": true, "title": true, "default": true, "examples": true,
	"$schema": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true}

// buildFast returns the fastNode of schema doc, or nil when any keyword is
// outside the subset ("format" included: whether it asserts depends on the draft).
func buildFast(doc any) *fastNode {
	m, ok := doc.(map[string]any)
	if !ok {
		return nil
	}
	n := &fastNode{maxLen: -1, maxItems: -1}
	for k, v := range m {
		switch {
		case annotations[k]:
		case k == "type":
			switch t := v.(type) {
			case string:
				if n.types = fastTypes[t]; n.types == 0 {
					return nil
				}
			case []any:
				for _, x := range t {
					s, _ := x.(string)
					if fastTypes[s] == 0 {
						return nil
					}
					n.types |= fastTypes[s]
				}
			default:
				return nil
			}
		case k == "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			n.props = make(map[string]*fastNode, len(props))
			for name, sub := range props {
				if n.props[name] = buildFast(sub); n.props[name] == nil {
					return nil
				}
			}
		case k == "required":
			if n.required, ok = stringList(v); !ok {
				return nil
			}
		case k == "additionalProperties":
			switch a := v.(type) {
			case bool:
				if !a {
					n.additional = 1
				}
			default:
				if n.extra = buildFast(a); n.extra == nil {
					return nil
				}
				n.additional = 2
			}
		case k == "items":
			if n.items = buildFast(v); n.items == nil {
				return nil
			}
		case k == "enum":
			if n.enum, ok = stringList(v); !ok || len(n.enum) == 0 {
				return nil
			}
		case k == "minimum", k == "maximum", k == "exclusiveMinimum", k == "exclusiveMaximum":
			num, ok := v.(json.Number)
			if !ok || !isPlainInteger(string(num)) || len(num) > 16 {
				return nil
			}
			i, err := num.Int64()
			if err != nil {
				return nil
			}
			b := map[string]*bound{"minimum": &n.min, "maximum": &n.max, "exclusiveMinimum": &n.min, "exclusiveMaximum": &n.max}[k]
			if b.set { // minimum and exclusiveMinimum together: the full validator holds the input to both
				return nil
			}
			*b = bound{v: i, set: true, excl: strings.HasPrefix(k, "exclusive")}
		case k == "minLength", k == "maxLength", k == "minItems", k == "maxItems":
			num, ok := v.(json.Number)
			i, err := num.Int64()
			if !ok || err != nil || i < 0 || i > 1<<30 {
				return nil
			}
			*map[string]*int{"minLength": &n.minLen, "maxLength": &n.maxLen, "minItems": &n.minItems, "maxItems": &n.maxItems}[k] = int(i)
		default:
			return nil
		}
	}
	return n
}

// ok reports whether v certainly satisfies n; false means "ask the full
// validator", not "invalid".
func (n *fastNode) ok(v any) bool {
	switch x := v.(type) {
	case string:
		return n.okString(x)
	case json.Number:
		return n.okNumber(string(x))
	case bool:
		return n.okKind(fastBoolean)
	case nil:
		return n.okKind(fastNull)
	case map[string]any:
		if !n.okKind(fastObject) {
			return false
		}
		for _, r := range n.required {
			if _, ok := x[r]; !ok {
				return false
			}
		}
		for k, val := range x {
			sub, ok := n.member(k)
			if !ok || sub != nil && !sub.ok(val) {
				return false
			}
		}
		return true
	case []any:
		if !n.okKind(fastArray) || !n.okCount(len(x)) {
			return false
		}
		if n.items != nil {
			for _, it := range x {
				if !n.items.ok(it) {
					return false
				}
			}
		}
		return true
	}
	return false
}

// okString is ok for a string.
func (n *fastNode) okString(x string) bool {
	if !n.allows(fastString) {
		return false
	}
	if n.enum != nil && !slices.Contains(n.enum, x) {
		return false
	}
	if n.minLen > 0 || n.maxLen >= 0 {
		l := utf8.RuneCountInString(x)
		if l < n.minLen || n.maxLen >= 0 && l > n.maxLen {
			return false
		}
	}
	return true
}

// okNumber is ok for a JSON number written as s.
func (n *fastNode) okNumber(s string) bool {
	if n.enum != nil {
		return false
	}
	if (n.min.set || n.max.set) && !n.inBounds(s) {
		return false
	}
	return n.allows(fastNumber) || n.types&fastInteger != 0 && isPlainInteger(s)
}

// okKind is ok for a literal (true, false, null), or its first check of an
// object or an array: of an allowed kind, and no enum (only strings have one).
func (n *fastNode) okKind(kind uint8) bool { return n.enum == nil && n.allows(kind) }

// okCount is ok's check of an array's length.
func (n *fastNode) okCount(items int) bool {
	return items >= n.minItems && (n.maxItems < 0 || items <= n.maxItems)
}

// member is the node an object's member named k must satisfy: nil when
// any value will do; ok false when the object may not have it at all.
func (n *fastNode) member(k string) (sub *fastNode, ok bool) {
	if p, ok := n.props[k]; ok {
		return p, true
	}
	switch n.additional {
	case 1:
		return nil, false
	case 2:
		return n.extra, true
	}
	return nil, true
}

func (n *fastNode) allows(kind uint8) bool { return n.types == 0 || n.types&kind != 0 }

// stringList is v as a list of strings; false when it is not one.
func stringList(v any) ([]string, bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// isPlainInteger reports whether a JSON number is written as digits with an
// optional minus.
func isPlainInteger(s string) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// inBounds checks the numeric bounds for a plain integer of at most 15
// digits (exact in int64); anything else is left to the full validator.
func (n *fastNode) inBounds(s string) bool {
	if !isPlainInteger(s) || len(s) > 16 {
		return false
	}
	i, err := json.Number(s).Int64()
	if err != nil {
		return false
	}
	switch {
	case n.min.set && (i < n.min.v || n.min.excl && i == n.min.v):
		return false
	case n.max.set && (i > n.max.v || n.max.excl && i == n.max.v):
		return false
	}
	return true
}
