package bus

import "encoding/json"

// ExecData decodes e's data, an io.toolbus.exec's, into r as DataAs does,
// with the same result and the same errors. The data a router writes
// (docs/protocol.md 5.1: one object of call, user, context, attempt and
// state, each once; identifiers of printable ASCII without escapes) is
// read by a flat scan that copies nothing: the raw members (input, user,
// context, state) are slices of e.Data, which the caller must not reuse
// while r is in use, and the call's id and name are idOf's string when
// they spell it (the worker passes the event's toolcallid and the tool's
// name, so the usual request takes no allocation). Anything else is read
// by DataAs.
func (e *Event) ExecData(r *ExecRequest, idOf ...string) error {
	if len(e.Data) > 0 && execFlat(e.Data, r, idOf) {
		return nil
	}
	d := new(ExecRequest) // not r: what DataAs decodes into escapes, and r may be on the stack
	err := e.DataAs(d)
	*r = *d
	return err
}

// The members of the exec data and of its call, as bits of what was seen.
const (
	execCall = 1 << iota
	execUser
	execContext
	execAttempt
	execState
	callID
	callName
	callInput
)

// execFlat reads b into r when it has the plain form, reporting false
// (r then holds anything) for every other input, valid or not.
func execFlat(b []byte, r *ExecRequest, idOf []string) bool {
	*r = ExecRequest{}
	var seen int
	return flatObject(b, 0, len(b), func(key []byte, v, end int) bool {
		bit := 0
		var raw *json.RawMessage
		switch string(key) {
		case "call":
			bit = execCall
		case "user":
			bit, raw = execUser, &r.User
		case "context":
			bit, raw = execContext, &r.Context
		case "attempt":
			bit = execAttempt
		case "state":
			bit, raw = execState, &r.State
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch bit {
		case execCall:
			return callFlat(b, v, end, &r.Call, idOf)
		case execAttempt:
			n, ok := flatInt(b[v:end])
			r.Attempt = n
			return ok
		}
		*raw = json.RawMessage(b[v:end:end])
		return true
	})
}

// callFlat reads the call object at b[start:end] into c.
func callFlat(b []byte, start, end int, c *Call, idOf []string) bool {
	var seen int
	return flatObject(b, start, end, func(key []byte, v, vend int) bool {
		bit := 0
		switch string(key) {
		case "id":
			bit = callID
		case "name":
			bit = callName
		case "input":
			bit = callInput
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if bit == callInput {
			c.Input = json.RawMessage(b[v:vend:vend])
			return true
		}
		s, next, ok := flatString(b, v)
		if !ok || next != vend {
			return false
		}
		str := internedString(s, idOf)
		if bit == callID {
			c.ID = str
		} else {
			c.Name = str
		}
		return true
	})
}

// internedString is s as a string: one of known when it spells it, else a
// new one.
func internedString(s []byte, known []string) string {
	for _, k := range known {
		if string(s) == k {
			return k
		}
	}
	return string(s)
}

// flatObject calls member for each member of the object at b[start:end]
// (nothing but whitespace around it) with its key and the bounds of its
// value, one of: an object or an array (valid JSON), a string of
// printable ASCII without escapes, null, true, false or a number. It
// reports false when the object has another form or member does.
func flatObject(b []byte, start, end int, member func(key []byte, v, vend int) bool) bool {
	b = b[:end]
	i := skipSpace(b, start)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		key, next, ok := flatString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		v := skipSpace(b, i+1)
		vend, ok := flatScalarOrValue(b, v)
		if !ok || !member(key, v, vend) {
			return false
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// flatScalarOrValue finds the end of the value at b[i] of the forms
// flatObject takes.
func flatScalarOrValue(b []byte, i int) (end int, ok bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		return flatValue(b, i)
	case c == '"':
		_, next, ok := flatString(b, i)
		return next, ok
	case c == 'n' || c == 't' || c == 'f' || c == '-' || c >= '0' && c <= '9':
		j := i
		for j < len(b) && (b[j] >= 'a' && b[j] <= 'z' || b[j] >= '0' && b[j] <= '9' || b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'E') {
			j++
		}
		switch string(b[i:j]) {
		case "null", "true", "false":
			return j, true
		}
		_, isInt := flatInt(b[i:j])
		return j, isInt
	}
	return 0, false
}

// flatInt reads a JSON integer of at most 9 digits, without sign or
// leading zeros (an attempt count): anything else reports false.
func flatInt(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
