package registry

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

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
	worker  string
	account string // the NATS account it came from, which its keys are bound to
	refused error  // a key is bound to another account: nothing read
	seq     uint64
	seen    map[string]seenBeat
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

// errBound: a beat or leave not stored, its key bound to another account.
var errBound = errors.New("registry: the key is bound to another account")

// beatAttempts bounds the writes of one beat lost to the worker's other beats.
const beatAttempts = 4

// putBeat stores a beat of account at key by compare-and-set on rev (0: none);
// another write first returns its revision with errBound, errLeft or errBeaten.
func putBeat(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, rev uint64, account string) (uint64, error) {
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
	if gerr != nil {
		if store.IsNotFound(gerr) {
			return 0, errBeaten // expired or deleted: Create writes over a delete
		}
		return 0, gerr
	}
	switch v := decodeStored(e.Value()); {
	case v.Account != account:
		return e.Revision(), errBound
	case v.Left:
		return e.Revision(), errLeft
	default:
		return e.Revision(), errBeaten
	}
}

// A worker id is bound, per tool, to the NATS account that stored its key
// first, for as long as the key lives (three heartbeats past its last beat
// or leave): a beat or leave from another account would end the calls the
// worker runs (docs/registry.md, protocol 7.1, 1.20).

// stored is a P_workers value: the beat and the account its key is bound to.
type stored struct {
	bus.WorkerBeat
	Account string `json:"account,omitempty"`
}

// encodeStored is bv's P_workers value bound to account; without one, bv.Encode's.
func encodeStored(bv bus.WorkerBeat, account string) []byte {
	if bv.Left {
		bv = bus.WorkerBeat{Left: true}
	}
	b, _ := json.Marshal(stored{bv, account})
	return b
}

func decodeStored(b []byte) stored {
	var v stored
	_ = json.Unmarshal(b, &v)
	return v
}

// elsewhere reports whether b, a cached beat, binds its key to another
// account than account and was seen after cutoff (an older one may have
// expired: the write's compare-and-set on revision 0 decides, revFor).
func (b beat) elsewhere(account string, cutoff time.Time) bool {
	return b.account != account && b.at.After(cutoff)
}

// revFor is the revision account's write of b's key is compare-and-set on:
// b's, or 0 when b is another account's.
func (b beat) revFor(account string) uint64 {
	if b.account == account {
		return b.rev
	}
	return 0
}

// bound is the refusal of a registration, beat or leave of worker for tool
// from another account than its key's.
func bound(tool, worker string) error {
	return bus.Errorf(bus.CodeDenied, "worker id %q is bound, for tool %q, to another NATS account: the one that registered it first, "+
		"until its record expires three heartbeats after its last beat; nothing was changed (docs/protocol.md 7.1)", worker, tool)
}
