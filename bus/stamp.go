package bus

import (
	"crypto/rand"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/slab"
)

// An event's id and time are carved out of shared blocks (internal/slab),
// each P with its own id generator and cached time: no lock, one allocation
// for many events.
type local struct {
	slab.Carver
	id          idGen
	ms          int64  // the millisecond time is the formatted time of
	time        string // "" until the first event
	now, expiry second // the seconds of the last time and expiry formatted
}

var locals = sync.Pool{New: func() any { return new(local) }}

// stamp returns a fresh event id and the current time, formatted as the
// time attribute (UTC, milliseconds).
func stamp() (id, at string) {
	l := locals.Get().(*local)
	id = l.Make(idLen, l.id.append)
	t := time.Now().UTC()
	if ms := t.UnixMilli(); ms != l.ms || l.time == "" {
		l.ms = ms
		l.time = l.Make(len(timeLayout)+8, func(b []byte) []byte { return l.now.appendUTC(b, t, true) })
	}
	at = l.time
	locals.Put(l)
	return id, at
}

// FormatExpiry formats t as the expirytime attribute: UTC RFC 3339 with the
// fraction t needs (time.RFC3339Nano), what Event.Expiry parses.
func FormatExpiry(t time.Time) string {
	t = t.UTC()
	l := locals.Get().(*local)
	s := l.Make(len(time.RFC3339Nano)+8, func(b []byte) []byte { return l.expiry.appendUTC(b, t, false) })
	locals.Put(l)
	return s
}

// carve is a string of at most n bytes that fill appends, carved out of
// a shared block.
func carve(n int, fill func([]byte) []byte) string {
	l := locals.Get().(*local)
	s := l.Make(n, fill)
	locals.Put(l)
	return s
}

// idGen makes event ids of nuid's form (22 characters: a crypto/rand prefix
// per P and a sequence with random steps): unique, not secret, and nothing
// relies on them being hard to guess (docs/security.md).
type idGen struct {
	pre      [preLen]byte
	seq, inc uint64
}

const (
	digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	preLen = 12
	seqLen = 10
	idLen  = preLen + seqLen
	maxSeq = 839299365868340224 // 62^10
	minInc = 33
	maxInc = 333
)

// reset draws a new prefix, sequence and step.
func (g *idGen) reset() {
	var r [preLen]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (Go 1.24)
	for i, c := range r {
		g.pre[i] = digits[int(c)%len(digits)]
	}
	g.seq = mrand.Uint64N(maxSeq)
	g.inc = minInc + mrand.Uint64N(maxInc-minInc)
}

// append appends the next id to b.
func (g *idGen) append(b []byte) []byte {
	if g.inc == 0 { // a new generator
		g.reset()
	}
	if g.seq += g.inc; g.seq >= maxSeq {
		g.reset()
	}
	b = append(b, g.pre[:]...)
	var s [seqLen]byte
	for i, n := seqLen-1, g.seq; i >= 0; i, n = i-1, n/uint64(len(digits)) {
		s[i] = digits[n%uint64(len(digits))]
	}
	return append(b, s[:]...)
}

// EventsMsg is Events(session) carved out of a shared block, for the subject
// of a message sent and let go; a subject that is kept is Events'.
func (s Subjects) EventsMsg(session string) string { return carveSubject(s, "events.", session) }

// CallMsg is s.Call(session) carved as EventsMsg is, for the subject of
// a batch that is sent and let go (client.Call names one per batch). A
// function, not a method: Subjects keeps to 15 methods (TestMethodsPerType).
func CallMsg(s Subjects, session string) string { return carveSubject(s, "call.", session) }

func carveSubject(s Subjects, verb, session string) string {
	return carve(len(s.p)+len(verb)+len(session), func(b []byte) []byte {
		return append(append(append(b, s.p...), verb...), session...)
	})
}
