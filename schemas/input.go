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

// ParseInput accepts a call's input: a JSON object, or a JSON string that
// holds a JSON object (as OpenAI returns arguments). An absent input means
// {}; anything else, null and "" included, is refused (docs/protocol.md 3.1: the
// input is an object or a string holding one). It returns the compact
// object bytes and the decoded value (numbers as json.Number), ready for
// Schema.Validate.
//
// Anything else is an error whose message is written for the model and has no
// package prefix, e.g.
//
//	input must be a JSON object or a string holding one, got array
//	input must be a JSON object or a string holding one, got string holding number
//	input is not valid JSON: invalid character 'x' looking for beginning of value
//
// The returned bytes may share memory with raw.
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
	if !isCompact(b) {
		var buf bytes.Buffer
		buf.Grow(len(b))
		if err := json.Compact(&buf, b); err != nil {
			return nil, nil, fmt.Errorf("input is not valid JSON: %v", err)
		}
		b = buf.Bytes()
	}
	return b, v, nil
}

// isCompact reports whether b (valid JSON) has no insignificant whitespace;
// tabs, newlines and carriage returns cannot occur unescaped in strings.
func isCompact(b []byte) bool {
	if bytes.ContainsAny(b, "\t\n\r") {
		return false
	}
	if bytes.IndexByte(b, ' ') < 0 {
		return true
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && c == ' ':
			return false
		}
	}
	return true
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
	b.WriteString("Input validation failed for tool '")
	b.WriteString(tool)
	b.WriteString("':")
	for _, d := range details {
		b.WriteByte('\n')
		b.WriteString(d.Path)
		b.WriteString(": ")
		b.WriteString(d.Message)
	}
	return b.String()
}

// decodeInput decodes a call's input, already checked with json.Valid, with
// numbers as json.Number. It runs on every call, so it uses goccy/go-json,
// several times faster than encoding/json for map[string]any.
func decodeInput(b []byte) (any, error) {
	dec := fastjson.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
