// Package parked is the one machine of calls that wait for someone outside
// the bus — a person's confirmation, or an external tool — and of the
// batches they belong to (docs/protocol.md 6, docs/parked.md). Only this
// package writes or decodes its records in P_parked: a call's record (key
// <session>.<replyid>.<callid>) and its batch's continuation (key
// <session>.<replyid>). The router drives it with verbs that return typed
// outcomes; every transition is one compare-and-set, so racing routers
// agree on one winner.
package parked

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Config configures a Store.
type Config struct {
	// TTL is how long a call stays parked before it expires with a timeout
	// result; zero means DefaultTTL.
	TTL time.Duration
	// Owner is the id of the router using the store, written as the owner
	// of the work it leases.
	Owner string
	// Source is the router's CloudEvents source, of the handoff requests.
	Source string
	// Publish publishes the live handoff requests (docs/protocol.md 6.2);
	// nil publishes none.
	Publish func(*nats.Msg) error
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
}

// DefaultTTL is how long a call stays parked when Config.TTL is zero.
const DefaultTTL = 24 * time.Hour

// Store is the parked calls and continuations of one deployment, over
// P_parked. It is safe for concurrent use.
type Store struct {
	calls *calls
	conts *conts
	cfg   Config
	Read  Reads // reads from the watch-fed cache (Parked) or the store
}

// Reads reads a Store's records and continuations; it writes nothing.
type Reads struct {
	calls *calls
	conts *conts
}

// New returns a Store; call Start before use.
func New(st *store.Store, subj bus.Subjects, cfg Config) *Store {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	sh := shared{kv: st.Parked, cfg: cfg}
	s := &Store{cfg: cfg,
		calls: &calls{shared: sh, handoff: handoff{publish: cfg.Publish, subj: subj, source: cfg.Source, log: cfg.Logger},
			callCache: newCallCache(st.Parked, cfg.Logger), leases: newLeaseSet[callKey]()},
		conts: &conts{shared: sh, active: map[string]*Batch{}, leases: newLeaseSet[batchKey]()},
	}
	s.Read = Reads{calls: s.calls, conts: s.conts}
	return s
}

// Start loads the caches of records and continuations and keeps them fed.
func (s *Store) Start(ctx context.Context) error {
	if err := s.calls.start(ctx); err != nil {
		return err
	}
	if err := s.conts.start(ctx); err != nil {
		_ = s.Stop(context.WithoutCancel(ctx))
		return err
	}
	return nil
}

// Stop ends the watches; safe to call twice.
func (s *Store) Stop(ctx context.Context) error {
	return store.StopAll(ctx, s.calls.watch, s.conts.watch)
}

// Renew renews the lease of every continuation and answered call this
// router holds; one taken over or moved on is let go.
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
	// Before: an earlier copy of the batch parked first; nothing was
	// written and Batch is that copy's continuation (nil: unreadable).
	Before bool
	Batch  *Batch
	Parked []*Record
	Failed map[string]error // by call id: the calls that could not park
}

// Park records the run's continuation, then its calls' records, then
// publishes their live handoff requests (docs/protocol.md 6.1, 6.2). A
// batch whose only wait is its last call carries its continuation in that
// call's record: one write. An error means nothing parked.
func (s *Store) Park(ctx context.Context, run Run) (Parking, error) {
	waiting := make([]string, len(run.Calls))
	for i, r := range run.Calls {
		waiting[i] = r.Call.ID
	}
	if carries(run) {
		return s.parkCarried(ctx, run, waiting)
	}
	err := s.conts.parkBatch(ctx, run.Batch, run.Results, waiting, run.Next, run.Alone)
	if errors.Is(err, errParkedBefore) {
		b, _ := s.Read.Batch(ctx, run.Batch.Session, run.Batch.ReplyID)
		return Parking{Before: true, Batch: b}, nil
	}
	if err != nil {
		return Parking{}, err
	}
	out := Parking{Batch: run.Batch}
	for _, r := range run.Calls {
		err := s.calls.create(ctx, r)
		if err != nil && store.IsConflict(err) {
			// A first copy of this batch carried its continuation in this
			// call's record: that copy is the batch, this one's goes.
			if prev := s.Read.carriedBy(ctx, r.Key()); prev != nil && s.conts.remove(ctx, run.Batch) {
				return Parking{Before: true, Batch: prev}, nil
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
	}
	s.calls.announce(run, out.Parked)
	if run.Alone && len(out.Failed) > 0 {
		// A call that did not park is awaited in vain: the run goes back to
		// running, and settles with that call's result as any run does.
		b, err := s.conts.update(ctx, run.Batch.Session, run.Batch.ReplyID, func(b *Batch) error {
			claim(b, s.cfg.Owner, PhaseRunning, "")
			return nil
		})
		if err != nil {
			return out, err
		}
		s.conts.track(b)
		out.Batch = b
	}
	return out, nil
}

// carries reports whether run's batch may live in its one parked call's
// record: a new batch whose last call alone waits.
func carries(run Run) bool {
	return run.Batch.rev == 0 && run.Alone && len(run.Calls) == 1 && run.Next >= len(run.Batch.Data.Calls)
}

// parkCarried parks run's one call with the continuation inside its record:
// one create. A conflict is a first copy of the batch that parked already.
func (s *Store) parkCarried(ctx context.Context, run Run, waiting []string) (Parking, error) {
	b, r := run.Batch, run.Calls[0]
	b.Results, b.Waiting, b.Next = run.Results, waiting, run.Next
	claim(b, "", PhaseParked, "")
	b.gone = true // nothing under the batch's own key: Finish writes nothing
	v, err := json.Marshal(b)
	if err != nil {
		return Parking{}, err
	}
	r.Batch = v
	if err := s.calls.create(ctx, r); err != nil {
		if !store.IsConflict(err) {
			return Parking{}, err
		}
		prev := s.Read.carriedBy(ctx, r.Key())
		if prev == nil {
			prev, _ = s.Read.Batch(ctx, b.Session, b.ReplyID)
		}
		return Parking{Before: true, Batch: prev}, nil
	}
	s.calls.announce(run, []*Record{r})
	return Parking{Batch: b, Parked: []*Record{r}}, nil
}

func (c *calls) announce(run Run, recs []*Record) {
	if run.Announce != nil {
		run.Announce(recs)
	}
	for _, r := range recs {
		c.handoff.live(r)
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
	if b.Results == nil {
		b.Results = map[string]bus.Result{}
	}
	b.gone = true
	return b
}

// carriedBy reads the record key and returns the continuation it carries.
func (s Reads) carriedBy(ctx context.Context, key string) *Batch {
	r, err := s.Get(ctx, key)
	if err != nil {
		return nil
	}
	return carried(r)
}

// Continuation is the continuation of rec's batch: the one rec carries,
// or the one under the batch's key.
func (s Reads) Continuation(ctx context.Context, rec *Record) (*Batch, error) {
	if b := carried(rec); b != nil {
		return b, nil
	}
	return s.Batch(ctx, rec.Session, rec.ReplyID)
}

// Settle ends the run that parked calls: its results join the continuation,
// and the batch waits for its answers, or, when every answer came in during
// the run, this router resumes it (true, the lease held).
func (s *Store) Settle(ctx context.Context, session, replyID string, results map[string]bus.Result) (*Batch, bool, error) {
	b, err := s.conts.update(ctx, session, replyID, func(b *Batch) error {
		for id, res := range results {
			if _, ok := b.Results[id]; !ok {
				b.Results[id] = res
			}
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

// Decide validates an answer against its record, may rewrite either, and
// returns its verdict (and, for Done, the result).
type Decide func(*Record, *bus.Answer) (Verdict, bus.Result, error)

// Answered is what Answer did.
type Answered struct {
	Record  *Record
	Verdict Verdict
	Answer  *bus.Answer // the winning answer, as decide left it
}

// Resume records a call's result in its batch: in the call's record when it
// was answered and ran here (answered → done), then report runs with the
// continuation as read (nil: unreadable), then the result joins the
// continuation. The completion that finds every awaited call done resumes
// the batch (true): with nothing left to run it is the continuation's
// compare-and-set delete, else the result is added under this router's
// lease; a carried batch resumes with no write. report is skipped when
// another router closed the answered call (docs/parked.md).
func (s *Store) Resume(ctx context.Context, rec *Record, res bus.Result, report func(*Batch)) (*Batch, bool, error) {
	if rec.Status == bus.ParkParked { // only the transition that ended the call completes it
		return nil, false, bus.Errorf(bus.CodeNotParked, "call %s is still parked: it has no result to record", rec.Call.ID)
	}
	if rec.Status == bus.ParkAnswered {
		if _, err := s.calls.close(ctx, rec.Key(), res); err != nil {
			if be := (*bus.Error)(nil); errors.As(err, &be) {
				return nil, false, err
			}
			if len(rec.Batch) > 0 {
				// Only the close says this router ended the call: the one
				// that takes the answer over resumes it.
				return nil, false, fmt.Errorf("parked: answered call %s not closed: %w", rec.Key(), err)
			}
			s.cfg.Logger.Warn("parked: answered call not closed", "key", rec.Key(), "err", err)
		}
	}
	if cont := carried(rec); cont != nil { // it waited for this call alone: nothing to write
		report(cont)
		cont.Results[rec.Call.ID] = res
		claim(cont, s.cfg.Owner, PhaseResumed, rec.Call.ID)
		return cont, true, nil
	}
	cont, err := s.Read.Batch(ctx, rec.Session, rec.ReplyID)
	report(cont)
	if err == nil && cont.last(rec.Call.ID) && s.conts.remove(ctx, cont) {
		cont.Results[rec.Call.ID] = res
		claim(cont, s.cfg.Owner, PhaseResumed, rec.Call.ID)
		return cont, true, nil
	}
	return s.conts.complete(ctx, rec.Session, rec.ReplyID, rec.Call.ID, res)
}

// Expire ends the parked calls whose time is up with a timeout result; it
// returns those this router ended.
func (s *Store) Expire(ctx context.Context, now time.Time) []*Record {
	var out []*Record
	for _, r := range s.calls.expired(now) {
		res := bus.ErrorResult(r.Call, bus.CodeTimeout, "Tool execution timeout after "+s.cfg.TTL.String())
		if got, err := s.calls.end(ctx, r.Key(), bus.ParkExpired, res); err == nil {
			out = append(out, got)
		}
	}
	return out
}

// Cancel interrupts the calls of a reply (all when ids is empty): it marks
// the continuation so queued calls never run and ends the parked ones as
// interrupted. It returns the calls this router ended.
func (s *Store) Cancel(ctx context.Context, session, replyID string, ids []string) ([]*Record, error) {
	recs := s.calls.list(session, replyID)
	if len(recs) == 0 {
		return nil, nil
	}
	err := s.conts.cancel(ctx, session, replyID, ids)
	var out []*Record
	for _, r := range recs {
		if len(ids) > 0 && !slices.Contains(ids, r.Call.ID) {
			continue
		}
		res := bus.ErrorResult(r.Call, bus.CodeInterrupted, bus.InterruptedText)
		if got, err := s.calls.end(ctx, r.Key(), bus.ParkCancelled, res); err == nil {
			out = append(out, got)
		}
	}
	return out, err
}

// TakeOver claims the work of routers that stopped renewing their leases
// since cutoff: the continuations they ran (to repair) and the answered
// calls whose confirmed run never reported (to settle again).
func (s *Store) TakeOver(ctx context.Context, cutoff time.Time) ([]*Batch, []*Record) {
	return s.conts.takeOver(ctx, cutoff), s.calls.takeOverAnswers(ctx, cutoff)
}

// Finish removes the continuation of a batch whose batch.done went out.
func (s *Store) Finish(ctx context.Context, b *Batch) error {
	defer s.Release(b)
	if b.gone {
		return nil
	}
	if _, err := store.Delete(ctx, s.conts.kv, b.Key(), store.Bounded); err != nil {
		return fmt.Errorf("parked: delete batch %s: %w", b.Key(), err)
	}
	return nil
}

// Release stops renewing the lease of a batch this router works on, so
// another router takes it over.
func (s *Store) Release(b *Batch) { s.conts.leases.release(batchKey(b.Key())) }

// Parked returns the parked records of a session ("" for all), of one reply
// id when given, oldest first, from the cache.
func (s Reads) Parked(session, replyID string) []*Record { return s.calls.list(session, replyID) }

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
