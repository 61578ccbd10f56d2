package bus

import "encoding/json"

// BatchData reads the event's data, an io.toolbus.call.batch's, into d, as
// DataAs does. The plain form the SDKs write — calls with an id, a name,
// an input object and a background flag, user and context as objects,
// arrays or strings, events and sessionrev, every string plain ASCII
// without escapes, no request — is read by a small scanner: the calls one
// allocation, their strings one, the raw members one. Anything else goes
// to DataAs (FuzzBatchFlat holds the scanner to it).
func (e *Event) BatchData(d *Batch) error {
	if decodeBatchFlat(e.Data, d) {
		return nil
	}
	general := new(Batch) // not d: the caller's stays where it is
	err := e.DataAs(general)
	*d = *general
	return err
}

// flatCall is a call of the plain form, in the data.
type flatCall struct {
	id, name, input []byte
	background      bool
}

// decodeBatchFlat reads b into d when b is in the plain form, and reports
// whether it was; d is then set in full.
func decodeBatchFlat(b []byte, d *Batch) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	var callsBuf [4]flatCall
	calls := callsBuf[:0]
	var user, context, events []byte
	var rev uint64
	var seen uint8
	for first := true; ; first = false {
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return false
		}
		if b[i] == '}' {
			if first {
				return false
			}
			break
		}
		if !first {
			if b[i] != ',' {
				return false
			}
			i = skipSpace(b, i+1)
		}
		key, next, ok := flatString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		var bit uint8
		switch string(key) {
		case "calls":
			bit = 1
			calls, next, ok = flatCalls(b, i, calls)
		case "user":
			bit = 2
			user, next, ok = flatRaw(b, i)
		case "context":
			bit = 4
			context, next, ok = flatRaw(b, i)
		case "events":
			bit = 8
			events, next, ok = flatString(b, i)
		case "sessionrev":
			bit = 16
			rev, next, ok = flatUint(b, i)
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		i = next - 1
	}
	if skipSpace(b, i+1) != len(b) || seen&1 == 0 {
		return false
	}
	// The strings in one string, the raw members in one buffer.
	n, raw := len(events), len(user)+len(context)
	for _, c := range calls {
		n += len(c.id) + len(c.name)
		raw += len(c.input)
	}
	buf := append(make([]byte, 0, n), events...)
	for _, c := range calls {
		buf = append(append(buf, c.id...), c.name...)
	}
	all := string(buf)
	cut := func(v []byte) string {
		s := all[:len(v)]
		all = all[len(v):]
		return s
	}
	raws := make([]byte, 0, raw)
	take := func(v []byte) json.RawMessage {
		if v == nil {
			return nil
		}
		off := len(raws)
		raws = append(raws, v...)
		return raws[off:len(raws):len(raws)]
	}
	*d = Batch{Calls: make([]Call, len(calls)), User: take(user), Context: take(context), SessionRev: rev}
	d.Events = cut(events)
	for k, c := range calls {
		d.Calls[k] = Call{ID: cut(c.id), Name: cut(c.name), Input: take(c.input), Background: c.background}
	}
	return true
}

// flatCalls reads the array of calls at b[i] onto calls (emptied first).
// next is the index after the array.
func flatCalls(b []byte, i int, calls []flatCall) (_ []flatCall, next int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false
	}
	calls = calls[:0]
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return calls, i + 1, true
	}
	for {
		var c flatCall
		if c, i, ok = flatCallAt(b, i); !ok {
			return nil, 0, false
		}
		calls = append(calls, c)
		i = skipSpace(b, i)
		if i >= len(b) {
			return nil, 0, false
		}
		switch b[i] {
		case ']':
			return calls, i + 1, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return nil, 0, false
		}
	}
}

// flatCallAt reads the call object at b[i]: an "id" and a "name" (plain
// strings), an "input" object and "background" true or false, each at
// most once. next is the index after it.
func flatCallAt(b []byte, i int) (c flatCall, next int, ok bool) {
	if i >= len(b) || b[i] != '{' {
		return c, 0, false
	}
	var seen uint8
	for first := true; ; first = false {
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return c, 0, false
		}
		if b[i] == '}' {
			if first {
				return c, 0, false
			}
			return c, i + 1, true
		}
		if !first {
			if b[i] != ',' {
				return c, 0, false
			}
			i = skipSpace(b, i+1)
		}
		key, next, ok := flatString(b, i)
		if !ok {
			return c, 0, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return c, 0, false
		}
		i = skipSpace(b, i+1)
		var bit uint8
		switch string(key) {
		case "id":
			bit = 1
			c.id, next, ok = flatString(b, i)
		case "name":
			bit = 2
			c.name, next, ok = flatString(b, i)
		case "input":
			bit = 4
			if ok = i < len(b) && b[i] == '{'; ok {
				next, ok = flatValue(b, i)
				c.input = b[i:max(next, i)]
			}
		case "background":
			bit = 8
			c.background, next, ok = flatBool(b, i)
		default:
			return c, 0, false
		}
		if !ok || seen&bit != 0 {
			return c, 0, false
		}
		seen |= bit
		i = next - 1
	}
}

// flatRaw reads the value at b[i] as it is: an object, an array or a
// plain string. next is the index after it.
func flatRaw(b []byte, i int) (v []byte, next int, ok bool) {
	if i < len(b) && b[i] == '"' {
		if _, next, ok = flatString(b, i); ok {
			return b[i:next], next, true
		}
		return nil, 0, false
	}
	if next, ok = flatValue(b, i); !ok {
		return nil, 0, false
	}
	return b[i:next], next, true
}

// flatBool reads true or false at b[i].
func flatBool(b []byte, i int) (v bool, next int, ok bool) {
	switch {
	case len(b)-i >= 4 && string(b[i:i+4]) == "true":
		return true, i + 4, true
	case len(b)-i >= 5 && string(b[i:i+5]) == "false":
		return false, i + 5, true
	}
	return false, 0, false
}

// flatUint reads an unsigned integer at b[i]: digits without a leading
// zero (or a lone 0), followed by a delimiter, at most 19 digits.
func flatUint(b []byte, i int) (v uint64, next int, ok bool) {
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == i || j-i > 19 || b[i] == '0' && j-i > 1 {
		return 0, 0, false
	}
	if j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		return 0, 0, false
	}
	for _, c := range b[i:j] { // 19 digits fit in a uint64
		v = v*10 + uint64(c-'0')
	}
	return v, j, true
}
