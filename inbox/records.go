package inbox

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// records is the waiting calls in memory, one Item per call record, fed by
// the watch or polling and a fresh read before every answer, with a channel
// closed at every change. A read older than what is held, or than the
// store.Cache's tombstone of an ended call (kept tombAge), changes nothing.
// Safe for concurrent use.
type records struct {
	fetch    func(context.Context, string) (reading, error) // set by Start
	maxItems int
	approver bool // external calls are listed, not answerable
	log      *slog.Logger

	mu      sync.Mutex
	items   *store.Cache[Item]
	at      map[string]uint64 // the step at which each item was last set
	step    uint64            // counts the sets: a poll drops only items older than it
	changed chan struct{}     // closed and replaced on every change
}

// reading is a call's record as read: the item if waiting, and its revision
// (0: no record).
type reading struct {
	it    Item
	waits bool
	rev   uint64
}

func newRecords(maxItems int, approver bool, log *slog.Logger) *records {
	return &records{maxItems: maxItems, approver: approver, log: log, items: store.NewCache[Item](tombAge), at: map[string]uint64{},
		changed: make(chan struct{})}
}

// apply keeps the items in step with one parked record.
func (s *records) apply(e jetstream.KeyValueEntry) {
	var r bus.ParkRecord
	if e.Operation() == jetstream.KeyValuePut {
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			s.log.Warn("inbox: ignoring a bad parked record", "key", e.Key(), "err", err)
			r = bus.ParkRecord{}
		}
	}
	it, ok := s.item(e.Key(), e.Revision(), r)
	s.set(e.Key(), reading{it: it, waits: ok, rev: e.Revision()})
}

// set applies r to call key unless something as new is held or ended; rev 0
// changes nothing.
func (s *records) set(key string, r reading) {
	if r.rev == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held, _ := s.items.Get(key)
	same := r.waits && s.items.Rev(key) == r.rev
	filled := same && held.InputOmitted && !r.it.InputOmitted // with the input its list left out
	again := same && !filled                                  // read again as it was: no change to show
	if s.items.Stale(key, r.rev) && !again && !filled {
		return // a late delivery or a stale read (a fresh one came first)
	}
	s.step++
	switch {
	case again:
		s.at[key] = s.step
	case r.waits:
		s.items.Put(key, r.rev, r.it)
		s.at[key] = s.step
		s.changedLocked()
	case s.items.Delete(key, r.rev):
		delete(s.at, key)
		s.changedLocked()
	}
}

// gone drops call key if still held at rev (a read found no record); no
// tombstone: the write that ended the call follows any late delivery.
func (s *records) gone(key string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it, had := s.items.Get(key); had && it.Revision <= rev {
		s.forgetLocked(key)
		s.changedLocked()
	}
}

// mark is the step a poll starts at: prune drops only the items set
// before it.
func (s *records) mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.step++
	return s.step
}

// prune drops calls held since before mark that a poll did not list, of
// those covered reports in the part of the list it read (nil: all); no
// tombstone: a lagging list may miss a call the next poll lists.
func (s *records) prune(seen map[string]bool, mark uint64, covered func(Item) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dropped := false
	for key, it := range s.items.All() {
		if !seen[key] && s.at[key] < mark && (covered == nil || covered(it)) {
			s.forgetLocked(key)
			dropped = true
		}
	}
	if dropped {
		s.changedLocked()
	}
}

// forgetLocked drops call key without a tombstone.
func (s *records) forgetLocked(key string) {
	s.items.Forget(key)
	delete(s.at, key)
}

func (s *records) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// item is the record of call key at revision rev as a waiting call; false
// when it waits for nothing.
func (s *records) item(key string, rev uint64, r bus.ParkRecord) (Item, bool) {
	if r.Status != bus.ParkParked || (r.Kind != bus.KindConfirm && r.Kind != bus.KindExternal) {
		return Item{}, false
	}
	digest := r.InputDigest
	if digest == "" { // not cmp.Or: the digest of a held input, every poll, was a poll's largest cost
		digest = bus.InputDigest(r.Call.Input)
	}
	it := Item{Key: key, Revision: rev, Session: r.Session, ReplyID: r.ReplyID, ID: r.Call.ID, Tool: r.Call.Name,
		Kind: r.Kind, User: r.User, Context: r.Context, Input: r.Call.Input, InputDigest: digest,
		SuggestedRules: r.SuggestedRules, Reason: r.Reason, Created: r.Created, Expires: r.Expires}
	switch {
	case r.RequestScoped:
		it.Note = "a request-scoped tool: the agent that called it answers it"
	case r.Kind == bus.KindExternal && s.approver:
		it.Note = "this inbox logs in as the approver, which answers confirmations only: the tool's handler (or `toolbus answer` as the operator) answers it"
	}
	return it, true
}

// snapshot returns the waiting calls oldest first, at most maxItems, the
// total count, and the channel closed at the next change.
func (s *records) snapshot() ([]Item, int, <-chan struct{}) {
	s.mu.Lock()
	var out []Item
	for _, it := range s.items.All() {
		out = append(out, it)
	}
	ch := s.changed
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Item) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Key, b.Key))
	})
	return out[:min(len(out), s.maxItems)], len(out), ch
}

// lookup returns the waiting call key.
func (s *records) lookup(key string) (Item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.items.Get(key)
}

// refresh rereads call key from the leader and applies it (gone: dropped
// unless newer meanwhile; unreadable: kept). A read that fails is tried
// again, readTries in all; the last failure is returned, and nothing
// changed.
func (s *records) refresh(ctx context.Context, key string) error {
	held, _ := s.lookup(key)
	var (
		r   reading
		err error
	)
	for try := 1; ; try++ {
		if r, err = s.fetch(ctx, key); err == nil || try == readTries || ctx.Err() != nil {
			break
		}
	}
	switch {
	case err != nil:
		s.log.Warn("inbox: read parked call", "key", key, "err", err)
		return err
	case r.rev == 0:
		s.gone(key, held.Revision)
	default:
		s.set(key, r)
	}
	return nil
}

// readTries is how many reads an answer's refresh makes when they fail: a
// router's parked.list may time out, or refuse while its cache is behind
// the store (docs/inbox.md).
const readTries = 3

// tombAge is how long the inbox remembers the revision at which a call
// ended: longer than any read in flight (an answer's reads end within 15 s).
const tombAge = time.Minute
