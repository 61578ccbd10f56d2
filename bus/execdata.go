package bus

import (
	"encoding/json"
)

// FromEvent decodes an io.toolbus.exec's data into r as DataAs does. The
// form a router writes is read by a flat scan that copies nothing: the raw
// members are slices of e.Data (not to be reused while r is in use), the
// call's id and name idOf's strings when they spell them.
func (r *ExecRequest) FromEvent(e *Event, idOf ...string) error {
	if len(e.Data) > 0 && (execRouters(e.Data, r, idOf) || execFlat(e.Data, r, idOf)) {
		return nil
	}
	return dataAs(e, r)
}

// execRouters is execFlat for the members in the order AppendJSON writes
// them, read in turn rather than by name; false (r then holds anything)
// for any other order, and execFlat judges.
func execRouters(b []byte, r *ExecRequest, idOf []string) bool {
	*r = ExecRequest{}
	p := flatParser{b: b}
	if !p.literal(`{"call":{"id":`) {
		return false
	}
	id, ok := p.plain()
	if !ok || !p.literal(`,"name":`) {
		return false
	}
	name, ok := p.plain()
	if ok && p.literal(`,"input":`) {
		r.Call.Input, ok = rawPlain(&p)
	}
	if !ok || !p.literal(`},"user":`) {
		return false
	}
	if r.User, ok = rawPlain(&p); !ok || !p.literal(`,"context":`) {
		return false
	}
	if r.Context, ok = rawPlain(&p); !ok || !p.literal(`,"attempt":`) {
		return false
	}
	n, ok := p.uint(9)
	if ok && p.literal(`,"state":`) {
		r.State, ok = rawPlain(&p)
	}
	if !ok || !p.take('}') || !p.end() {
		return false
	}
	r.Attempt = int(n)
	r.Call.ID, r.Call.Name = knownOr(id, idOf), knownOr(name, idOf)
	return true
}

// knownOr is the one of consts that v spells, else v as a new string.
func knownOr(v []byte, consts []string) string {
	if s, ok := knownValue(v, consts); ok {
		return s
	}
	return string(v)
}

// The members of the exec data, as bits of what was seen.
const (
	execCall = 1 << iota
	execUser
	execContext
	execAttempt
	execState
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
		*dst = knownOr(s, idOf)
		return bit
	})
	return ok
}

// rawPlain reads a raw member whose value is plain: printable ASCII strings
// with one-character escapes, integers, literals, and objects and arrays of
// them nested at most 32 deep, checked as it is scanned rather than by
// goccy's Valid, which costs more than the scan for a call's usual input.
// Anything else is left to execFlat.
func rawPlain(p *flatParser) ([]byte, bool) {
	p.skip()
	start := p.i
	ok := p.plainValue(0)
	return p.b[start:p.i:p.i], ok
}

// plainValue reads a plain value (rawPlain) at depth.
func (p *flatParser) plainValue(depth int) bool {
	p.skip()
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; c {
	case '"':
		_, ok := p.str()
		return ok
	case '{', '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		p.i++
		if depth >= 32 {
			return false
		}
		if p.take(closing) {
			return true
		}
		for {
			if c == '{' {
				if _, ok := p.str(); !ok || !p.take(':') {
					return false
				}
			}
			if !p.plainValue(depth + 1) {
				return false
			}
			if p.take(closing) {
				return true
			}
			if !p.take(',') {
				return false
			}
		}
	case '-':
		p.i++
		return p.number()
	}
	if p.literal("null") || p.literal("true") || p.literal("false") {
		return true
	}
	return p.number()
}

// number reads (0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, a JSON number
// past its sign.
func (p *flatParser) number() bool {
	if n := p.digits(); n == 0 || n > 1 && p.b[p.i-n] == '0' {
		return false
	}
	if p.next('.') && p.digits() == 0 {
		return false
	}
	if p.next('e') || p.next('E') {
		if !p.next('+') {
			p.next('-')
		}
		return p.digits() > 0
	}
	return true
}

// digits reads the digits at p and counts them.
func (p *flatParser) digits() int {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

// next reads byte c if it comes next, without skipping whitespace.
func (p *flatParser) next(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}
