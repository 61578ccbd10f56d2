package bus

import (
	"bytes"
	"strconv"
	"strings"
)

// FromEvent decodes e's data, an io.toolbus.call.reply's, into r as
// DataAs does, with the same result and the same errors. The plain reply
// of finished calls (results of an id, a name, a state and text blocks;
// no parked calls; a session revision) is read by one flat pass: the
// strings take one allocation together, the results and their blocks one
// each. Anything else (errors, metadata, parked calls, other blocks, a
// \u escape, a byte past ASCII) is read by DataAs. It checks what it
// reads, so it serves after DecodeHead, which leaves the data unchecked.
func (r *Reply) FromEvent(e *Event) error {
	if len(e.Data) > 0 && replyFlat(e.Data, r) {
		return nil
	}
	d := new(Reply) // not r: what DataAs decodes into escapes
	err := e.DataAs(d)
	*r = *d
	return err
}

// Bounds of the flat read: a reply with more results or blocks is read
// by DataAs.
const (
	flatResults = 8
	flatBlocks  = 16
)

// flatReply is what the flat read collects before it makes the reply:
// each string as it is in the data (escaped), in order.
type flatReply struct {
	results [flatResults]struct {
		id, name, state []byte
		blocks          int // the result's blocks, after the previous results'
	}
	texts  [flatBlocks][]byte
	nres   int
	nblock int
	size   int // the strings' bytes, escaped (at least their unescaped bytes)
}

// replyFlat reads b into r when it has the plain form, reporting false
// (r untouched) for every other input, valid or not.
func replyFlat(b []byte, r *Reply) bool {
	var f flatReply
	p := flatParser{b: b}
	var rev uint64
	var seenResults, seenParked, seenRev, parked bool
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "results":
			if seenResults {
				return false
			}
			seenResults = true
			return p.array(func() bool { return f.result(&p) })
		case "parked":
			if seenParked {
				return false
			}
			seenParked = true
			if p.literal("null") {
				return true
			}
			parked = true
			return p.array(func() bool { return false }) // only an empty list
		case "sessionrev":
			if seenRev {
				return false
			}
			seenRev = true
			n, ok := p.digits()
			if !ok {
				return false
			}
			v, err := strconv.ParseUint(string(n), 10, 64)
			rev = v
			return err == nil && (n[0] != '0' || len(n) == 1)
		}
		return false
	})
	if !ok || !p.end() {
		return false
	}
	*r = Reply{SessionRev: rev}
	if parked {
		r.Parked = []Parked{}
	}
	if seenResults {
		f.fill(r)
	}
	return true
}

// result reads one result object.
func (f *flatReply) result(p *flatParser) bool {
	if f.nres == flatResults {
		return false
	}
	res := &f.results[f.nres]
	var seen int
	ok := p.object(func(key []byte) bool {
		var dst *[]byte
		bit := 0
		switch string(key) {
		case "id":
			dst, bit = &res.id, 1
		case "name":
			dst, bit = &res.name, 2
		case "state":
			dst, bit = &res.state, 4
		case "output":
			bit = 8
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if dst == nil {
			return p.array(func() bool { return f.block(p) })
		}
		s, ok := p.str()
		*dst = s
		f.size += len(s)
		return ok && bytes.IndexByte(s, '\\') < 0 // written as they are (fill)
	})
	// goccy leaves a member that is absent as it is: nil output, "" ids.
	if !ok || seen&8 == 0 {
		return false // no output: a form DataAs reads (nil, not empty)
	}
	f.nres++
	res.blocks = f.nblock
	return true
}

// block reads one text block, {"type":"text","text":...}.
func (f *flatReply) block(p *flatParser) bool {
	if f.nblock == flatBlocks {
		return false
	}
	var seen int
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "type":
			if seen&1 != 0 {
				return false
			}
			seen |= 1
			s, ok := p.str()
			return ok && string(s) == BlockText
		case "text":
			if seen&2 != 0 {
				return false
			}
			seen |= 2
			s, ok := p.str()
			f.texts[f.nblock] = s
			f.size += len(s)
			return ok
		}
		return false
	})
	if !ok || seen != 3 {
		return false
	}
	f.nblock++
	return true
}

// fill makes r's results: their strings slices of one string, their
// blocks of one array.
func (f *flatReply) fill(r *Reply) {
	var all strings.Builder
	all.Grow(f.size)
	for i := range f.nres {
		res := &f.results[i]
		all.Write(res.id)
		all.Write(res.name)
		all.Write(res.state)
	}
	for _, t := range f.texts[:f.nblock] {
		appendUnescaped(&all, t)
	}
	s := all.String()
	off := 0
	next := func(n int) string {
		v := s[off : off+n]
		off += n
		return v
	}
	r.Results = make([]Result, f.nres)
	blocks := []Block{}
	if f.nblock > 0 {
		blocks = make([]Block, f.nblock)
	}
	for i := range f.nres {
		res := &f.results[i]
		r.Results[i] = Result{ID: next(len(res.id)), Name: next(len(res.name)), State: internState(next(len(res.state)))}
	}
	for i, t := range f.texts[:f.nblock] {
		blocks[i] = Block{Type: BlockText, Text: next(unescapedLen(t))}
	}
	from := 0
	for i := range f.nres {
		to := f.results[i].blocks
		r.Results[i].Output = blocks[from:to:to]
		from = to
	}
}

// internState is s, or the constant it spells.
func internState(s string) string {
	for _, c := range [...]string{StateSuccess, StateError, StateInterrupted} {
		if s == c {
			return c
		}
	}
	return s
}
