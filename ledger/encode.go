package ledger

import (
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
	size := 170 + len(e.Router) + len(e.Claim) + len(e.Call) + len(e.Canon)
	if e.Result != nil {
		size += e.Result.Size()
	}
	return size
}

// encodePooled is encode into a pooled buffer (p; nil: not pooled) when l's
// bucket keeps nothing of a value once its write returns (a *store.KV):
// give it back with done then, never while a retry may hold it.
func encodePooled(l *Ledger, e *Entry) (val []byte, p *value) {
	size := encodedSize(e)
	if !l.reuse || size > maxPooled {
		return encode(e), nil
	}
	p, _ = values.Get().(*value)
	if p == nil {
		p = &value{b: make([]byte, 0, size)}
	}
	return appendEntry(p.b[:0], e), p
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
		b = append(b, `,"result":`...)
		withResult, err := e.Result.AppendJSON(b)
		if err != nil { // metadata that is not JSON: the result says so
			failed := bus.ErrorResult(bus.Call{ID: e.Result.ID, Name: e.Result.Name}, bus.CodeInternal, "InternalError: "+err.Error())
			withResult, _ = failed.AppendJSON(b)
		}
		b = withResult
	}
	return append(b, '}')
}

// appendTime appends t as time.Time's MarshalJSON writes it.
func appendTime(b []byte, t time.Time) []byte {
	return append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
}
