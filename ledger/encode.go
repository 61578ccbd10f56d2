package ledger

import (
	"bytes"
	"sync"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// encode is e as its KV value: the JSON json.Marshal gives, written by
// hand (a write call puts its entry twice, claim and record, and a
// recorded entry carries the whole result).
func encode(e *Entry) []byte {
	return appendEntry(make([]byte, 0, encodedSize(e)), e)
}

func encodedSize(e *Entry) int {
	size := 170 + len(e.Router) + len(e.Claim) + len(e.Call) + len(e.Canon) + len(e.Cancel)
	if e.Result != nil {
		size += e.Result.Size()
	}
	return size
}

// encodePooled is encode into a pooled buffer (p, holding val; nil: not
// pooled) when l's bucket keeps nothing of a value once its write returns
// (a *store.KV): give it back with done then, never while a retry may hold it.
func encodePooled(l *Ledger, e *Entry) (val []byte, p *value) {
	val, p = buffer(l, encodedSize(e))
	if val = appendEntry(val, e); p != nil {
		p.b = val
	}
	return val, p
}

// encodeRecord is encodePooled of done, the record of a claim whose value
// as written claim holds (nil: none kept): that value with the state and
// result changed, and claim's buffer goes back. (Not read from done: the
// pool would take done's result off the stack.)
func encodeRecord(l *Ledger, done *Entry, claim *value) ([]byte, *value) {
	const running = `{"state":"running"` // the claim's members follow, then its closing brace
	if claim == nil || done.Result == nil || !bytes.HasPrefix(claim.b, []byte(running)) {
		return encodePooled(l, done)
	}
	val, p := buffer(l, encodedSize(done))
	val = append(append(val, `{"state":"done"`...), claim.b[len(running):len(claim.b)-1]...)
	claim.done(claim.b)
	return append(appendResult(val, done.Result), '}'), p
}

// buffer is an empty buffer for size bytes, pooled (p) as encodePooled's.
func buffer(l *Ledger, size int) (b []byte, p *value) {
	if !l.reuse || size > maxPooled {
		return make([]byte, 0, size), nil
	}
	if p, _ = values.Get().(*value); p == nil {
		p = &value{b: make([]byte, 0, size)}
	}
	return p.b[:0], p
}

// done gives p back to the pool with val, made in it; nil p is not the pool's.
func (p *value) done(val []byte) {
	if p != nil && cap(val) <= maxPooled {
		p.b = val[:0]
		values.Put(p)
	}
}

// value is a pooled buffer of values; maxPooled bounds the one kept.
type value struct{ b []byte }

var values sync.Pool

const maxPooled = 4 << 10

func appendEntry(b []byte, e *Entry) []byte {
	b = bus.AppendJSONString(append(b, `{"state":`...), e.State)
	b = bus.AppendJSONString(append(b, `,"router":`...), e.Router)
	for _, f := range [...]struct{ member, v string }{{`,"claim":`, e.Claim}, {`,"call":`, e.Call}, {`,"canon":`, e.Canon}} {
		if f.v != "" { // omitempty
			b = bus.AppendJSONString(append(b, f.member...), f.v)
		}
	}
	b = appendTime(append(b, `,"deadline":`...), e.Deadline)
	if !e.Touched.IsZero() {
		b = appendTime(append(b, `,"touched":`...), e.Touched)
	}
	if e.Result != nil {
		b = appendResult(b, e.Result)
	}
	for _, f := range [...]struct{ member, v string }{{`,"result_ref":`, e.ResultRef}, {`,"cancel":`, e.Cancel}} {
		if f.v != "" { // omitempty
			b = bus.AppendJSONString(append(b, f.member...), f.v)
		}
	}
	return append(b, '}')
}

// appendResult appends res as the member "result".
func appendResult(b []byte, res *bus.Result) []byte {
	b = append(b, `,"result":`...)
	withResult, err := res.AppendJSON(b)
	if err != nil { // metadata that is not JSON: the result says so
		failed := bus.ErrorResult(bus.Call{ID: res.ID, Name: res.Name}, bus.CodeInternal, "InternalError: "+err.Error())
		withResult, _ = failed.AppendJSON(b)
	}
	return withResult
}

// appendTime appends t as time.Time's MarshalJSON writes it; a UTC time of
// years 0-9999 (every time a router writes) by hand, in a third fewer
// instructions than AppendFormat's (FuzzAppendTime holds the two to one result).
func appendTime(b []byte, t time.Time) []byte {
	year, month, day := t.Date()
	if t.Location() != time.UTC || year < 0 || year > 9999 {
		return append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
	}
	hour, minute, sec := t.Clock()
	s := [...]byte{'"', 0, 0, 0, 0, '-', 0, 0, '-', 0, 0, 'T', 0, 0, ':', 0, 0, ':', 0, 0, '.', 0, 0, 0, 0, 0, 0, 0, 0, 0}
	put2(s[1:], year/100)
	put2(s[3:], year%100)
	put2(s[6:], int(month))
	put2(s[9:], day)
	put2(s[12:], hour)
	put2(s[15:], minute)
	put2(s[18:], sec)
	n := 20 // RFC3339Nano: the fraction's digits up to the last that is not 0, if any
	if ns := t.Nanosecond(); ns != 0 {
		for i := 29; i > 20; i-- {
			s[i], ns = byte('0'+ns%10), ns/10
		}
		for n = 29; s[n] == '0'; n-- {
		}
		n++
	}
	return append(append(b, s[:n]...), 'Z', '"')
}

// put2 writes n, below 100, as two digits.
func put2(b []byte, n int) { b[0], b[1] = byte('0'+n/10), byte('0'+n%10) }
