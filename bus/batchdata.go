package bus

import "encoding/json"

// FromEvent reads the event's data, an io.toolbus.call.batch's, into d, as
// DataAs does. The plain form the SDKs write — calls with an id, a name,
// an input object and a background flag, user and context as objects,
// arrays or strings, events and sessionrev, every string plain ASCII
// without escapes, no request — is read by a small scanner: the calls one
// allocation, their strings one, the raw members one. Anything else goes
// to DataAs (FuzzBatchFlat holds the scanner to it).
func (d *Batch) FromEvent(e *Event) error {
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
	var callsBuf [4]flatCall
	calls := callsBuf[:0]
	var user, context, events []byte
	var rev uint64
	seen, end, ok := flatMembers(b, skipSpace(b, 0), func(key []byte, i int) (bit uint8, next int, ok bool) {
		switch string(key) {
		case "calls":
			next, ok = flatArray(b, i, func(i int) (int, bool) {
				c, next, ok := flatCallAt(b, i)
				calls = append(calls, c)
				return next, ok
			})
			return 1, next, ok
		case "user":
			user, next, ok = flatRaw(b, i)
			return 2, next, ok
		case "context":
			context, next, ok = flatRaw(b, i)
			return 4, next, ok
		case "events":
			events, next, ok = flatString(b, i)
			return 8, next, ok
		case "sessionrev":
			rev, next, ok = flatUint(b, i)
			return 16, next, ok
		}
		return 0, 0, false
	})
	if !ok || skipSpace(b, end) != len(b) || seen&1 == 0 {
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

// flatCallAt reads the call object at b[i]: an "id" and a "name" (plain
// strings), an "input" object and "background" true or false, each at
// most once. next is the index after it.
func flatCallAt(b []byte, i int) (c flatCall, next int, ok bool) {
	_, next, ok = flatMembers(b, i, func(key []byte, i int) (bit uint8, next int, ok bool) {
		switch string(key) {
		case "id":
			c.id, next, ok = flatString(b, i)
			return 1, next, ok
		case "name":
			c.name, next, ok = flatString(b, i)
			return 2, next, ok
		case "input":
			if i >= len(b) || b[i] != '{' {
				return 0, 0, false
			}
			next, ok = flatValue(b, i)
			c.input = b[i:max(next, i)]
			return 4, next, ok
		case "background":
			c.background, next, ok = flatBool(b, i)
			return 8, next, ok
		}
		return 0, 0, false
	})
	return c, next, ok
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
