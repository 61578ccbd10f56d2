package inbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// records is the waiting calls as the inbox keeps them in memory: one
// Item per parked call record (P_parked keys <session>.<replyid>.<callid>),
// fed by the watch or the approver's polling and by a fresh read before
// every answer (refresh), and the channel closed at every change that the
// event streams wait on. Safe for concurrent use.
type records struct {
	kv       jetstream.KeyValue // set by Start
	maxItems int
	approver bool // external calls are listed, not answerable
	log      *slog.Logger

	mu      sync.Mutex
	items   map[string]Item
	changed chan struct{} // closed and replaced on every change
}

func newRecords(maxItems int, approver bool, log *slog.Logger) *records {
	return &records{maxItems: maxItems, approver: approver, log: log, items: map[string]Item{}, changed: make(chan struct{})}
}

// apply keeps the items in step with one parked record.
func (s *records) apply(e jetstream.KeyValueEntry) {
	it, ok := s.item(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, had := s.items[e.Key()]; had && old.Revision > e.Revision() {
		return // a late delivery (a fresh get came first)
	}
	if ok {
		s.items[e.Key()] = it
	} else if _, had := s.items[e.Key()]; had {
		delete(s.items, e.Key())
	} else {
		return
	}
	s.changedLocked()
}

// drop forgets the call key.
func (s *records) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, had := s.items[key]; had {
		delete(s.items, key)
		s.changedLocked()
	}
}

func (s *records) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// item is the entry as a waiting call; false when it waits for nothing.
func (s *records) item(e jetstream.KeyValueEntry) (Item, bool) {
	if e.Operation() != jetstream.KeyValuePut {
		return Item{}, false
	}
	var r bus.ParkRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		s.log.Warn("inbox: ignoring a bad parked record", "key", e.Key(), "err", err)
		return Item{}, false
	}
	if r.Status != bus.ParkParked || (r.Kind != bus.KindConfirm && r.Kind != bus.KindExternal) {
		return Item{}, false
	}
	digest := cmp.Or(r.InputDigest, bus.InputDigest(r.Call.Input))
	it := Item{Key: e.Key(), Revision: e.Revision(), Session: r.Session, ReplyID: r.ReplyID, ID: r.Call.ID, Tool: r.Call.Name,
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
	out := slices.Collect(maps.Values(s.items))
	ch := s.changed
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Item) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Key, b.Key))
	})
	n := len(out)
	if n > s.maxItems {
		out = out[:s.maxItems]
	}
	return out, n, ch
}

// lookup returns the waiting call key.
func (s *records) lookup(key string) (Item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[key]
	return it, ok
}

// absent returns the keys held that are not in seen (the calls a poll
// no longer lists).
func (s *records) absent(seen map[string]bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []string
	for key := range s.items {
		if !seen[key] {
			gone = append(gone, key)
		}
	}
	return gone
}

// refresh reads the record of call key and applies it; a record that is
// gone is dropped, one that cannot be read is kept as it was.
func (s *records) refresh(ctx context.Context, key string) {
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		s.drop(key)
	case err != nil:
		s.log.Warn("inbox: read parked call", "key", key, "err", err)
	default:
		s.apply(e)
	}
}
