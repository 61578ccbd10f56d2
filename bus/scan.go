package bus

import (
	"encoding/json"
	"errors"
	"fmt"
)

// parseStructured fills e from a structured-mode event. b must be valid JSON
// (the caller checks with json.Valid, a fast scanner that does not
// allocate); this walk then only splits the top-level object, so decoding
// costs a fraction of reflection-based json.Unmarshal. Data aliases b.
// Attribute names match exactly (CloudEvents names are lower-case);
// unknown attributes are skipped whatever their type; for a repeated name
// the last one counts, as with encoding/json.
func parseStructured(b []byte, e *Event) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errors.New("not a JSON object")
	}
	i++
	for {
		i = skipSpace(b, i)
		if b[i] == '}' {
			return nil
		}
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
		kEnd := stringEnd(b, i)
		key := b[i+1 : kEnd-1]
		i = skipSpace(b, kEnd)
		i = skipSpace(b, i+1) // ':'
		vEnd := valueEnd(b, i)
		val := b[i:vEnd]
		i = vEnd
		if string(key) == "data" {
			e.Data = val
			continue
		}
		dst := e.attr(string(key))
		if dst == nil {
			continue
		}
		if val[0] != '"' {
			return fmt.Errorf("attribute %q must be a string", key)
		}
		s, err := unquote(val)
		if err != nil {
			return err
		}
		*dst = s
	}
}

// attr returns the field of the named string attribute, nil for others.
func (e *Event) attr(name string) *string {
	switch name {
	case "specversion":
		return &e.SpecVersion
	case "id":
		return &e.ID
	case "source":
		return &e.Source
	case "type":
		return &e.Type
	case "subject":
		return &e.Subject
	case "datacontenttype":
		return &e.DataContentType
	case "time":
		return &e.Time
	case "sessionid":
		return &e.SessionID
	case "replyid":
		return &e.ReplyID
	case "toolcallid":
		return &e.ToolCallID
	case "traceparent":
		return &e.TraceParent
	case "tracestate":
		return &e.TraceState
	case "expirytime":
		return &e.ExpiryTime
	case "data_base64":
		return &e.DataBase64
	}
	return nil
}

// unquote decodes a JSON string token; the fast path has no escapes.
func unquote(tok []byte) (string, error) {
	inner := tok[1 : len(tok)-1]
	simple := true
	for _, c := range inner {
		if c == '\\' || c >= 0x80 {
			simple = false
			break
		}
	}
	if simple {
		return string(inner), nil
	}
	var s string
	err := json.Unmarshal(tok, &s)
	return s, err
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string token starting at b[i] == '"'.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// valueEnd returns the index after the JSON value starting at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}
