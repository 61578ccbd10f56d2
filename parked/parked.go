// Package parked is the one machine of calls waiting for someone outside the
// bus and of their batches (docs/protocol.md 6, docs/parked.md). Only it
// reads or writes P_parked; every transition is one compare-and-set, so
// racing routers agree on one winner.
package parked

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/presence"
	"github.com/toolbus/toolbus/store"
)

// Config configures a Store.
type Config struct {
	// TTL is how long a call stays parked before it times out; zero means DefaultTTL.
	TTL time.Duration
	// Owner is the id of the router using the store, owner of what it leases.
	Owner string
	// Source is the router's CloudEvents source, of the handoff requests.
	Source string
	// Publish publishes the live handoff requests (protocol 6.2); nil: none.
	Publish func(*nats.Msg) error
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
	// Presence judges the routers of lone calls (Mends.Lone), and its clock
	// (less the time this router was held) notes every ending; nil: no
	// notes of lone calls, and endings noted by the wall clock.
	Presence *presence.Presence
	// MaxPayload is the server's: a record or continuation must leave AnswerRoom of it (ErrTooLarge); nil: no bound.
	MaxPayload func() int64
}

// AnswerRoom is what a parked record leaves of the max payload for the write
// that ends it, the answer and a result fitted by the router (protocol 6.1,
// 1.19), and a continuation for its results (1.20).
const AnswerRoom = 64 << 10

// DefaultTTL is how long a call stays parked when Config.TTL is zero.
const DefaultTTL = 24 * time.Hour

// Store is one deployment's parked calls and continuations (P_parked); concurrency-safe.
type Store struct {
	calls *calls
	conts *conts
	cfg   Config
	Read  Reads // reads from the watch-fed cache (Parked) or the store
	Mends Mends // the results lost between a call's end and its batch
	// Cancels records calls cancelled before they started.
	Cancels Cancels
}

// Reads reads a Store's records and continuations; it writes nothing.
type Reads struct {
	calls *calls
	conts *conts
}

// New returns a Store; call Start before use.
func New(st *store.Store, subj bus.Subjects, cfg Config) *Store {
	cfg.TTL = cmp.Or(max(cfg.TTL, 0), DefaultTTL)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	sh := shared{kv: st.Parked, cfg: cfg}
	s := &Store{cfg: cfg,
		calls: newCalls(sh, subj),
		conts: &conts{shared: sh, active: map[string]*Batch{}, known: store.NewCache[openBatch](goneMemory)},
	}
	s.Read = Reads{calls: s.calls, conts: s.conts}
	s.Mends = Mends{s: s}
	s.Cancels = Cancels{s: s}
	return s
}

// Start loads the caches of records and continuations and keeps them fed.
func (s *Store) Start(ctx context.Context) (err error) {
	if s.calls.watch, err = store.WatchLoaded(ctx, s.calls.kv, "*.*.*", s.calls.apply); err != nil {
		return err
	}
	s.calls.follows.Store(true)
	if s.conts.watch, err = store.WatchLoaded(ctx, s.conts.kv, "*.*", s.conts.applyBatch); err != nil {
		_ = s.Stop(context.WithoutCancel(ctx))
		return err
	}
	return nil
}

// Stop ends the watches; safe to call twice.
func (s *Store) Stop(ctx context.Context) error {
	return store.StopAll(ctx, s.calls.watch, s.conts.watch)
}

// Renew renews the leases this router holds, letting go of those moved on.
func (s *Store) Renew(ctx context.Context, now time.Time) error {
	owner, at := s.cfg.Owner, now.UTC()
	return errors.Join(
		renewOwned(ctx, s.conts.kv, &s.conts.leases, store.UntilLanded, func(b *Batch) bool {
			b.Touched = at
			return b.Owner == owner && b.Active()
		}),
		renewOwned(ctx, s.calls.kv, &s.calls.leases, store.Bounded, func(r *Record) bool {
			r.Touched = at
			return r.Status == bus.ParkAnswered && r.Owner == owner
		}))
}

// A Run is what a batch parks: the waiting calls of its current run, the
// batch's results so far and the index of the first call after the run.
type Run struct {
	Batch   *Batch // a new continuation, or the one the batch resumed from
	Calls   []*Record
	Results map[string]bus.Result
	Next    int
	// Alone: nothing else of the run runs, so the continuation is written
	// waiting for answers (PhaseParked) and the run needs no Settle.
	Alone bool
	// Announce, when set, is called with the records written before their
	// handoff requests go out (so call.parked precedes every answer).
	Announce func([]*Record)
}

// Parking is what Park did.
type Parking struct {
	// Before: an earlier copy of the batch parked first; Batch is its
	// continuation (nil: unreadable) and Parked its records (Store.join).
	Before bool
	Batch  *Batch
	Parked []*Record
	Failed map[string]error // by call id: the calls that could not park
	// Differs, with Before: the earlier copy holds other calls
	// (bus.SameCalls); this copy is refused, nothing written.
	Differs error
}

// Park records the run's continuation, its calls' records, then their live
// handoff requests (docs/protocol.md 6.1, 6.2); a lone last wait is carried in
// its call's record. An error means nothing parked, but ErrNotOwner: the
// batch is another router's and this copy stops; store.ErrNoRoom: P_parked
// is at its soft bound.
func (s *Store) Park(ctx context.Context, run Run) (Parking, error) {
	waiting := make([]string, len(run.Calls))
	for i, r := range run.Calls {
		waiting[i] = r.Call.ID
	}
	if err := room(ctx, s, run); err != nil {
		return Parking{}, err
	}
	if carries(run) {
		return s.parkCarried(ctx, run, waiting)
	}
	err := s.conts.parkBatch(ctx, run.Batch, run.Results, waiting, run.Next, run.Alone)
	if errors.Is(err, errParkedBefore) {
		b, _ := s.Read.Batch(ctx, run.Batch.Session, run.Batch.ReplyID)
		if err := differs(run, b, nil); err != nil {
			return Parking{Before: true, Batch: b, Differs: err}, nil
		}
		recs := s.join(ctx, run, b)
		return Parking{Before: true, Batch: b, Parked: recs, Differs: differs(run, b, recs)}, nil
	}
	if err != nil {
		return Parking{}, err
	}
	return s.parkCalls(ctx, run)
}

// parkCalls writes the records of run's calls, then announces them.
func (s *Store) parkCalls(ctx context.Context, run Run) (Parking, error) {
	out := Parking{Batch: run.Batch}
	var created []*Record
	for _, r := range run.Calls {
		err := s.calls.create(ctx, r)
		if err != nil && store.IsConflict(err) {
			prev, rerr := s.Read.Get(ctx, r.Key())
			switch {
			case rerr != nil:
			case carried(prev) != nil:
				// A first copy carried its continuation in this record: it is the batch.
				if s.conts.remove(ctx, run.Batch) {
					first := carried(prev)
					err := differs(run, first, nil)
					if err != nil {
						// A copy with other calls: its records written so far are no call of it.
						unpark(ctx, s.calls, created)
					}
					return Parking{Before: true, Batch: first, Differs: err}, nil
				}
			case prev.Kind == bus.KindQueued && prev.Status != bus.ParkParked && prev.Result != nil:
				// A cancel ended the call before it parked (Cancels.Forestall).
				err = errCancelledFirst
			default:
				// Another copy of this batch parked the call first (join).
				out.Parked = append(out.Parked, prev)
				continue
			}
		}
		if err != nil {
			if out.Failed == nil {
				out.Failed = map[string]error{}
			}
			out.Failed[r.Call.ID] = err
			continue
		}
		out.Parked = append(out.Parked, r)
		created = append(created, r)
	}
	s.calls.announce(run, out.Parked, created)
	if run.Alone && len(out.Failed) > 0 {
		// A call that did not park is awaited in vain: the run goes back to
		// running, unless another router moved it on (ErrNotOwner).
		b, err := s.conts.update(ctx, run.Batch.Session, run.Batch.ReplyID, func(b *Batch) error {
			for id := range out.Failed {
				if !b.lacks(id) {
					return fmt.Errorf("parked: batch %s: %w (moved on by %s)", b.Key(), ErrNotOwner, cmp.Or(b.Owner, "another router"))
				}
			}
			claim(b, s.cfg.Owner, PhaseRunning, "")
			return nil
		})
		if store.IsNotFound(err) {
			err = fmt.Errorf("parked: batch %s: %w (finished by another router)", run.Batch.Key(), ErrNotOwner)
		}
		if err != nil {
			return out, err
		}
		s.conts.track(b)
		out.Batch = b
	}
	return out, nil
}

// room refuses a run past P_parked's soft bound (store.Bound, 1.24), but
// for a re-sent copy, whose first call has its record already (it joins).
func room(ctx context.Context, s *Store, run Run) error {
	n := 0
	for _, r := range run.Calls {
		n += len(r.Call.Input) + len(r.Context) + 1024 // the rest of a record, about
	}
	if len(run.Calls) == 0 || store.BoundOf(s.calls.kv).Room(ctx, n) {
		return nil
	}
	if _, err := s.Read.Get(ctx, run.Calls[0].Key()); err == nil {
		return nil
	}
	return fmt.Errorf("parked: %w", store.ErrNoRoom)
}

// carries: a new batch whose last call alone waits lives in that call's record.
func carries(run Run) bool {
	return run.Batch.rev == 0 && run.Alone && len(run.Calls) == 1 && run.Next >= len(run.Batch.Data.Calls)
}

// parkCarried parks run's one call carrying the continuation: one create.
func (s *Store) parkCarried(ctx context.Context, run Run, waiting []string) (Parking, error) {
	b, r := run.Batch, run.Calls[0]
	b.Results, b.Waiting, b.Next = run.Results, waiting, run.Next
	claim(b, "", PhaseParked, "")
	b.gone = true // nothing under the batch's own key: Finish writes nothing
	// The record holds the call's input once: the batch it carries omits it (1.19).
	c := *b
	c.Data.Calls = slices.Clone(b.Data.Calls)
	for i := range c.Data.Calls {
		if c.Data.Calls[i].ID == r.Call.ID {
			c.Data.Calls[i].Input = nil
		}
	}
	v, err := json.Marshal(&c)
	if err != nil {
		return Parking{}, err
	}
	r.Batch = v
	if err := s.calls.create(ctx, r); err != nil {
		if !store.IsConflict(err) {
			return Parking{}, err
		}
		out := Parking{Before: true}
		if rec, err := s.Read.Get(ctx, r.Key()); err == nil {
			out.Batch, out.Parked = carried(rec), []*Record{rec}
		}
		if out.Batch == nil {
			out.Batch, _ = s.Read.Batch(ctx, b.Session, b.ReplyID)
		}
		if out.Differs = differs(run, out.Batch, out.Parked); out.Differs != nil {
			out.Parked = nil
		}
		return out, nil
	}
	s.calls.announce(run, []*Record{r}, []*Record{r})
	return Parking{Batch: b, Parked: []*Record{r}}, nil
}

// join parks, for a copy that found an earlier copy's cont, the awaited
// calls without a record yet (docs/protocol.md 6.1), and returns the awaited
// records as stored; with no cont, only the records that exist.
func (s *Store) join(ctx context.Context, run Run, cont *Batch) []*Record {
	var out, created []*Record
	for _, r := range run.Calls {
		if cont != nil && !slices.Contains(cont.Waiting, r.Call.ID) {
			continue
		}
		got, err := s.Read.Get(ctx, r.Key())
		if cont != nil && store.IsNotFound(err) {
			if err = s.calls.create(ctx, r); err == nil {
				got = r
				created = append(created, r)
			} else if store.IsConflict(err) {
				got, err = s.Read.Get(ctx, r.Key())
			}
		}
		if err == nil {
			out = append(out, got)
		}
	}
	s.calls.announce(Run{}, nil, created)
	return out
}

// differs is bus.SameCalls of run's batch and an earlier copy's
// continuation b, or (b nil) its records recs.
func differs(run Run, b *Batch, recs []*Record) error {
	if b != nil {
		return b.Same(run.Batch.Data.Calls)
	}
	return SameRecorded(run.Batch.Data.Calls, recs...)
}

// SameRecorded checks that each of recs records the call of its id among
// calls (a copy's), where no continuation is there to compare with
// (docs/protocol.md 3.1).
func SameRecorded(calls []bus.Call, recs ...*Record) error {
	for _, rec := range recs {
		for _, c := range calls {
			if c.ID == rec.Call.ID {
				first := rec.Call
				if d := heldDigest(rec); d != "" { // an ended call's input, by its digest (1.23)
					_, canon := bus.CallDigests(c.Name, c.Input)
					first.Input, c.Input = heldInput(d), heldInput(canon)
				}
				if err := bus.SameCalls(rec.ReplyID, []bus.Call{first}, []bus.Call{c}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// unpark removes a refused copy's unannounced records (calls keeps to 15 methods).
func unpark(ctx context.Context, c *calls, recs []*Record) {
	for _, r := range recs {
		if _, err := store.Delete(ctx, c.kv, r.Key(), store.Bounded); err != nil {
			c.cfg.Logger.Warn("parked: a refused copy's record not removed", "key", r.Key(), "err", err)
		}
	}
}

// announce hands run's records to run.Announce, then publishes the live requests.
func (c *calls) announce(run Run, parked, created []*Record) {
	if run.Announce != nil {
		run.Announce(parked)
	}
	for _, r := range created {
		c.live(r)
	}
}

// carried is the continuation r carries (nil: none, or unreadable).
func carried(r *Record) *Batch {
	if len(r.Batch) == 0 {
		return nil
	}
	b := new(Batch)
	if json.Unmarshal(r.Batch, b) != nil {
		return nil
	}
	for i, c := range b.Data.Calls {
		if c.ID != r.Call.ID || c.Input != nil {
			continue
		}
		if d := heldDigest(r); d != "" { // the record ended: it holds the digest (1.23)
			if b.Held == nil {
				b.Held = map[string]string{}
			}
			b.Held[c.ID] = d
		} else { // held by the record (1.19)
			b.Data.Calls[i].Input = r.Call.Input
		}
	}
	if b.Results == nil {
		b.Results = map[string]bus.Result{}
	}
	b.gone = true
	return b
}

// Continuation is rec's batch's continuation: carried by rec, or under its key.
func (s Reads) Continuation(ctx context.Context, rec *Record) (*Batch, error) {
	if b := carried(rec); b != nil {
		return b, nil
	}
	return s.Batch(ctx, rec.Session, rec.ReplyID)
}

// Settle ends the run that parked calls: its results join the continuation,
// which waits, or resumes here when every answer came in (true); one taken
// over meanwhile gets only the results, lest both routers resume it.
func (s *Store) Settle(ctx context.Context, session, replyID string, results map[string]bus.Result) (*Batch, bool, error) {
	b, err := s.conts.update(ctx, session, replyID, func(b *Batch) error {
		for id, res := range results {
			if _, ok := b.Results[id]; !ok {
				b.Results[id] = res
			}
		}
		if b.Active() && b.Owner != s.cfg.Owner {
			return nil // taken over: its new owner settles it
		}
		b.Phase, b.Owner = PhaseParked, ""
		if b.Ready() {
			claim(b, s.cfg.Owner, PhaseResumed, "run")
		}
		return nil
	})
	if err != nil {
		s.conts.leases.release(batchKey(BatchKey(session, replyID)))
		return nil, false, err
	}
	return b, s.conts.track(b), nil
}

// Verdict is what an accepted answer does to its call.
type Verdict int

// The verdicts of an answer.
const (
	Done      Verdict = iota // the answer makes the result (an external result, a denial): parked → done
	Repark                   // a confirmed call of an external tool waits again, for its execution
	Confirmed                // a confirmed call runs on this router, under a lease: parked → answered
)

// Decide validates an answer against its record, maybe rewriting either.
type Decide func(*Record, *bus.Answer) (Verdict, bus.Result, error)

// Answered is what Answer did.
type Answered struct {
	Record  *Record
	Verdict Verdict
	Answer  *bus.Answer // the winning answer, as decide left it
}

// Resume records a call's result in its record (answered → done), runs
// report with the continuation as read (nil: unreadable), then adds the
// result to it; the last awaited result resumes the batch (true), writing
// nothing when nothing is left to run (Finish removes it after batch.done).
func (s *Store) Resume(ctx context.Context, rec *Record, res bus.Result, report func(*Batch)) (*Batch, bool, error) {
	if rec.Status == bus.ParkParked { // only the transition that ended the call completes it
		return nil, false, bus.Errorf(bus.CodeNotParked, "call %s is still parked: it has no result to record", rec.Call.ID)
	}
	if rec.Status == bus.ParkAnswered {
		if _, err := s.calls.end(ctx, rec.Key(), bus.ParkAnswered, bus.ParkDone, res); err != nil {
			if be := (*bus.Error)(nil); errors.As(err, &be) {
				return nil, false, err
			}
			if len(rec.Batch) > 0 {
				// Only the close says this router ended it: a taker-over resumes it.
				return nil, false, fmt.Errorf("parked: answered call %s not closed: %w", rec.Key(), err)
			}
			s.cfg.Logger.Warn("parked: answered call not closed", "key", rec.Key(), "err", err)
		}
	}
	cont, err := s.Read.Continuation(ctx, rec)
	report(cont)
	// Nothing left to run: the continuation stays until batch.done (1.13).
	if err == nil && (cont.gone || cont.last(rec.Call.ID)) {
		cont.Results[rec.Call.ID] = res
		claim(cont, s.cfg.Owner, PhaseResumed, rec.Call.ID)
		return cont, true, nil
	}
	return s.conts.complete(ctx, rec.Session, rec.ReplyID, rec.Call.ID, res, false)
}

// Mends completes batches whose router ended a call and stopped before its
// result joined the continuation (docs/protocol.md 6.1, 1.11). Use Store.Mends.
type Mends struct{ s *Store }

// Stranded returns the records of calls seen ending a lease ago whose
// cached continuation still lacks their result (no I/O in the normal case).
func (m Mends) Stranded(ctx context.Context, lease time.Duration) []*Record {
	s := m.s
	var out []*Record
	for key, n := range s.calls.ended.before(s.calls.ended.now().Add(-lease)) {
		switch s.conts.awaits(n) {
		case awaitNone:
			s.calls.ended.forget(key)
			continue
		case awaitRunning:
			continue // its router settles it, or the one that takes it over
		}
		if rec := m.recheck(ctx, &s.calls.ended, key, endsInBatch); rec != nil {
			out = append(out, rec)
			s.calls.ended.later(key)
		}
	}
	return out
}

// recheck reads the record of key, noted in e: the record when it still
// ends so (ends); the note is forgotten once it does not, kept on a failed read.
func (m Mends) recheck(ctx context.Context, e *endings, key string, ends func(*Record) bool) *Record {
	rec, err := m.s.Read.Get(ctx, key)
	switch {
	case err == nil && ends(rec):
		return rec
	case err == nil || store.IsNotFound(err):
		e.forget(key)
	}
	return nil
}

// Mend does, for a stranded rec, what its router's Resume would have:
// report, then add res while the continuation lacks it, resuming the batch
// it makes ready (true); nil, false, nil when there is nothing to mend.
func (m Mends) Mend(ctx context.Context, rec *Record, res bus.Result, report func(*Batch)) (*Batch, bool, error) {
	s := m.s
	if !endsInBatch(rec) {
		return nil, false, nil
	}
	cont, err := s.Read.Batch(ctx, rec.Session, rec.ReplyID)
	if store.IsNotFound(err) || err == nil && !cont.lacks(rec.Call.ID) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	report(cont)
	b, resume, err := s.conts.complete(ctx, rec.Session, rec.ReplyID, rec.Call.ID, res, true)
	switch {
	case errors.Is(err, errMended), store.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	s.cfg.Logger.Warn("parked: mended a batch whose router stopped before it recorded a result", "key", rec.Key(), "resumed", resume)
	return b, resume, nil
}

// errMended: the continuation has the result, or no longer waits for it.
var errMended = errors.New("parked: the result joined its batch")

// Lone returns the records of carried calls seen ending whose router is gone
// without outliving the end by a lease (presence.Judge): it may have died
// before batch.done (docs/protocol.md 1.13). The normal path costs no I/O.
func (m Mends) Lone(ctx context.Context) []*Record {
	s := m.s
	if s.cfg.Presence == nil {
		return nil
	}
	var out []*Record
	for key, n := range s.calls.lone.before(s.cfg.Presence.Now()) {
		switch s.cfg.Presence.Judge(n.router, n.seen) {
		case presence.Unsure:
			continue
		case presence.Outlived:
			s.cfg.Logger.Debug("parked: the router of a lone parked call outlived its end", "key", key, "ended_by", n.router)
			s.calls.lone.forget(key)
			continue
		}
		if rec := m.recheck(ctx, &s.calls.lone, key, unfinished); rec != nil {
			s.cfg.Logger.Warn("parked: the router that ended a lone parked call is gone; its call.result and batch.done are published again", "key", key, "ended_by", n.router)
			out = append(out, rec)
			s.calls.lone.forget(key)
		}
	}
	if d := s.calls.lone.takeDropped(); d > 0 {
		s.cfg.Logger.Warn("parked: lone parked calls not noted (too many within a lease); a router that died before their batch.done leaves them to a re-send", "calls", d)
	}
	return out
}

// Expire ends the parked calls whose time is up, returning those ended here.
func (s *Store) Expire(ctx context.Context, now time.Time) []*Record {
	return s.calls.endAll(ctx, s.calls.expired(now), bus.ParkExpired, bus.CodeTimeout, "Tool execution timeout after "+s.cfg.TTL.String())
}

// Cancel interrupts the calls of a reply (all when ids is empty): it marks
// a known continuation so queued calls never run (Reads.Marks) and ends the
// parked ones, returning those this router ended.
// An error says what was not recorded: the marks, or (ctx ended) ends.
func (s *Store) Cancel(ctx context.Context, session, replyID string, ids []string) ([]*Record, error) {
	if !s.Read.Knows(session, replyID) {
		return nil, nil
	}
	err := s.conts.cancel(ctx, session, replyID, ids)
	recs := slices.DeleteFunc(s.calls.list(session, replyID), func(r *Record) bool { return len(ids) > 0 && !slices.Contains(ids, r.Call.ID) })
	ended := s.calls.endAll(ctx, recs, bus.ParkCancelled, bus.CodeInterrupted, bus.InterruptedText)
	return ended, cmp.Or(err, context.Cause(ctx))
}

// Knows reports whether this router knows a record or the continuation of the batch.
func (s Reads) Knows(session, replyID string) bool {
	return len(s.calls.list(session, replyID)) > 0 || s.conts.knows(BatchKey(session, replyID))
}

// Cancels records the calls a cancel ended before they started (Store.Cancels).
type Cancels struct{ s *Store }

// Forestall records res for c, a call a cancel ended before it started
// (docs/protocol.md 3.5), so a re-sent copy that would park it gets res; an
// existing record stands.
func (f Cancels) Forestall(ctx context.Context, session, replyID string, c bus.Call, res bus.Result) error {
	r := &Record{Session: session, ReplyID: replyID, Call: c, Kind: bus.KindQueued, Status: bus.ParkCancelled, Result: &res}
	if err := f.s.calls.create(ctx, r); err != nil && !store.IsConflict(err) {
		return err
	}
	return nil
}

// Marks adds to b, once tracked as running, the cancel marks this router
// knows and b lacks (docs/protocol.md 3.5).
func (s Reads) Marks(b *Batch) {
	if b.gone {
		return // carried: nothing of it is left to run
	}
	s.conts.mu.RLock()
	defer s.conts.mu.RUnlock()
	key := b.Key()
	o, ok := s.conts.known.Get(key)
	if !ok || s.conts.known.Rev(key) <= b.rev {
		return
	}
	for _, id := range o.cancelled {
		if !slices.Contains(b.Cancelled, id) {
			b.Cancelled = append(b.Cancelled, id)
		}
	}
}

// TakeOver claims the continuations and answered calls of routers that
// stopped renewing their leases since cutoff.
func (s *Store) TakeOver(ctx context.Context, cutoff time.Time) ([]*Batch, []*Record) {
	return s.conts.takeOver(ctx, cutoff), s.calls.takeOverAnswers(ctx, cutoff)
}

// Finish removes the continuation of a batch whose batch.done went out; a
// batch its call's record carries (1.6) stays there without its results
// (finishCarried).
func (s *Store) Finish(ctx context.Context, b *Batch) error {
	defer s.Release(b)
	if b.gone {
		return finishCarried(ctx, s.calls, b)
	}
	rev, err := store.Delete(ctx, s.conts.kv, b.Key(), store.Bounded)
	if err != nil {
		return fmt.Errorf("parked: delete batch %s: %w", b.Key(), err)
	}
	s.conts.forget(b.Key(), rev)
	return nil
}

// finishCarried rewrites the record that carries b, its batch.done stored,
// without the batch's earlier results when they take heldFrom bytes or
// more, marked Done: nothing needs them for the record's 7 days (a copy
// re-sent now keeps its own, as once a continuation is deleted; Lone
// publishes nothing again), and only its calls are compared (1.27).
func finishCarried(ctx context.Context, c *calls, b *Batch) error {
	if len(b.Waiting) != 1 {
		return nil
	}
	n := 0
	for id, res := range b.Results {
		if id != b.Waiting[0] {
			v, _ := json.Marshal(res)
			n += len(v)
		}
	}
	if n < heldFrom {
		return nil
	}
	_, err := c.change(ctx, bus.CallKey(b.Session, b.ReplyID, b.Waiting[0]), store.Bounded, func(r *Record) error {
		var kept Batch
		if !endedWithResult(r) || json.Unmarshal(r.Batch, &kept) != nil || kept.Done {
			return store.ErrNoChange
		}
		kept.Results, kept.Done = map[string]bus.Result{}, true
		var err error
		r.Batch, err = json.Marshal(&kept)
		return err
	})
	return err
}

// Release stops renewing the lease of a batch, for another router to take.
func (s *Store) Release(b *Batch) { s.conts.leases.release(batchKey(b.Key())) }

// Parked returns the cached parked records of a session ("": all), oldest first.
func (s Reads) Parked(session, replyID string) []*Record { return s.calls.list(session, replyID) }

// ParkedNow is Parked once the cache caught up with the bucket's leader
// (docs/protocol.md 3.4); when it cannot, the cache as it is, with the error.
func (s Reads) ParkedNow(ctx context.Context, session string) ([]*Record, error) {
	filter := "*.*.*"
	if session != "" {
		filter = session + ".*.*"
	}
	rev, err := s.calls.kv.LastRevision(ctx, filter)
	if err == nil && s.calls.watch != nil {
		err = s.calls.watch.Reached(ctx, rev)
	}
	return s.Parked(session, ""), err
}

// FromLeader returns the parked records of one session, oldest first, read
// from the bucket's stream leader, for when the cache is behind
// (docs/inbox.md); a record that does not decode is skipped.
func (s Reads) FromLeader(ctx context.Context, session string) ([]*Record, error) {
	entries, err := s.calls.kv.Latest(ctx, session+".*.*")
	if err != nil {
		return nil, err
	}
	var recs []*Record
	for _, e := range entries {
		var r Record
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			s.calls.cfg.Logger.Warn("parked: a record that does not decode skipped", "key", e.Key(), "err", err)
			continue
		}
		if r.Status == bus.ParkParked && r.Session == session {
			r.Rev = e.Revision()
			recs = append(recs, &r)
		}
	}
	slices.SortFunc(recs, func(a, b *Record) int { return a.Created.Compare(b.Created) })
	return recs, nil
}

// Held returns the cached parked record of the first of calls (no allocation).
func (s Reads) Held(session, replyID string, calls []bus.Call) *Record {
	var buf [192]byte
	s.calls.mu.RLock()
	defer s.calls.mu.RUnlock()
	for _, c := range calls {
		var key string
		if n := len(session) + len(replyID) + len(c.ID) + 2; n <= len(buf) {
			k := append(append(append(append(append(buf[:0], session...), '.'), replyID...), '.'), c.ID...)
			key = unsafe.String(&k[0], len(k)) // looked up only, never kept
		} else {
			key = bus.CallKey(session, replyID, c.ID)
		}
		if r, ok := s.calls.parked.Get(key); ok {
			return r
		}
	}
	return nil
}

// Get reads a call's record (bus.CallKey) from the store.
func (s Reads) Get(ctx context.Context, key string) (*Record, error) {
	r, rev, err := read[Record](ctx, s.calls.kv, key)
	if r != nil {
		r.Rev = rev
	}
	return r, err
}

// Batch reads a batch's continuation from the store.
func (s Reads) Batch(ctx context.Context, session, replyID string) (*Batch, error) {
	b, rev, err := read[Batch](ctx, s.conts.kv, BatchKey(session, replyID))
	if err != nil {
		return nil, err
	}
	if b.Results == nil {
		b.Results = map[string]bus.Result{}
	}
	b.rev = rev
	return b, nil
}

// Phase is where a continuation stands; each change is one compare-and-set
// of a Store verb (the table in docs/parked.md). A batch whose only wait is
// its last call is carried in that call's record instead (Record.Batch).
type Phase string

const (
	// PhaseRunning: the router that parked calls is finishing their run.
	PhaseRunning Phase = "running"
	// PhaseParked: waiting for answers; the last one's recorder resumes it.
	PhaseParked Phase = "parked"
	// PhaseResumed: a router runs the rest of the batch.
	PhaseResumed Phase = "resumed"
)

// Batch is the continuation of a batch that parked calls.
type Batch struct {
	Session     string                `json:"session"`
	ReplyID     string                `json:"reply_id"`
	TraceParent string                `json:"traceparent,omitempty"`
	TraceState  string                `json:"tracestate,omitempty"`
	Expiry      string                `json:"expirytime,omitempty"`
	Data        bus.Batch             `json:"data"`
	Results     map[string]bus.Result `json:"results"`
	Waiting     []string              `json:"waiting"`
	Next        int                   `json:"next"`
	Phase       Phase                 `json:"phase"`
	Cancelled   []string              `json:"cancelled,omitempty"`  // call ids to interrupt before they run; "*" for all
	ResumedBy   string                `json:"resumed_by,omitempty"` // why it resumed: the call whose result made it ready, "run" or "takeover"
	// Owner, while active, renews Touched (a lease); stale, it is taken over.
	Owner   string    `json:"owner,omitempty"`
	Touched time.Time `json:"touched"`
	// Held is, by call id, the digest (bus.CallDigests' canon) of each
	// input of heldFrom bytes or more that the call's record holds and Data
	// leaves out (1.20), to compare a re-sent copy with (Same).
	Held map[string]string `json:"held,omitempty"`
	// Done marks a batch a record carries whose batch.done was stored, kept
	// without its results (finishCarried, 1.27).
	Done bool `json:"done,omitempty"`

	rev  uint64
	gone bool // carried in a record, or removed: Finish has nothing to delete
}

// heldFrom is the input size from which a parked call's input is held by
// its record only, not by its batch's continuation as well (1.20).
const heldFrom = 1 << 10

// hold leaves out of b's calls (copied first) the inputs of heldFrom bytes
// or more of calls ids, whose records hold them, keeping their digests.
func (b *Batch) hold(ids []string) {
	b.Data.Calls = slices.Clone(b.Data.Calls)
	for i, c := range b.Data.Calls {
		if len(c.Input) >= heldFrom && slices.Contains(ids, c.ID) {
			if b.Held == nil {
				b.Held = map[string]string{}
			}
			_, b.Held[c.ID] = bus.CallDigests(c.Name, c.Input)
			b.Data.Calls[i].Input = nil
		}
	}
}

// Same is bus.SameCalls of b's calls and calls, a re-sent copy's
// (docs/protocol.md 3.1); an input b holds by its digest (Held) is
// compared by the digest of the copy's.
func (b *Batch) Same(calls []bus.Call) error {
	first := b.Data.Calls
	if len(b.Held) > 0 {
		first, calls = slices.Clone(first), slices.Clone(calls)
		for i, c := range first {
			if d, ok := b.Held[c.ID]; ok {
				first[i].Input = heldInput(d)
			}
		}
		for i, c := range calls {
			if _, ok := b.Held[c.ID]; ok {
				_, d := bus.CallDigests(c.Name, c.Input)
				calls[i].Input = heldInput(d)
			}
		}
	}
	return bus.SameCalls(b.ReplyID, first, calls)
}

// heldInput stands for an input by its digest d in a comparison (Same).
func heldInput(d string) json.RawMessage { return json.RawMessage(`{"held":"` + d + `"}`) }

// last reports whether id's result is the last b awaits, nothing after it.
func (b *Batch) last(id string) bool {
	if b.Phase != PhaseParked || b.Next < len(b.Data.Calls) || !slices.Contains(b.Waiting, id) {
		return false
	}
	for _, w := range b.Waiting {
		if _, ok := b.Results[w]; !ok && w != id {
			return false
		}
	}
	return true
}

// lacks reports whether b, parked, awaits id's result without it.
func (b *Batch) lacks(id string) bool {
	_, has := b.Results[id]
	return b.Phase == PhaseParked && !has && slices.Contains(b.Waiting, id)
}

// DoneID is batch.done's id (and Nats-Msg-Id), the same from every router
// that finishes the batch (docs/protocol.md 3.4, 6.1); 22 characters.
func (b *Batch) DoneID() string {
	return eventID("io.toolbus.batch.done\x00%d:%s\x00%s", len(b.Session), b.Session, b.ReplyID)
}

// ResultID is a parked call's call.result id, derived like DoneID.
func ResultID(session, replyID, callID string) string {
	return eventID("io.toolbus.call.result\x00%d:%s\x00%d:%s\x00%s", len(session), session, len(replyID), replyID, callID)
}

// eventID is the first 16 bytes of the formatted text's SHA-256, base64url.
func eventID(format string, args ...any) string {
	h := sha256.New()
	fmt.Fprintf(h, format, args...)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}

// Key returns the continuation's P_parked key, BatchKey(Session, ReplyID).
func (b *Batch) Key() string { return BatchKey(b.Session, b.ReplyID) }

// Active reports whether a router works on the batch (running or resumed).
func (b *Batch) Active() bool { return b.Phase == PhaseRunning || b.Phase == PhaseResumed }

// Ready reports whether every awaited call has its result.
func (b *Batch) Ready() bool {
	return !slices.ContainsFunc(b.Waiting, func(id string) bool {
		_, ok := b.Results[id]
		return !ok
	})
}

// IsCancelled reports whether the agent cancelled call id (or every call).
func (b *Batch) IsCancelled(id string) bool {
	return slices.Contains(b.Cancelled, "*") || slices.Contains(b.Cancelled, id)
}

// conts holds the continuations of parked batches (keys <session>.<replyid>).
type conts struct {
	shared

	mu     sync.RWMutex
	active map[string]*Batch  // continuations running or resumed, for lease takeovers
	leases leaseSet[batchKey] // continuations this router works on and renews
	// known is every continuation known to exist, in brief (Cancel, Marks, Stranded).
	known *store.Cache[openBatch]
	watch *store.Watch
}

// knows reports whether key's continuation exists as far as this router knows.
func (s *conts) knows(key string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.known.Get(key)
	return ok
}

// note records that this router wrote b, of size bytes (0: as last seen), at its revision.
func (s *conts) note(b *Batch, size int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := brief(b)
	if old, ok := s.known.Get(b.Key()); ok && size == 0 {
		size = old.size
	}
	o.size = size
	s.known.Put(b.Key(), b.rev, o)
}

// Taken is what an answer must leave of the max payload to its batch's own
// continuation (1.19): its size as last seen, and its other missing results'
// shares of the rest less AnswerRoom; 0 without one (carried, finished) or a bound.
func (s Reads) Taken(session, replyID string) int {
	s.conts.mu.RLock()
	o, ok := s.conts.known.Get(BatchKey(session, replyID))
	s.conts.mu.RUnlock()
	if !ok || len(o.missing) == 0 || s.conts.cfg.MaxPayload == nil {
		return 0
	}
	left := max(int(s.conts.cfg.MaxPayload())-AnswerRoom-o.size, 0)
	return o.size + left - left/len(o.missing)
}

// forget records this router's delete of key at rev (0: unknown).
func (s *conts) forget(key string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known.DeleteOwn(key, rev)
}

// claim makes owner (the store's router) the batch's owner in phase p.
func claim(b *Batch, owner string, p Phase, why string) {
	b.Phase, b.Owner, b.Touched = p, owner, time.Now().UTC()
	if why != "" {
		b.ResumedBy = why
	}
}

// errCancelledFirst: a cancel recorded the call's result before it parked.
var errCancelledFirst = errors.New("parked: the call was cancelled before it parked")

// errParkedBefore: an earlier copy of the batch parked first.
var errParkedBefore = errors.New("parked: this batch parked before")

// parkBatch records the batch's results, awaited calls and next index,
// running or parked when settled: created (errParkedBefore) or updated if owned.
func (s *conts) parkBatch(ctx context.Context, b *Batch, results map[string]bus.Result, waiting []string, next int, settled bool) error {
	phase := func(b *Batch) {
		claim(b, s.cfg.Owner, PhaseRunning, "")
		if settled {
			b.Phase, b.Owner = PhaseParked, ""
		}
	}
	if b.rev != 0 {
		got, err := s.update(ctx, b.Session, b.ReplyID, func(cur *Batch) error {
			if cur.Owner != s.cfg.Owner || !cur.Active() {
				return fmt.Errorf("parked: batch %s: %w (taken over by %s)", b.Key(), ErrNotOwner, cur.Owner)
			}
			maps.Copy(cur.Results, results)
			cur.Waiting, cur.Next = waiting, next
			phase(cur)
			cur.hold(waiting)
			_, err := s.encode(cur)
			return err
		})
		if err != nil {
			return err
		}
		*b = *got
		s.track(b)
		return nil
	}
	b.Results, b.Waiting, b.Next = results, waiting, next
	phase(b)
	stored := *b // b keeps the inputs: its run compares copies with them
	stored.hold(waiting)
	v, err := s.encode(&stored)
	if err != nil {
		return err
	}
	rev, err := store.Create(ctx, s.kv, b.Key(), v, store.Bounded)
	switch {
	case store.IsConflict(err):
		return errParkedBefore
	case err != nil:
		return fmt.Errorf("parked: batch %s: %w", b.Key(), err)
	}
	b.rev = rev
	s.note(b, len(v))
	s.track(b)
	return nil
}

// complete records the result of a parked call (mending: only while the
// batch lacks it, else errMended); the one that makes it ready resumes it.
func (s *conts) complete(ctx context.Context, session, replyID, callID string, res bus.Result, mending bool) (*Batch, bool, error) {
	var resume bool
	b, err := s.update(ctx, session, replyID, func(b *Batch) error {
		resume = false
		if mending && !b.lacks(callID) {
			return errMended
		}
		b.Results[callID] = res
		if b.Phase == PhaseParked && b.Ready() {
			claim(b, s.cfg.Owner, PhaseResumed, callID)
			resume = true
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if resume {
		s.leases.hold(batchKey(b.Key()))
	}
	return b, resume, nil
}

// cancel marks calls of a parked batch (all when ids is empty) never to run.
func (s *conts) cancel(ctx context.Context, session, replyID string, ids []string) error {
	marks := ids
	if len(marks) == 0 {
		marks = []string{"*"}
	}
	_, err := s.update(ctx, session, replyID, func(b *Batch) error {
		n := len(b.Cancelled)
		for _, id := range marks {
			if !slices.Contains(b.Cancelled, id) {
				b.Cancelled = append(b.Cancelled, id)
			}
		}
		if len(b.Cancelled) == n {
			// Every router gets the cancel: the first one's write is enough.
			return store.ErrNoChange
		}
		return nil
	})
	if store.IsNotFound(err) {
		s.forget(BatchKey(session, replyID), 0)
		return nil
	}
	return err
}

// takeOver claims active batches whose lease lapsed before cutoff, to repair.
func (s *conts) takeOver(ctx context.Context, cutoff time.Time) []*Batch {
	var out []*Batch
	for _, stale := range s.stale(cutoff) {
		if stale.Owner == s.cfg.Owner && s.leases.holds(batchKey(stale.Key())) {
			continue // this router is working on it: its renewal is late, not gone
		}
		b, err := s.update(ctx, stale.Session, stale.ReplyID, func(b *Batch) error {
			if !b.Active() || !b.Touched.Before(cutoff) {
				return ErrNotOwner
			}
			s.cfg.Logger.Warn("parked: taking over a batch whose router stopped", "session", b.Session, "reply", b.ReplyID, "owner", b.Owner)
			claim(b, s.cfg.Owner, PhaseResumed, "takeover")
			return nil
		})
		if err == nil {
			s.leases.hold(batchKey(b.Key()))
			out = append(out, b)
		}
	}
	return out
}

// remove deletes b at its revision; false when b changed meanwhile.
func (s *conts) remove(ctx context.Context, b *Batch) bool {
	err := store.Retry(ctx, store.UntilLanded, func(ctx context.Context) error {
		if s.kv.Delete(ctx, b.Key(), jetstream.LastRevision(b.rev)) == nil {
			return nil
		}
		_, err := s.kv.Get(ctx, b.Key())
		switch {
		case store.IsNotFound(err):
			return nil
		case err == nil:
			return store.Permanent(errChanged) // not a transient error: trying again never lands
		}
		return err // unknown yet: try again
	})
	b.gone = err == nil
	if b.gone {
		s.forget(b.Key(), b.rev)
	}
	return b.gone
}

var errChanged = errors.New("parked: the continuation changed")

// update applies fn (maybe more than once; its error writes nothing) to the
// latest continuation by compare-and-set; store.IsNotFound when none.
func (s *conts) update(ctx context.Context, session, replyID string, fn func(*Batch) error) (*Batch, error) {
	key := BatchKey(session, replyID)
	b, rev, err := cas(ctx, s.kv, key, store.UntilLanded, fmt.Errorf("parked: batch %s: %w", key, jetstream.ErrKeyNotFound), func(b *Batch) error {
		if b.Results == nil {
			b.Results = map[string]bus.Result{}
		}
		return fn(b)
	})
	if err != nil {
		return nil, err
	}
	b.rev = rev
	s.note(b, 0)
	return b, nil
}

// track holds b's lease while this router owns it, and reports whether it does.
func (s *conts) track(b *Batch) bool {
	if b.Active() && b.Owner == s.cfg.Owner {
		s.leases.hold(batchKey(b.Key()))
		return true
	}
	s.leases.release(batchKey(b.Key()))
	return false
}

// applyBatch keeps the cache of continuations routers are working on.
func (s *conts) applyBatch(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := e.Key()
	var b Batch
	if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &b) != nil {
		return
	}
	b.rev = e.Revision()
	if e.Operation() != jetstream.KeyValuePut {
		s.known.Delete(key, b.rev)
	} else {
		o := brief(&b)
		o.size = len(e.Value())
		s.known.Put(key, b.rev, o)
	}
	if old, ok := s.active[key]; ok && old.rev >= b.rev {
		return
	}
	if e.Operation() == jetstream.KeyValuePut && b.Active() {
		s.active[key] = &b
	} else {
		delete(s.active, key)
	}
}

// stale returns the cached active continuations not renewed since cutoff.
func (s *conts) stale(cutoff time.Time) []*Batch {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*Batch
	for _, b := range s.active {
		if b.Touched.Before(cutoff) {
			out = append(out, b)
		}
	}
	return out
}

// openBatch is a continuation in brief: phase, missing results, cancel marks, size.
type openBatch struct {
	phase     Phase
	missing   []string
	cancelled []string
	size      int // bytes of its encoding
}

func brief(b *Batch) openBatch {
	o := openBatch{phase: b.Phase, cancelled: slices.Clone(b.Cancelled)}
	for _, id := range b.Waiting {
		if _, ok := b.Results[id]; !ok {
			o.missing = append(o.missing, id)
		}
	}
	return o
}

// await is what a cached continuation does about an ended call of its batch.
type await int

const (
	awaitNone     await = iota // nothing: its result joined it, the batch moved on or finished, or there is none
	awaitRunning               // a router runs the batch; look again once it waits for answers
	awaitStranded              // it waits for answers, this call's among them, without its result
)

// awaits says what the continuation of n's batch does about n's result.
func (s *conts) awaits(n endedCall) await {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o, ok := s.known.Get(BatchKey(n.session, n.replyID))
	switch {
	case !ok || !slices.Contains(o.missing, n.callID):
		return awaitNone
	case o.phase != PhaseParked:
		return awaitRunning
	}
	return awaitStranded
}

// Record is a parked call (bus.ParkRecord; only this package writes it).
type Record = bus.ParkRecord

// BatchKey is the P_parked key of a batch's continuation: <session>.<replyid>.
func BatchKey(session, replyID string) string { return session + "." + replyID }

// shared is what calls and conts both use.
type shared struct {
	kv  *store.KV
	cfg Config
}

// calls holds the call records: transitions, live requests and caches.
type calls struct {
	shared
	subj   bus.Subjects
	leases leaseSet[callKey] // answered calls this router makes the result of

	mu       sync.RWMutex
	parked   *store.Cache[*Record] // key → record, only records in bus.ParkParked; a tombstone per key that left, kept goneMemory
	answered map[string]*Record    // records in bus.ParkAnswered, for lease takeovers
	ended    endings               // calls of batches with a continuation of their own that ended, until that continuation is seen with their result (Mends.Stranded)
	lone     endings               // calls that carried their batch and ended, seen live, until their router is judged (Mends.Lone)
	follows  atomic.Bool           // the watch delivered the initial records: later endings are seen as they happen
	watch    *store.Watch
}

func newCalls(sh shared, subj bus.Subjects) *calls {
	now := time.Now
	if sh.cfg.Presence != nil {
		now = sh.cfg.Presence.Now
	}
	return &calls{shared: sh, subj: subj, parked: store.NewCache[*Record](goneMemory), answered: map[string]*Record{},
		ended: endings{m: map[string]endedCall{}, now: now}, lone: endings{m: map[string]endedCall{}, max: maxLone, now: now}}
}

// create stores a new parked record before its request (docs/protocol.md
// 6.1); a record with a status of its own (Forestall's) keeps it.
func (s *calls) create(ctx context.Context, r *Record) error {
	now := time.Now().UTC()
	r.Status, r.Created, r.Expires = cmp.Or(r.Status, bus.ParkParked), now, now.Add(s.cfg.TTL)
	// P.answer.<tool> for every kind: clients derive P.approve (protocol 6.1).
	r.Subject, r.InputDigest = s.subj.Handoffs.Answer(r.Call.Name), bus.InputDigest(r.Call.Input)
	stored := r
	if r.Status != bus.ParkParked { // an ended call's record (Forestall's) holds its input's digest
		stored = new(*r)
		hold(stored)
	}
	b, err := json.Marshal(stored)
	if err != nil {
		return err
	}
	if r.Status == bus.ParkParked {
		if err := s.bound("its record", len(b)); err != nil {
			return err
		}
	}
	rev, err := store.Create(ctx, s.kv, r.Key(), b, store.Bounded)
	if err != nil {
		return fmt.Errorf("parked: park %s: %w", r.Key(), err)
	}
	r.Rev = rev
	s.note(r.Key(), r) // a copy: the caller keeps r
	return nil
}

// read decodes the value of key, at its revision.
func read[T any](ctx context.Context, kv jetstream.KeyValue, key string) (*T, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	v := new(T)
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return nil, 0, fmt.Errorf("parked: %s is corrupt: %w", key, err)
	}
	return v, e.Revision(), nil
}

// cas applies fn to key's decoded value by compare-and-set (store.Update).
func cas[T any](ctx context.Context, kv jetstream.KeyValue, key string, p store.Policy, missing error, fn func(*T) error) (*T, uint64, error) {
	var v *T
	rev, err := store.Update(ctx, kv, key, p, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		if cur == nil {
			return nil, missing
		}
		v = new(T)
		if err := json.Unmarshal(cur.Value(), v); err != nil {
			return nil, fmt.Errorf("parked: %s is corrupt: %w", key, err)
		}
		if err := fn(v); err != nil {
			return nil, err
		}
		return json.Marshal(v)
	})
	return v, rev, err
}

// transition moves a record from status from to the state fn leaves it in,
// by compare-and-set; bus.ErrNotParked or bus.ErrAlreadyAnswered else.
func (s *calls) transition(ctx context.Context, key string, from bus.ParkStatus, p store.Policy, fn func(*Record) error) (*Record, error) {
	return s.change(ctx, key, p, func(r *Record) error {
		if r.Status != from {
			return wrongStatus(r, from)
		}
		return fn(r)
	})
}

func wrongStatus(r *Record, from bus.ParkStatus) error {
	if from == bus.ParkParked && (r.Status == bus.ParkAnswered || r.Status == bus.ParkDone && r.Answer != nil) {
		return bus.Errorf(bus.CodeAlreadyAnswered, "call %s was already answered", r.Call.ID)
	}
	return bus.Errorf(bus.CodeNotParked, "call %s is %s, not %s", r.Call.ID, r.Status, from)
}

// Answer takes an answer in one compare-and-set: the first valid one wins.
// decide validates and may rewrite it; its error changes nothing. Another
// tool's call or one not parked is bus.ErrNotParked; a late one
// bus.ErrAlreadyAnswered.
func (st *Store) Answer(ctx context.Context, key, tool string, a *bus.Answer, decide Decide) (Answered, error) {
	s := st.calls
	var out Answered
	var full Record
	r, err := s.change(ctx, key, answerPolicy, func(r *Record) error {
		if r.Call.Name != tool {
			return bus.Errorf(bus.CodeNotParked, "no call %s of tool %s is parked in session %s, reply %s", r.Call.ID, tool, r.Session, r.ReplyID)
		}
		if r.Status != bus.ParkParked {
			return wrongStatus(r, bus.ParkParked)
		}
		v, res, err := decide(r, a)
		if err != nil {
			return err
		}
		out = Answered{Verdict: v, Answer: a}
		now := time.Now().UTC()
		switch v {
		case Done: // the answer is the result: parked → done in this one write
			kept := *a
			kept.Output = nil // held once, as the result's (1.19)
			r.Status, r.Answer, r.Result, r.Owner = bus.ParkDone, &kept, &res, s.cfg.Owner
			full = hold(r)
		case Repark: // a confirmed call of an external tool now waits for its execution
			r.Kind, r.SuggestedRules, r.Reason, r.Expires = bus.KindExternal, nil, "", now.Add(s.cfg.TTL)
		default: // Confirmed: this router runs the confirmed call under a lease
			r.Status, r.Answer, r.Owner, r.Touched = bus.ParkAnswered, a, s.cfg.Owner, now
		}
		return nil
	})
	if errors.Is(err, nats.ErrMaxPayload) {
		return out, bus.Errorf(bus.CodeBadRequest, "answer: it would take call %s's record past the NATS server's max payload; nothing changed (send a smaller answer)", key)
	}
	if store.IsFull(err) {
		// Nothing changed until space is freed: the answerer may answer again later.
		return out, fmt.Errorf("%s: the answer was not recorded: %w", store.FullText, err)
	}
	if err != nil {
		return out, err
	}
	out.Record = r
	if out.Verdict == Done {
		unhold(r, &full)
	}
	if out.Verdict == Repark {
		s.live(r) // the record, now of kind external, is the new request
	}
	return out, nil
}

// answerPolicy retries an answer's write until it lands, not through a full store.
var answerPolicy = store.Policy{}

// end moves a call from status from to status to with res as its result
// (answered → done, parked → expired or cancelled); one racing router wins.
func (s *calls) end(ctx context.Context, key string, from, to bus.ParkStatus, res bus.Result) (*Record, error) {
	var full Record
	r, err := s.transition(ctx, key, from, store.UntilLanded, func(r *Record) error {
		// Named for Mends.Lone: that router publishes a carried batch.done.
		r.Status, r.Result, r.Owner = to, &res, s.cfg.Owner
		full = hold(r)
		return nil
	})
	if r != nil {
		unhold(r, &full)
	}
	return r, err
}

// heldMark starts what an ended record keeps of an input of heldFrom bytes
// or more: the JSON string "held:<digest>" (bus.CallDigests' canon), which
// no parked input is (an object), so that every ending shrinks its record
// (docs/protocol.md 6.1, 1.23).
const heldMark = `"held:`

// hold makes r, ending, keep its input's digest instead of an input of
// heldFrom bytes or more, and neither the batch's context nor its user of
// heldFrom bytes or more (the handler's copies); a batch r carries keeps
// its calls' inputs so by their digests too (Batch.hold), and no such
// context or user: nothing of it runs again. It returns r as it was.
func hold(r *Record) Record {
	full := *r
	if len(r.Call.Input) >= heldFrom {
		_, d := bus.CallDigests(r.Call.Name, r.Call.Input)
		r.Call.Input = json.RawMessage(heldMark + d + `"`)
	}
	r.Context, r.User = small(r.Context), small(r.User)
	var b Batch
	if len(r.Batch) >= heldFrom && json.Unmarshal(r.Batch, &b) == nil {
		ids := make([]string, len(b.Data.Calls))
		for i, c := range b.Data.Calls {
			ids[i] = c.ID
		}
		b.hold(ids)
		b.Data.Context, b.Data.User = small(b.Data.Context), small(b.Data.User)
		if v, err := json.Marshal(&b); err == nil {
			r.Batch = v
		}
	}
	return full
}

// small is v when shorter than heldFrom, else nothing (hold).
func small(v json.RawMessage) json.RawMessage {
	if len(v) >= heldFrom {
		return nil
	}
	return v
}

// unhold gives r, the caller's copy of an ended record, what hold left out
// of the stored one: the audit trail records the call whole, Resume runs its batch.
func unhold(r, full *Record) {
	r.Call.Input, r.Context, r.User, r.Batch = full.Call.Input, full.Context, full.User, full.Batch
}

// Held reports whether ended record r holds its input by digest (hold):
// a router that took the call over has the record's input_digest only.
func Held(r *Record) bool { return heldDigest(r) != "" }

// heldDigest is the digest an ended record r keeps of its input (hold); "" when it keeps the input.
func heldDigest(r *Record) string {
	in := string(r.Call.Input)
	if r.Status == bus.ParkParked || r.Status == bus.ParkAnswered || !strings.HasPrefix(in, heldMark) || !strings.HasSuffix(in, `"`) {
		return ""
	}
	return in[len(heldMark) : len(in)-1]
}

// endAll ends the parked calls recs with code's error, returning those ended here.
func (s *calls) endAll(ctx context.Context, recs []*Record, status bus.ParkStatus, code, text string) []*Record {
	var out []*Record
	for _, r := range recs {
		if got, err := s.end(ctx, r.Key(), bus.ParkParked, status, bus.ErrorResult(r.Call, code, text)); err == nil {
			out = append(out, got)
		}
	}
	return out
}

// change applies fn to record key by compare-and-set, updating cache and leases.
func (s *calls) change(ctx context.Context, key string, p store.Policy, fn func(*Record) error) (*Record, error) {
	r, rev, err := cas(ctx, s.kv, key, p, bus.Errorf(bus.CodeNotParked, "no parked call %s", key), fn)
	if err != nil {
		if be := (*bus.Error)(nil); errors.As(err, &be) {
			return nil, err
		}
		return nil, fmt.Errorf("parked: update %s: %w", key, err)
	}
	r.Rev = rev
	s.note(key, r) // a copy: the caller gets r
	if r.Status == bus.ParkAnswered && r.Owner == s.cfg.Owner {
		s.leases.hold(callKey(key)) // this router makes the call's result: it renews the lease
	} else {
		s.leases.release(callKey(key))
	}
	return r, nil
}

// takeOverAnswers claims answered calls whose lease lapsed before cutoff.
func (s *calls) takeOverAnswers(ctx context.Context, cutoff time.Time) []*Record {
	var out []*Record
	stale := slices.DeleteFunc(s.answeredBefore(cutoff), func(key string) bool { return s.leases.holds(callKey(key)) })
	for _, key := range stale {
		r, err := s.change(ctx, key, store.Bounded, func(r *Record) error {
			if r.Status != bus.ParkAnswered || !r.Touched.Before(cutoff) {
				return ErrNotOwner
			}
			s.cfg.Logger.Warn("parked: taking over an answer whose router stopped", "key", key, "owner", r.Owner)
			r.Owner, r.Touched = s.cfg.Owner, time.Now().UTC()
			return nil
		})
		if err == nil {
			out = append(out, r)
		}
	}
	return out
}

// The record is the handoff (protocol 6.2); live subscribers get it on core NATS.

// live publishes r's request (not request-scoped); followers read the record anyway.
func (s *calls) live(r *Record) {
	if s.cfg.Publish == nil || r.RequestScoped {
		return
	}
	m, err := requestMsg(r, s.cfg.Source, s.subj)
	if err == nil {
		err = s.cfg.Publish(m)
	}
	if err != nil {
		s.cfg.Logger.Debug("parked: live handoff request not published", "key", r.Key(), "err", err)
	}
}

// confirmRequest is bus.HandoffRequest with suggested_rules always present.
type confirmRequest struct {
	bus.HandoffRequest
	SuggestedRules []bus.Rule `json:"suggested_rules"`
}

// requestMsg is r's external or confirm request (protocol 6.2) from source.
func requestMsg(r *Record, source string, subj bus.Subjects) (*nats.Msg, error) {
	typ, subject := bus.TypeExternalReq, subj.Handoffs.External(r.Call.Name)
	req := bus.HandoffRequest{Call: r.Call, InputDigest: r.InputDigest, User: r.User, Context: r.Context, Subject: r.Subject, Expires: r.Expires}
	var data any = req
	if r.Kind == bus.KindConfirm {
		typ, subject = bus.TypeConfirmReq, subj.Handoffs.Confirm(r.Call.Name)
		req.Reason = r.Reason
		rules := r.SuggestedRules
		if rules == nil {
			rules = []bus.Rule{}
		}
		data = confirmRequest{HandoffRequest: req, SuggestedRules: rules}
	}
	e, err := bus.NewEvent(typ, source, data)
	if err != nil {
		return nil, err
	}
	e.SessionID, e.ReplyID, e.ToolCallID, e.Subject = r.Session, r.ReplyID, r.Call.ID, r.Call.ID
	e.ExpiryTime = r.Expires.Format(time.RFC3339Nano)
	return e.Msg(subject)
}

// A Want is what a follower may see: the records of kind for tool ("" every
// tool). It is the follow relay's trust boundary (docs/security.md).
type Want struct {
	Kind, Tool string
}

// Request turns the value of a P_parked entry into the request event a
// follower of w gets, from source; false when the entry is not for w.
func Request(value []byte, w Want, subj bus.Subjects, source string) (*nats.Msg, bool) {
	if len(value) == 0 || w.Kind != bus.KindExternal && w.Kind != bus.KindConfirm {
		return nil, false
	}
	var r Record
	if json.Unmarshal(value, &r) != nil || r.Status != bus.ParkParked || r.RequestScoped ||
		r.Kind != w.Kind || w.Tool != "" && r.Call.Name != w.Tool || !bus.ValidName(r.Call.Name) {
		return nil, false
	}
	m, err := requestMsg(&r, source, subj)
	return m, err == nil
}

// goneMemory is how long a tombstone keeps a late older revision out.
const goneMemory = time.Minute

func (c *calls) apply(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := e.Key()
	if c.parked.Stale(key, e.Revision()) {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		c.parked.Delete(key, e.Revision())
		delete(c.answered, key)
		c.ended.forget(key)
		return
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		c.cfg.Logger.Warn("parked: ignoring bad parked record", "key", key)
		return
	}
	r.Rev = e.Revision()
	if old, ok := c.answered[key]; !ok || old.Rev < r.Rev {
		if r.Status == bus.ParkAnswered {
			c.answered[key] = &r
		} else {
			delete(c.answered, key)
		}
	}
	c.ended.note(key, &r, endsInBatch(&r))
	if c.follows.Load() && c.cfg.Presence != nil {
		// Only endings seen live: the initial load's routers are long gone.
		c.lone.note(key, &r, endsCarried(&r) && r.Owner != "")
	}
	if r.Status == bus.ParkParked {
		c.parked.Put(key, r.Rev, &r)
	} else {
		c.parked.Delete(key, r.Rev)
	}
}

// endings is the calls of batches with their own continuation this router
// saw end, and when, by record key (Mends.Stranded). Safe for concurrent use.
type endings struct {
	mu      sync.Mutex
	m       map[string]endedCall
	max     int              // at most this many notes (0: no bound); past it new ones are not kept
	dropped int              // notes not kept since the last look (max)
	now     func() time.Time // presence's: a hold ages no note (docs/parked.md)
}

// note notes, the first time, that r (of key) ended as this set keeps
// them (ends), or drops the note when it did not; past max, new notes are
// dropped and counted.
func (e *endings) note(key string, r *Record, ends bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !ends {
		delete(e.m, key)
		return
	}
	if _, ok := e.m[key]; ok {
		return
	}
	if e.max > 0 && len(e.m) >= e.max {
		e.dropped++
		return
	}
	e.m[key] = endedCall{session: r.Session, replyID: r.ReplyID, callID: r.Call.ID, router: r.Owner, seen: e.now()}
}

// maxLone bounds the notes of lone calls ended within a lease.
const maxLone = 1 << 16

// endsCarried reports whether r carried its batch and ended with its result.
func endsCarried(r *Record) bool { return endedWithResult(r) && len(r.Batch) > 0 }

// unfinished reports whether r carried its batch, ended with its result,
// and its batch.done is not known stored (Batch.Done).
func unfinished(r *Record) bool {
	b := carried(r)
	return endsCarried(r) && b != nil && !b.Done
}

// endedCall is a call seen ending, when, and (carried) by which router.
type endedCall struct {
	session, replyID, callID string
	router                   string
	seen                     time.Time
}

// endsInBatch reports whether r ended with its result, not carrying its batch.
func endsInBatch(r *Record) bool { return endedWithResult(r) && len(r.Batch) == 0 }

// endedWithResult reports whether r ended (done, expired, cancelled) with its result.
func endedWithResult(r *Record) bool {
	switch r.Status {
	case bus.ParkDone, bus.ParkExpired, bus.ParkCancelled:
		return r.Result != nil
	}
	return false
}

// before returns the notes of the calls seen ending before cutoff, by key.
func (e *endings) before(cutoff time.Time) map[string]endedCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]endedCall{}
	for key, n := range e.m {
		if n.seen.Before(cutoff) {
			out[key] = n
		}
	}
	return out
}

// takeDropped returns how many notes were dropped since it was last called.
func (e *endings) takeDropped() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.dropped
	e.dropped = 0
	return d
}

// forget drops the note of the ended call key.
func (e *endings) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// later looks at the ended call key again a lease from now.
func (e *endings) later(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n, ok := e.m[key]; ok {
		n.seen = e.now()
		e.m[key] = n
	}
}

// note caches a copy of r, which this router just wrote at r.Rev.
func (c *calls) note(key string, r *Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended.note(key, r, endsInBatch(r)) // this router may stop before its Resume too
	if r.Status == bus.ParkParked {
		c.parked.Put(key, r.Rev, new(*r))
	} else {
		c.parked.Delete(key, r.Rev)
	}
}

func (c *calls) list(session, replyID string) []*Record {
	out := c.where(func(r *Record) bool {
		return (session == "" || r.Session == session) && (replyID == "" || r.ReplyID == replyID)
	})
	slices.SortFunc(out, func(a, b *Record) int { return a.Created.Compare(b.Created) })
	return out
}

func (c *calls) expired(now time.Time) []*Record {
	return c.where(func(r *Record) bool { return now.After(r.Expires) })
}

func (c *calls) where(keep func(*Record) bool) []*Record {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []*Record
	for _, r := range c.parked.All() {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// answeredBefore returns the keys of answered calls not renewed since cutoff.
func (c *calls) answeredBefore(cutoff time.Time) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var stale []string
	for key, r := range c.answered {
		if r.Touched.Before(cutoff) {
			stale = append(stale, key)
		}
	}
	return stale
}

// callKey and batchKey are the leased kinds of P_parked key.
type (
	callKey  string
	batchKey string
)

// leaseSet is the keys whose lease this router renews; concurrency-safe.
type leaseSet[K ~string] struct{ m sync.Map } // K → nil

func (l *leaseSet[K]) hold(k K)    { l.m.Store(k, nil) }
func (l *leaseSet[K]) release(k K) { l.m.Delete(k) }

func (l *leaseSet[K]) holds(k K) bool {
	_, ok := l.m.Load(k)
	return ok
}

func (l *leaseSet[K]) held() []K {
	var out []K
	for k := range l.m.Range {
		out = append(out, k.(K))
	}
	return out
}

// renewOwned renews l's leases still owned (touch), releasing the others.
func renewOwned[T any, K ~string](ctx context.Context, kv jetstream.KeyValue, l *leaseSet[K], p store.Policy, touch func(*T) bool) (failed error) {
	for _, key := range l.held() {
		_, _, err := cas(ctx, kv, string(key), p, ErrNotOwner, func(v *T) error {
			if !touch(v) {
				return ErrNotOwner
			}
			return nil
		})
		switch {
		case err == nil:
		case errors.Is(err, ErrNotOwner), store.IsNotFound(err):
			l.release(key)
		default:
			failed = err
		}
	}
	return failed
}

// ErrTooLarge is Park's error, or a call's in Parking.Failed, when a record or
// continuation would pass the max payload: nothing of it was written (6.1, 1.19).
var ErrTooLarge = errors.New("the NATS server's max payload")

// bound is ErrTooLarge when what, of n bytes, would leave less than
// AnswerRoom of the max payload for its answers (protocol 6.1, 1.19, 1.20).
func (s shared) bound(what string, n int) error {
	if s.cfg.MaxPayload != nil && int64(n) > s.cfg.MaxPayload()-AnswerRoom {
		return fmt.Errorf("%s would be %d bytes, more than %w less %d KiB for its answer", what, n, ErrTooLarge, AnswerRoom>>10)
	}
	return nil
}

// encode is b's encoding, bound as a record's: its answers' results join it.
func (s *conts) encode(b *Batch) ([]byte, error) {
	v, err := json.Marshal(b)
	if err == nil {
		err = s.bound("the batch's continuation", len(v))
	}
	return v, err
}

// ErrNotOwner is Park's error when another router holds the continuation
// (docs/protocol.md 6.1): this copy of the batch stops.
var ErrNotOwner = errors.New("parked: not the owner")
