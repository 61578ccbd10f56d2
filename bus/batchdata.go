package bus

import (
	"encoding/json"
	"unsafe"
)

// FromEvent reads an io.toolbus.call.batch's data into d as DataAs does; the
// plain form the SDKs write by a small scanner (FuzzBatchFlat).
func (d *Batch) FromEvent(e *Event) error { return d.FromEventInto(e, nil) }

// FromEventInto is FromEvent whose calls, read in the plain form, are
// kept in calls when it has room for them.
func (d *Batch) FromEventInto(e *Event, calls []Call) error {
	if decodeBatchFlat(e.Data, d, calls) {
		return nil
	}
	return dataAs(e, d)
}

// flatCall is a call of the plain form, in the data.
type flatCall struct {
	id, name, input []byte
	background      bool
}

// decodeBatchFlat reads b into d, its calls in into when it has room, and
// reports whether b was in the plain form.
func decodeBatchFlat(b []byte, d *Batch, into []Call) bool {
	var callsBuf [4]flatCall
	calls := callsBuf[:0]
	var user, context, events []byte
	var rev uint64
	p := flatParser{b: b}
	seen, ok := p.object(func(key []byte) uint16 {
		var ok bool
		switch string(key) {
		case "calls":
			return 1 * b2u(p.array(func() bool {
				c, ok := flatCallAt(&p)
				calls = append(calls, c)
				return ok
			}))
		case "user":
			user, ok = p.raw(`{["`)
			return 2 * b2u(ok)
		case "context":
			context, ok = p.raw(`{["`)
			return 4 * b2u(ok)
		case "events":
			events, ok = p.plain()
			return 8 * b2u(ok)
		case "sessionrev":
			rev, ok = p.uint(19)
			return 16 * b2u(ok)
		}
		return 0
	})
	if !ok || !p.end() || seen&1 == 0 {
		return false
	}
	// One buffer; each raw member's capacity ends where it does.
	n := len(events) + len(user) + len(context)
	for _, c := range calls {
		n += len(c.id) + len(c.name) + len(c.input)
	}
	buf := make([]byte, 0, n)
	take := func(v []byte) json.RawMessage {
		if v == nil {
			return nil
		}
		off := len(buf)
		buf = append(buf, v...)
		return buf[off:len(buf):len(buf)]
	}
	str := func(v []byte) string {
		if len(v) == 0 {
			return ""
		}
		return unsafe.String(unsafe.SliceData(take(v)), len(v))
	}
	if into == nil || cap(into) < len(calls) {
		into = make([]Call, len(calls))
	}
	*d = Batch{Calls: into[:len(calls):len(calls)], User: take(user), Context: take(context), SessionRev: rev}
	d.Events = str(events)
	for k, c := range calls {
		d.Calls[k] = Call{ID: str(c.id), Name: str(c.name), Input: take(c.input), Background: c.background}
	}
	return true
}

// flatCallAt reads the call object at p: "id", "name" (plain strings),
// "input" (an object) and "background", each at most once.
func flatCallAt(p *flatParser) (c flatCall, ok bool) {
	seen, ok := p.object(func(key []byte) uint16 {
		var ok bool
		switch string(key) {
		case "id":
			c.id, ok = p.plain()
			return 1 * b2u(ok)
		case "name":
			c.name, ok = p.plain()
			return 2 * b2u(ok)
		case "input":
			c.input, ok = p.raw("{")
			return 4 * b2u(ok)
		case "background":
			c.background = p.literal("true")
			return 8 * b2u(c.background || p.literal("false"))
		}
		return 0
	})
	return c, ok && seen != 0
}
