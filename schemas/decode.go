package schemas

import (
	"encoding/json"

	fastjson "github.com/goccy/go-json"
)

// decodeValid decodes b, valid JSON holding one value (json.Valid and the
// depth bound checked before), into what decodeInput makes of it: objects
// as map[string]any, arrays as []any, numbers as json.Number. It is a small
// recursive reader, which costs a call one allocation per value instead of
// a decoder, a stream and a reader besides; a string with an escape or a
// byte outside ASCII is left to goccy, the one judge of how such strings
// decode. FuzzDecodeValid holds it to decodeInput.
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

func readObject(b []byte, i int) (any, int, bool) {
	m := map[string]any{}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return m, i + 1, true
	}
	for i < len(b) {
		k, j, ok := readString(b, i)
		if !ok {
			return nil, j, false
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return nil, i, false
		}
		v, j, ok := readValue(b, skipWS(b, i+1))
		if !ok {
			return nil, j, false
		}
		m[k.(string)] = v
		i = skipWS(b, j)
		if i < len(b) && b[i] == '}' {
			return m, i + 1, true
		}
		if i >= len(b) || b[i] != ',' {
			return nil, i, false
		}
		i = skipWS(b, i+1)
	}
	return nil, i, false
}

func readArray(b []byte, i int) (any, int, bool) {
	a := []any{}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return a, i + 1, true
	}
	for i < len(b) {
		v, j, ok := readValue(b, i)
		if !ok {
			return nil, j, false
		}
		a = append(a, v)
		i = skipWS(b, j)
		if i < len(b) && b[i] == ']' {
			return a, i + 1, true
		}
		if i >= len(b) || b[i] != ',' {
			return nil, i, false
		}
		i = skipWS(b, i+1)
	}
	return nil, i, false
}

// readString reads the string at b[i]; one with an escape or a byte
// outside printable ASCII goes to goccy.
func readString(b []byte, i int) (any, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	plain := true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '\\':
			plain = false
			j++
		case c == '"':
			if plain {
				return string(b[i+1 : j]), j + 1, true
			}
			var s string
			if err := fastjson.Unmarshal(b[i:j+1], &s); err != nil {
				return nil, j + 1, false
			}
			return s, j + 1, true
		case c < 0x20 || c > 0x7e:
			plain = false
		}
	}
	return nil, len(b), false
}
