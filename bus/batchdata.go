package bus

import (
	"encoding/json"
	"unsafe"

	"github.com/nats-io/nats.go"
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

// DecodeBatch is DecodeHead that reads the data of an io.toolbus.call.batch
// in the plain form in the same pass, into d as FromEventInto would (its
// calls in calls when they fit), and returns d; a nil batch and no error
// leave the caller to read e's data (FromEventInto). d's strings and raw
// members are slices of m.Data (nats.go gives each message data of its
// own), each raw member capped, unless m.Data is more than twice their
// bytes and inPlaceSlack (a member kept pins no more): m.Data must not be
// written while d is used.
func DecodeBatch(m *nats.Msg, e *Event, d *Batch, calls []Call) (*Batch, error) {
	var f flatBatch
	flat, err := decodeHead(m, e, false, flatData{batch: &f})
	if err != nil || !flat || !f.ok || e.Type != TypeCallBatch {
		return nil, err
	}
	f.fill(d, calls, m.Data)
	return d, nil
}

// flatCall is a call of the plain form, in the data.
type flatCall struct {
	id, name, input []byte
	background      bool
}

// flatBatch is what the flat read of a batch collects, in the data.
type flatBatch struct {
	first                 [4]flatCall // the calls while they fit (add)
	more                  []flatCall  // every call once they do not
	n                     int         // calls read
	user, context, events []byte
	rev                   uint64
	ok                    bool // read took the batch
}

// decodeBatchFlat reads b into d, its calls in into when it has room, and
// reports whether b was in the plain form.
func decodeBatchFlat(b []byte, d *Batch, into []Call) bool {
	var f flatBatch
	p := flatParser{b: b}
	if !f.read(&p) || !p.end() {
		return false
	}
	f.fill(d, into, nil)
	return true
}

// read reads the batch object at p, reporting (and recording in f.ok)
// whether it has the plain form.
func (f *flatBatch) read(p *flatParser) bool {
	seen, ok := p.object(func(key []byte) uint16 {
		var ok bool
		switch string(key) {
		case "calls":
			return 1 * b2u(p.array(func() bool {
				c, ok := flatCallAt(p)
				f.add(c)
				return ok
			}))
		case "user":
			f.user, ok = p.raw(`{["`)
			return 2 * b2u(ok)
		case "context":
			f.context, ok = p.raw(`{["`)
			return 4 * b2u(ok)
		case "events":
			f.events, ok = p.plain()
			return 8 * b2u(ok)
		case "sessionrev":
			f.rev, ok = p.uint(19)
			return 16 * b2u(ok)
		}
		return 0
	})
	f.ok = ok && seen&1 != 0
	return f.ok
}

// add keeps call c: in first while it has room, then every call in more
// (a slice of first would take f off its caller's stack).
func (f *flatBatch) add(c flatCall) {
	if f.n < len(f.first) {
		f.first[f.n] = c
	} else {
		if f.n == len(f.first) {
			f.more = append([]flatCall(nil), f.first[:]...)
		}
		f.more = append(f.more, c)
	}
	f.n++
}

// fill makes d of what read collected, its calls in into when it has room,
// its strings and raw members left in data read (nil: none) when it is at
// most twice their bytes and inPlaceSlack, else copied into one buffer.
func (f *flatBatch) fill(d *Batch, into []Call, read []byte) {
	calls := f.more
	if f.n <= len(f.first) {
		calls = f.first[:f.n]
	}
	// Each raw member's capacity ends where it does.
	n := len(f.events) + len(f.user) + len(f.context)
	for _, c := range calls {
		n += len(c.id) + len(c.name) + len(c.input)
	}
	var buf []byte
	inPlace := read != nil && len(read) <= 2*n+inPlaceSlack
	if !inPlace {
		buf = make([]byte, 0, n)
	}
	take := func(v []byte) json.RawMessage {
		if v == nil || inPlace {
			return v // raw members are capped (flatParser.raw)
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
	*d = Batch{Calls: into[:len(calls):len(calls)], User: take(f.user), Context: take(f.context), SessionRev: f.rev}
	d.Events = str(f.events)
	for k, c := range calls {
		d.Calls[k] = Call{ID: str(c.id), Name: str(c.name), Input: take(c.input), Background: c.background}
	}
}

// inPlaceSlack is what a batch's message may hold beside twice its
// members' bytes (its attributes, the JSON around them) and have its members
// read in place (DecodeBatch).
const inPlaceSlack = 4 << 10

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
