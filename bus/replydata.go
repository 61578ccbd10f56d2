package bus

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// FromEvent decodes an io.toolbus.call.reply's data into r as DataAs does;
// a plain reply of finished calls in one flat pass that checks what it reads
// (so it serves after DecodeHead).
func (r *Reply) FromEvent(e *Event) error {
	if len(e.Data) > 0 && replyFlat(e.Data, r) {
		return nil
	}
	return dataAs(e, r)
}

// DecodeReplyView is DecodeHead whose attributes, in the plain form, are
// views of m's data rather than copies (for a caller that never changes
// m.Data and copies what it keeps: the client's reply). When want is set,
// it reads the data of an io.toolbus.call.reply in the plain form in the
// same pass, as FromEvent would, and returns it (the usual one result of
// one block in one allocation with it); a nil reply and no error leave the
// caller to read e's data.
func DecodeReplyView(m *nats.Msg, e *Event, want bool) (*Reply, error) {
	var f *flatReply
	if want {
		f = new(flatReply)
	}
	flat, err := decodeHead(m, e, true, flatData{reply: f})
	if err != nil || !flat || f == nil || !f.ok || e.Type != TypeCallReply {
		return nil, err
	}
	if f.listed && f.nres == 1 && f.nblock == 1 {
		one := new(oneReply)
		f.fill(&one.reply, &one.oneResult)
		return &one.reply, nil
	}
	r := new(Reply)
	f.fill(r, nil)
	return r, nil
}

// Bounds of the flat read; a larger reply is read by DataAs.
const (
	flatResults = 8
	flatBlocks  = 16
)

// flatReply is what the flat read collects: each string as it is in the data.
type flatReply struct {
	results [flatResults]struct {
		id, name, state []byte
		blocks          int // the result's blocks, after the previous results'
	}
	texts  [flatBlocks][]byte
	nres   int
	nblock int
	size   int // the strings' bytes, escaped (at least their unescaped bytes)
	rev    uint64
	listed bool // results were given
	parked bool // parked was an empty list, not null
	ok     bool // read took the reply
}

// replyFlat reads b into r, reporting false (r untouched) unless b has the plain form.
func replyFlat(b []byte, r *Reply) bool {
	var f flatReply
	p := flatParser{b: b}
	if !f.read(&p) || !p.end() {
		return false
	}
	f.fill(r, nil)
	return true
}

// read reads the reply object at p, reporting (and recording in f.ok)
// whether it has the plain form.
func (f *flatReply) read(p *flatParser) bool {
	seen, ok := p.object(func(key []byte) uint16 {
		var ok bool
		switch string(key) {
		case "results":
			return 1 * b2u(p.array(func() bool { return f.result(p) }))
		case "parked":
			if p.literal("null") {
				return 2
			}
			f.parked = true
			return 2 * b2u(p.array(func() bool { return false })) // only an empty list
		case "sessionrev":
			f.rev, ok = p.uint(20)
			return 4 * b2u(ok)
		}
		return 0
	})
	f.listed, f.ok = seen&1 != 0, ok
	return ok
}

// result reads one result object.
func (f *flatReply) result(p *flatParser) bool {
	if f.nres == flatResults {
		return false
	}
	res := &f.results[f.nres]
	seen, ok := p.object(func(key []byte) uint16 {
		var dst *[]byte
		var bit uint16
		switch string(key) {
		case "id":
			dst, bit = &res.id, 1
		case "name":
			dst, bit = &res.name, 2
		case "state":
			dst, bit = &res.state, 4
		case "output":
			return 8 * b2u(p.array(func() bool { return f.block(p) }))
		default:
			return 0
		}
		s, ok := p.plain() // written as they are (fill)
		*dst = s
		f.size += len(s)
		return bit * b2u(ok)
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
	seen, ok := p.object(func(key []byte) uint16 {
		s, ok := p.str()
		switch string(key) {
		case "type":
			return 1 * b2u(ok && string(s) == BlockText)
		case "text":
			f.texts[f.nblock] = s
			f.size += len(s)
			return 2 * b2u(ok)
		}
		return 0
	})
	if !ok || seen != 3 {
		return false
	}
	f.nblock++
	return true
}

// oneResult is the usual reply's one result of one block, in one allocation.
type oneResult struct {
	result [1]Result
	block  [1]Block
}

// oneReply is a reply with its oneResult (DecodeReplyView).
type oneReply struct {
	reply Reply
	oneResult
}

// fill makes r: its results' strings slices of one string, their
// blocks of one array (one's, when given, for one result of one block).
func (f *flatReply) fill(r *Reply, one *oneResult) {
	*r = Reply{SessionRev: f.rev}
	if f.parked {
		r.Parked = []Parked{}
	}
	if !f.listed {
		return
	}
	var all strings.Builder
	all.Grow(f.size)
	var blocks []Block
	switch {
	case f.nres == 1 && f.nblock == 1:
		if one == nil {
			one = new(oneResult)
		}
		r.Results, blocks = one.result[:], one.block[:]
	case f.nblock > 0:
		r.Results, blocks = make([]Result, f.nres), make([]Block, f.nblock)
	default:
		r.Results, blocks = make([]Result, f.nres), []Block{}
	}
	for i := range f.nres {
		res := &f.results[i]
		r.Results[i] = Result{ID: addString(&all, res.id), Name: addString(&all, res.name), State: addKnown(&all, res.state, execStates)}
	}
	for i, t := range f.texts[:f.nblock] {
		blocks[i] = Block{Type: BlockText, Text: addUnescaped(&all, t)}
	}
	from := 0
	for i := range f.nres {
		to := f.results[i].blocks
		r.Results[i].Output = blocks[from:to:to]
		from = to
	}
}
