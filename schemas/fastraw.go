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
// when b is valid JSON, nested no deeper than MaxInputDepth, and
// certainly valid against s (okJSON), and then the compact input.
// Anything else, errors included, is left to the long way, which tells
// them as it always did.
func checkFast(b []byte, s *Schema) (in json.RawMessage, ok bool) {
	if !json.Valid(b) || jsonDepth(b, MaxInputDepth) > MaxInputDepth {
		return nil, false
	}
	if s != nil {
		defer func() { // a walker bug: the long way decides
			if recover() != nil {
				in, ok = nil, false
			}
		}()
		if end, good := s.fast.okJSON(b, 0); !good || skipWS(b, end) != len(b) {
			return nil, false
		}
	}
	if !isCompact(b) {
		return nil, false
	}
	return b, true
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
