package bus

import (
	"encoding/json"
)

// FromEvent decodes an io.toolbus.exec's data into r as DataAs does. The
// form a router writes is read by a flat scan that copies nothing: the raw
// members are slices of e.Data (not to be reused while r is in use), the
// call's id and name idOf's strings when they spell them.
func (r *ExecRequest) FromEvent(e *Event, idOf ...string) error {
	if len(e.Data) > 0 && execFlat(e.Data, r, idOf) {
		return nil
	}
	return dataAs(e, r)
}

// The members of the exec data, as bits of what was seen.
const (
	execCall = 1 << iota
	execUser
	execContext
	execAttempt
	execState
	execProgressReply
	execProgressInbox
)

// execFlat reads b into r, reporting false (r then holds anything) unless
// b has the plain form.
func execFlat(b []byte, r *ExecRequest, idOf []string) bool {
	*r = ExecRequest{}
	p := flatParser{b: b}
	_, ok := p.object(func(key []byte) uint16 {
		var raw *json.RawMessage
		var bit uint16
		switch string(key) {
		case "call":
			return execCall * b2u(callFlat(&p, &r.Call, idOf))
		case "attempt":
			n, ok := p.uint(9)
			r.Attempt = int(n)
			return execAttempt * b2u(ok)
		case "progress_reply":
			r.ProgressReply = p.literal("true")
			return execProgressReply * b2u(r.ProgressReply || p.literal("false"))
		case "progress_inbox":
			s, ok := p.plain()
			r.ProgressInbox = string(s)
			return execProgressInbox * b2u(ok)
		case "user":
			bit, raw = execUser, &r.User
		case "context":
			bit, raw = execContext, &r.Context
		case "state":
			bit, raw = execState, &r.State
		default:
			return 0
		}
		v, ok := p.raw(anyValue)
		*raw = v
		return bit * b2u(ok)
	})
	return ok && p.end()
}

// b2u is 1 for true, 0 for false: a member's bit times whether it was read.
func b2u(ok bool) uint16 {
	if ok {
		return 1
	}
	return 0
}

// callFlat reads the call object at p into c.
func callFlat(p *flatParser, c *Call, idOf []string) bool {
	_, ok := p.object(func(key []byte) uint16 {
		if string(key) == "input" {
			v, ok := p.raw(anyValue)
			c.Input = v
			return 4 * b2u(ok)
		}
		dst, bit := &c.ID, uint16(1)
		switch string(key) {
		case "id":
		case "name":
			dst, bit = &c.Name, 2
		default:
			return 0
		}
		s, ok := p.plain()
		if !ok {
			return 0
		}
		if *dst, ok = knownValue(s, idOf); !ok {
			*dst = string(s)
		}
		return bit
	})
	return ok
}
