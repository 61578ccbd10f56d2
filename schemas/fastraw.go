package schemas

import (
	"bytes"
	"cmp"
	"encoding/json"
	"unsafe"

	"github.com/toolbus/toolbus/bus"
)

// CheckInput is ParseInput and then s.Validate (no schema: s nil) for a
// call's input, the way the router checks every call: it returns the
// input as the tool gets it, or the schema's problems, or ParseInput's
// error, exactly as the two would. The usual input, an object that s's
// fast path accepts (or any object when there is no schema), is judged
// from its bytes (okJSON) and not decoded: no map, string or boxed value
// is made for it. Any other input goes the long way.
func CheckInput(raw json.RawMessage, s *Schema) (json.RawMessage, []bus.Detail, error) {
	if b := bytes.TrimSpace(raw); len(b) > 0 && b[0] == '{' && (s == nil || s.fast != nil) {
		if in, ok := checkFast(b, s); ok {
			return in, nil, nil
		}
	}
	input, v, err := ParseInput(raw)
	if err != nil {
		return nil, nil, err
	}
	if s != nil {
		if problems := s.Validate(v); len(problems) > 0 {
			return nil, problems, nil
		}
	}
	return input, nil, nil
}

// checkFast is CheckInput's short way for b, which starts with '{': ok
// when b is compact JSON (compactValue), nested no deeper than
// MaxInputDepth, and certainly valid against s (okJSON); then b is the
// input. Anything else, errors included, is left to the long way, which
// tells them as it always did.
func checkFast(b []byte, s *Schema) (in json.RawMessage, ok bool) {
	if compactValue(b, 0, MaxInputDepth) != len(b) {
		return nil, false
	}
	if s != nil {
		defer func() { // a walker bug: the long way decides
			if recover() != nil {
				in, ok = nil, false
			}
		}()
		if end, good := s.fast.okJSON(b, 0); !good || end != len(b) {
			return nil, false
		}
	}
	return b, true
}

// compactValue returns where the JSON value at b[i] ends, -1 when there
// is none or it is not compact: a byte of whitespace outside its strings,
// or objects and arrays nested more than depth levels. One pass where
// json.Valid, jsonDepth and a scan for that whitespace would take three
// (FuzzCompactValue holds it to them); what it refuses goes the long way.
func compactValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return compactString(b, i)
	case c == '{' || c == '[':
		if depth == 0 {
			return -1
		}
		end := c + 2 // '}' or ']'
		if i++; i < len(b) && b[i] == end {
			return i + 1
		}
		for i < len(b) {
			if c == '{' {
				if i = compactString(b, i); i < 0 || i >= len(b) || b[i] != ':' {
					return -1
				}
				i++
			}
			if i = compactValue(b, i, depth-1); i < 0 || i >= len(b) {
				return -1
			}
			switch b[i] {
			case end:
				return i + 1
			case ',':
				i++
			default:
				return -1
			}
		}
		return -1
	case c == 't':
		return literalEnd(b, i, "true")
	case c == 'f':
		return literalEnd(b, i, "false")
	case c == 'n':
		return literalEnd(b, i, "null")
	}
	return compactNumber(b, i)
}

// compactString returns where the JSON string at b[i] ends, -1 when there
// is none.
func compactString(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < ' ':
			return -1
		case c == '\\':
			if i++; i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return -1
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f' }

// literalEnd returns where w, at b[i], ends; -1 when it is not there.
func literalEnd(b []byte, i int, w string) int {
	if len(b)-i >= len(w) && string(b[i:i+len(w)]) == w {
		return i + len(w)
	}
	return -1
}

// compactNumber returns where the JSON number at b[i] ends, -1 when there
// is none: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func compactNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if i = digitsEnd(b, i); i < 0 {
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digitsEnd(b, i+1); i < 0 {
			return -1
		}
	}
	if i < len(b) && b[i]|0x20 == 'e' {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		return digitsEnd(b, i)
	}
	return i
}

// digitsEnd returns where the run of digits at b[i] ends, -1 when it is empty.
func digitsEnd(b []byte, i int) int {
	j := i
	for j < len(b) && '0' <= b[j] && b[j] <= '9' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// anyNode accepts any value: okJSON walks with it past a value nothing
// constrains (a member additionalProperties allows, an array's items
// without an items schema).
var anyNode = &fastNode{maxLen: -1, maxItems: -1}

// okJSON is ok for the value that decodeValid makes of the JSON at b[i]
// (b valid JSON, its depth bounded): it reports whether that value
// certainly satisfies n, and where it ends. It reads the bytes as
// decodeValid does; where decoding would be needed to know (an escape or
// a byte outside printable ASCII in an object's key, or in a string whose
// content n constrains) it says false, which means "decode and ask the
// validator", never "invalid". A key given twice is judged at each
// occurrence, the decoded value only at its last: stricter, never looser.
func (n *fastNode) okJSON(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		end, plain := stringEnd(b, i)
		switch {
		case end < 0:
			return i, false
		case plain:
			return end, n.okString(view(b[i+1 : end-1]))
		case n.enum == nil && n.minLen <= 0 && n.maxLen < 0:
			return end, n.allows(fastString) // its content does not matter
		}
		return end, false
	case c == '{':
		return n.okObject(b, i)
	case c == '[':
		return n.okArray(b, i)
	case c == 't':
		return i + 4, n.okKind(fastBoolean)
	case c == 'f':
		return i + 5, n.okKind(fastBoolean)
	case c == 'n':
		return i + 4, n.okKind(fastNull)
	case c == '-' || c >= '0' && c <= '9':
		j := i + 1
		for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-') {
			j++
		}
		return j, n.okNumber(view(b[i:j]))
	}
	return i, false
}

// okObject is okJSON for the object at b[i].
func (n *fastNode) okObject(b []byte, i int) (int, bool) {
	if !n.okKind(fastObject) || len(n.required) > 64 {
		return i, false
	}
	var seen uint64 // bit r: required[r] is present
	i, more, ok := openSeq(b, i, '}')
	for more {
		if b[i] != '"' {
			return i, false
		}
		end, plain := stringEnd(b, i)
		if end < 0 || !plain {
			return i, false
		}
		k := view(b[i+1 : end-1])
		if i = skipWS(b, end); i >= len(b) || b[i] != ':' {
			return i, false
		}
		sub, allowed := n.member(k)
		if !allowed {
			return i, false
		}
		sub = cmp.Or(sub, anyNode)
		var good bool
		if i, good = sub.okJSON(b, skipWS(b, i+1)); !good {
			return i, false
		}
		for r, name := range n.required {
			if name == k {
				seen |= 1 << r
			}
		}
		if i, more, ok = nextInSeq(b, i, '}'); !ok {
			return i, false
		}
	}
	return i, ok && seen == 1<<len(n.required)-1
}

// okArray is okJSON for the array at b[i].
func (n *fastNode) okArray(b []byte, i int) (int, bool) {
	if !n.okKind(fastArray) {
		return i, false
	}
	item := cmp.Or(n.items, anyNode)
	count := 0
	i, more, ok := openSeq(b, i, ']')
	for more {
		var good bool
		if i, good = item.okJSON(b, i); !good {
			return i, false
		}
		count++
		if i, more, ok = nextInSeq(b, i, ']'); !ok {
			return i, false
		}
	}
	return i, ok && n.okCount(count)
}

// view is b as a string without a copy, for a comparison or a lookup
// that does not keep it: the input's bytes do not change while it is
// checked.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
