package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	fastjson "github.com/goccy/go-json"

	"github.com/toolbus/toolbus/bus"
)

// ParseInput accepts a call's input: a JSON object or a string holding one
// (docs/protocol.md 3.1); absent means {}. It returns the compact bytes (which
// may share raw's memory) and the value decoded for Schema.Validate. Errors
// are written for the model, without a package prefix.
func ParseInput(raw json.RawMessage) (json.RawMessage, any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return json.RawMessage("{}"), map[string]any{}, nil
	}
	switch raw[0] {
	case '{':
		return parseObject(raw, "")
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, fmt.Errorf("input is not valid JSON: %v", err)
		}
		inner := bytes.TrimSpace([]byte(s))
		if len(inner) == 0 {
			return nil, nil, errors.New("input must be a JSON object or a string holding one, got an empty string")
		}
		return parseObject(inner, "string holding ")
	}
	if !json.Valid(raw) {
		return nil, nil, fmt.Errorf("input is not valid JSON: %v", syntaxError(raw))
	}
	return nil, nil, fmt.Errorf("input must be a JSON object or a string holding one, got %s", Kind(raw))
}

// parseObject decodes b, which must hold exactly one JSON object; prefix
// qualifies what was got in the error ("string holding ").
func parseObject(b []byte, prefix string) (json.RawMessage, any, error) {
	if !json.Valid(b) {
		if prefix != "" {
			return nil, nil, fmt.Errorf("input must be a JSON object or a string holding one, got %sinvalid JSON (%v)", prefix, syntaxError(b))
		}
		return nil, nil, fmt.Errorf("input is not valid JSON: %v", syntaxError(b))
	}
	if b[0] != '{' {
		return nil, nil, fmt.Errorf("input must be a JSON object or a string holding one, got %s%s", prefix, Kind(b))
	}
	// Before decoding, which recurses (section 13).
	if jsonDepth(b, MaxInputDepth) > MaxInputDepth {
		return nil, nil, depthError()
	}
	v, ok := decodeValid(b)
	if !ok {
		var err error
		if v, err = decodeInput(b); err != nil { // unreachable after json.Valid, kept to fail closed
			return nil, nil, fmt.Errorf("input is not valid JSON: %v", err)
		}
	}
	if compactValue(b, 0, MaxInputDepth) != len(b) { // valid, not too deep: then not compact
		var buf bytes.Buffer
		buf.Grow(len(b))
		if err := json.Compact(&buf, b); err != nil {
			return nil, nil, fmt.Errorf("input is not valid JSON: %v", err)
		}
		b = buf.Bytes()
	}
	return b, v, nil
}

// Kind names the JSON type of the valid JSON value b (no leading white
// space): object, array, string, boolean, null or number.
func Kind(b []byte) string {
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func syntaxError(b []byte) error {
	var v json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	return errors.New("unexpected data")
}

// InvalidInputMessage returns docs/protocol.md's fixed text of an invalid_input
// result: "Input validation failed for tool '<name>':" followed by one
// "\n<path>: <message>" line per detail.
func InvalidInputMessage(tool string, details []bus.Detail) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Input validation failed for tool '%s':", tool)
	for _, d := range details {
		fmt.Fprintf(&b, "\n%s: %s", d.Path, d.Message)
	}
	return b.String()
}

// decodeInput decodes a call's input (json.Valid already), numbers as
// json.Number, with goccy/go-json: several times faster for map[string]any.
func decodeInput(b []byte) (any, error) {
	dec := fastjson.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// decodeValid is decodeInput for valid, depth-checked JSON at one allocation
// per value; strings with escapes or non-ASCII go to goccy (false).
// FuzzDecodeValid holds the two together.
func decodeValid(b []byte) (any, bool) {
	v, i, ok := readValue(b, skipWS(b, 0))
	return v, ok && skipWS(b, i) == len(b)
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func readValue(b []byte, i int) (any, int, bool) {
	if i >= len(b) {
		return nil, i, false
	}
	switch c := b[i]; {
	case c == '{':
		return readObject(b, i)
	case c == '[':
		return readArray(b, i)
	case c == '"':
		return readString(b, i)
	case c == 't' && len(b)-i >= 4 && string(b[i:i+4]) == "true":
		return true, i + 4, true
	case c == 'f' && len(b)-i >= 5 && string(b[i:i+5]) == "false":
		return false, i + 5, true
	case c == 'n' && len(b)-i >= 4 && string(b[i:i+4]) == "null":
		return nil, i + 4, true
	case c == '-' || c >= '0' && c <= '9':
		j := i + 1
		for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-') {
			j++
		}
		return json.Number(b[i:j]), j, true
	}
	return nil, i, false
}

// readObject and readArray each loop on their own: a shared reader cost a
// heap closure per object.
func readObject(b []byte, i int) (any, int, bool) {
	m := map[string]any{}
	i, more, ok := openSeq(b, i, '}')
	for more {
		var k string
		k, i, ok = readKey(b, i)
		if i = skipWS(b, i); !ok || i >= len(b) || b[i] != ':' {
			return nil, i, false
		}
		var v any
		if v, i, ok = readValue(b, skipWS(b, i+1)); !ok {
			return nil, i, false
		}
		m[k] = v
		if i, more, ok = nextInSeq(b, i, '}'); !ok {
			return nil, i, false
		}
	}
	if !ok {
		return nil, i, false
	}
	return m, i, true
}

func readArray(b []byte, i int) (any, int, bool) {
	a := []any{}
	i, more, ok := openSeq(b, i, ']')
	for more {
		var v any
		v, i, ok = readValue(b, i)
		a = append(a, v)
		if !ok {
			return nil, i, false
		}
		if i, more, ok = nextInSeq(b, i, ']'); !ok {
			return nil, i, false
		}
	}
	if !ok {
		return nil, i, false
	}
	return a, i, true
}

// openSeq starts reading the object or array whose opening bracket is at
// b[i]: more says a member starts at the index returned; else the value
// ended there (ok) or is cut short.
func openSeq(b []byte, i int, closing byte) (next int, more, ok bool) {
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1, false, true
	}
	return i, i < len(b), i < len(b)
}

// nextInSeq goes on after a member that ended at b[i]: to the next one
// (more), or past the closing bracket.
func nextInSeq(b []byte, i int, closing byte) (next int, more, ok bool) {
	i = skipWS(b, i)
	switch {
	case i < len(b) && b[i] == closing:
		return i + 1, false, true
	case i >= len(b) || b[i] != ',':
		return i, false, false
	}
	i = skipWS(b, i+1)
	return i, i < len(b), i < len(b)
}

// readKey is readString for an object's key.
func readKey(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	if end, plain := stringEnd(b, i); plain {
		return string(b[i+1 : end-1]), end, true
	}
	v, j, ok := readString(b, i)
	k, _ := v.(string)
	return k, j, ok
}

// readString reads the string at b[i]; one with an escape or a byte
// outside printable ASCII goes to goccy.
func readString(b []byte, i int) (any, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	end, plain := stringEnd(b, i)
	switch {
	case end < 0:
		return nil, len(b), false
	case plain:
		return string(b[i+1 : end-1]), end, true
	}
	var s string
	if err := fastjson.Unmarshal(b[i:end], &s); err != nil {
		return nil, end, false
	}
	return s, end, true
}

// stringEnd returns the index just past the JSON string at b[i], -1 when
// it does not end; plain says it has no escape and only printable ASCII,
// so that its bytes are the decoded string.
func stringEnd(b []byte, i int) (end int, plain bool) {
	plain = true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '\\':
			plain = false
			j++
		case c == '"':
			return j + 1, plain
		case c < 0x20 || c > 0x7e:
			plain = false
		}
	}
	return -1, false
}
