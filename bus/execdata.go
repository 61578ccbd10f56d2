package bus

import (
	"bytes"
	"encoding/json"
)

// FromEvent decodes e's data, an io.toolbus.exec's, into r as DataAs does,
// with the same result and the same errors. The data a router writes
// (docs/protocol.md 5.1: one object of call, user, context, attempt and
// state, each once; identifiers of printable ASCII without escapes) is
// read by a flat scan that copies nothing: the raw members (input, user,
// context, state) are slices of e.Data, which the caller must not reuse
// while r is in use, and the call's id and name are idOf's string when
// they spell it (the worker passes the event's toolcallid and the tool's
// name, so the usual request takes no allocation). Anything else is read
// by DataAs.
func (r *ExecRequest) FromEvent(e *Event, idOf ...string) error {
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
	p := flatParser{b: b}
	return p.object(func(key []byte) bool {
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
			return callFlat(&p, &r.Call, idOf)
		case execAttempt:
			d, ok := p.digits()
			n, isInt := flatInt(d)
			r.Attempt = n
			return ok && isInt
		}
		v, ok := p.raw()
		*raw = v
		return ok
	}) && p.end()
}

// callFlat reads the call object at p into c.
func callFlat(p *flatParser, c *Call, idOf []string) bool {
	var seen int
	return p.object(func(key []byte) bool {
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
			v, ok := p.raw()
			c.Input = v
			return ok
		}
		s, ok := p.str()
		if !ok || bytes.IndexByte(s, '\\') >= 0 {
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
