package registry

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// A leave must win over every beat read before it, though beats are stored
// later: readOrder orders them on one router, and putBeat's compare-and-set
// across routers.

// readOrder numbers the registrations and leaves read, keeping each
// <tool>.<worker> key's latest leave while earlier registrations are still
// being applied. Guarded by liveness.mu.
type readOrder struct {
	last   uint64
	open   map[uint64]*reading  // registrations being applied, by number
	leaves map[string]leaveMark // <tool>.<worker> → its latest leave, while of use
}

// leaveMark is a leave as read.
type leaveMark struct {
	seq     uint64
	writing bool // its "left" value is not stored yet
}

// beatKey is the P_workers key of worker's beats for tool.
func beatKey(tool, worker string) string { return tool + "." + worker }

// opened numbers rd, a registration read now, open until closed.
func (o *readOrder) opened(rd *reading) {
	if o.open == nil {
		o.open = map[uint64]*reading{}
	}
	o.last++
	rd.seq = o.last
	o.open[o.last] = rd
}

// closed ends the registration numbered seq.
func (o *readOrder) closed(seq uint64) {
	delete(o.open, seq)
	o.prune()
}

// leave numbers worker's leave of tools, read now, writing until landed.
func (o *readOrder) leave(worker string, tools []string) uint64 {
	if o.leaves == nil {
		o.leaves = map[string]leaveMark{}
	}
	o.last++
	for _, tool := range tools {
		o.leaves[beatKey(tool, worker)] = leaveMark{seq: o.last, writing: true}
	}
	return o.last
}

// reading returns the tools of worker's open registrations (beats may land late).
func (o *readOrder) reading(worker string) []string {
	var tools []string
	for _, rd := range o.open {
		if rd.worker == worker {
			tools = slices.AppendSeq(tools, maps.Keys(rd.seen))
		}
	}
	return tools
}

// landed ends the writes of worker's leave of tools numbered seq.
func (o *readOrder) landed(worker string, tools []string, seq uint64) {
	for _, tool := range tools {
		k := beatKey(tool, worker)
		if m, ok := o.leaves[k]; ok && m.seq == seq {
			m.writing = false
			o.leaves[k] = m
		}
	}
	o.prune()
}

// leftAfter reports whether a leave of worker's tool was read after seq (0: ever).
func (o *readOrder) leftAfter(tool, worker string, seq uint64) bool {
	m, ok := o.leaves[beatKey(tool, worker)]
	return ok && m.seq > seq
}

// leaving reports whether a leave of worker's tool is read and not yet stored.
func (o *readOrder) leaving(tool, worker string) bool { return o.leaves[beatKey(tool, worker)].writing }

// prune forgets the leaves that no open registration was read before.
func (o *readOrder) prune() {
	if len(o.leaves) == 0 {
		return
	}
	first := o.last + 1
	for seq := range o.open {
		first = min(first, seq)
	}
	maps.DeleteFunc(o.leaves, func(_ string, m leaveMark) bool { return !m.writing && m.seq < first })
}

// reading is one registration as read, with each tool's beat as cached then.
type reading struct {
	worker string
	seq    uint64
	seen   map[string]seenBeat
}

// seenBeat is the worker's beat for a tool when a registration was read.
type seenBeat struct {
	rev  uint64 // the revision of its key (0: none cached)
	left bool   // it said the worker left, or this router read its leave
}

// overtaken reports whether the worker left after rd was read. l.mu is held.
func (rd *reading) overtaken(l *liveness, tool string) bool {
	if l.order.leftAfter(tool, rd.worker, rd.seq) {
		return true
	}
	b, ok := l.beats[tool][rd.worker]
	return ok && b.left && !rd.seen[tool].left
}

// errLeft: a beat not stored, its key saying the worker left since.
var errLeft = errors.New("registry: the worker left since its beat was read")

// errBeaten: a beat not stored, another beat of the worker stored since.
var errBeaten = errors.New("registry: another beat was stored first")

// beatAttempts bounds the writes of one beat lost to the worker's other beats.
const beatAttempts = 4

// putBeat stores a beat at key by compare-and-set on rev (0: none); another write
// first returns its revision with errLeft or errBeaten.
func putBeat(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, rev uint64) (uint64, error) {
	var (
		n   uint64
		err error
	)
	if rev == 0 {
		n, err = kv.Create(ctx, key, value)
	} else {
		n, err = kv.Update(ctx, key, value, rev)
	}
	if !store.IsConflict(err) {
		return n, err
	}
	e, gerr := kv.Get(ctx, key)
	switch {
	case store.IsNotFound(gerr):
		return 0, errBeaten // expired or deleted: Create writes over a delete
	case gerr != nil:
		return 0, gerr
	case bus.DecodeWorkerBeat(e.Value()).Left:
		return e.Revision(), errLeft
	default:
		return e.Revision(), errBeaten
	}
}
