// Package ledger is the dedupe ledger of toolbus (docs/protocol.md 3.1,
// 5.7, 5.8): each call that is not read-only runs at most once per
// (session, reply id, call id) within the dedupe window, through one P_ledger
// entry per call key whose state machine is
//
//	(none) ──claim──▶ running ──record──▶ done
//	                     │  ▲
//	         abandon     │  └── renew (the lease, every heartbeat)
//	                     ▼
//	                 abandoned ──claim──▶ running
//
// and a running entry whose lease lapsed (its router died) is taken over
// by compare-and-set by exactly one re-send: done with unknown_outcome, a
// run again (a retryable call), or, for a durable call, a wait to its
// deadline and then its timeout.
package ledger

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/store"
)

// Entry is the P_ledger record of one call that is not read-only, or its claim.
type Entry struct {
	State  string `json:"state"` // running, done or abandoned
	Router string `json:"router"`
	Claim  string `json:"claim,omitempty"` // which claim this is: a router's claim is told from a re-sent one's
	// Call and Canon (bus.CallDigests: 1.12's and 1.13's)
	// tell a copy with another call under this key, which gets
	// bus.OtherCallResult (digests.other). Call is absent in entries of 1.11
	// and of Interrupt; 1.13 writes it for routers of 1.12.
	Call     string    `json:"call,omitempty"`
	Canon    string    `json:"canon,omitempty"`
	Deadline time.Time `json:"deadline"`
	// Touched is a running claim's lease, renewed every heartbeat; a
	// re-send that finds it stale knows the router died. Absent in the
	// entries of routers without leases.
	Touched time.Time   `json:"touched,omitzero"`
	Result  *bus.Result `json:"result,omitempty"`
	// ResultRef keeps a result above RefAbove in P_outputs (1.24): its
	// nats-object reference with its digest (5.9); Result is then nil.
	ResultRef string `json:"result_ref,omitempty"`
	// Cancel is the cancel a durable worker's interrupted result names
	// (1.32, protocol 3.5): the router awaiting the result holds the
	// batch's next run until it has handled that cancel (Await).
	Cancel string `json:"cancel,omitempty"`

	rev     uint64    // the revision of this router's claim
	wkey    store.Key // the key with its subject, made once for the claim's writes (claim, record)
	written *value    // this claim's value as written, pooled, until its record is encoded from it (encodeRecord); nil once renewed
}

// entryOf decodes e (with Get's err); false when none or it does not decode.
func entryOf(e jetstream.KeyValueEntry, err error) (le Entry, ok bool) {
	return le, err == nil && e != nil && json.Unmarshal(e.Value(), &le) == nil
}

// recorded reports whether e holds its call's result.
func (e *Entry) recorded() bool {
	return e.State == stateDone && (e.Result != nil || e.ResultRef != "")
}

// storeKey is key as e's writes send it (with its subject when claimed so).
func (e *Entry) storeKey(key string) store.Key {
	if e.wkey.Name == key {
		return e.wkey
	}
	return store.Key{Name: key}
}

const (
	stateRunning = "running"
	stateDone    = "done"
	// stateAbandoned: never ran (answered unavailable); a re-send may claim it.
	stateAbandoned = "abandoned"
	// grace is how long past a running entry's deadline a duplicate waits
	// (a record late through a leader election) before unknown_outcome.
	grace = 30 * time.Second
	// claimBudget bounds the claim's attempts; past it, unavailable (safe to re-send).
	claimBudget = 20 * time.Second
	// recordWait bounds a result's wait for its record before the agent gets it.
	recordWait = 2 * time.Second
)

// Ledger runs each call that is not read-only at most once per (session,
// reply id, call id) within the dedupe window (docs/protocol.md 3.1). A
// result the agent has before its record landed is answered from memory
// here while the write retries; a claim that cannot be made is answered
// unavailable (or store full), never run.
type Ledger struct {
	kv  jetstream.KeyValue
	cfg Config

	pending sync.Map // key → pendingResult: recorded results that have not landed yet
	reuse   bool     // kv keeps nothing of a value once its write returns (a *store.KV): the claim's and record's buffers are reused
	held    claims   // running claims of this router: their leases are renewed
	writes  sync.WaitGroup
	ids     claimIDs
	// stops stops the watches of waits that returned, off the caller's
	// path (deleting a consumer can take 5 s on a cluster).
	stops  store.Stops
	waits  waits          // the waits of duplicates on this router: one per key
	awaits waits          // the Await calls on this router: one watch per key
	loops  sync.WaitGroup // the loops of both
}

// Config configures a Ledger; every zero value has a working default.
type Config struct {
	// Router is the id of the router whose claims these are.
	Router string
	// Logger receives the ledger's logs; nil discards.
	Logger *slog.Logger
	// Hits is called for each call answered from the ledger; nil: not counted.
	Hits func()
	// Lease is how long an unrenewed claim lives; zero means three heartbeats.
	Lease time.Duration
	// Health is noted with each write's outcome; nil: not noted.
	Health *store.Health
	// Landing gives the context of a write that must land (a recorded
	// result, an abandoned claim) and of a watch's stop in the background;
	// nil means landBudget that only Stop waits for.
	Landing func() (context.Context, context.CancelFunc)
	// Outputs stores a result above RefAbove in P_outputs (its inline
	// limit RefAbove), and Stored reads it back (1.24); nil: inline.
	Outputs *offload.Offloader
	Stored  *offload.Store
}

// landBudget bounds a write that must land when Config.Landing is nil.
const landBudget = 2 * time.Minute

// New returns the Ledger of router cfg.Router over kv (P_ledger).
func New(kv jetstream.KeyValue, cfg Config) *Ledger {
	cfg.Lease = cmp.Or(max(cfg.Lease, 0), 3*bus.DefaultHeartbeat)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Hits == nil {
		cfg.Hits = func() {}
	}
	if cfg.Landing == nil {
		cfg.Landing = life.New(life.Config{LandBudget: landBudget}).Landing
	}
	_, reuse := kv.(*store.KV)
	return &Ledger{kv: kv, cfg: cfg, reuse: reuse, held: claims{router: cfg.Router, m: map[string]held{}}, ids: claimIDs{prefix: nuid.Next()},
		stops: store.Stops{Landing: cfg.Landing}}
}

// Health is the store health the ledger notes its writes in (may be nil).
func (l *Ledger) Health() *store.Health { return l.cfg.Health }

// outcome says how a claim went.
type outcome int

const (
	claimed   outcome = iota // this router runs the call
	duplicate                // another run has the call: wait for its record
	failed                   // the ledger could not be written: unavailable
	full                     // the store refused the claim for want of space
	noRoom                   // P_ledger is at its soft bound (store.Bound): the call does not run
)

// claim tries to become the one run of key, for timeout (how long
// duplicates wait) but not past expiry (zero: none); its entry is this
// router's claim, or a duplicate's view of the other claim (with its result
// when recorded).
func (l *Ledger) claim(ctx context.Context, key string, timeout time.Duration, expiry time.Time, d digests) (outcome, Entry) {
	now := time.Now().UTC()
	deadline := now.Add(timeout)
	if !expiry.IsZero() && expiry.Before(deadline) {
		deadline = expiry.UTC()
	}
	me := Entry{State: stateRunning, Router: l.cfg.Router, Call: d.call, Canon: d.canon, Deadline: deadline, Touched: now, Claim: l.ids.next(),
		wkey: store.KeyOf(l.kv, key)}
	val, buf := encodePooled(l, &me)
	// Past P_ledger's soft bound (1.24) only a key claimed before goes on: a re-sent call's.
	room := store.BoundOf(l.kv).Room(ctx, len(val)+len(key))
	// The common case in one round trip: nobody has the key.
	rev, err := uint64(0), error(store.ErrNoRoom)
	if room {
		rev, err = store.CreateWithin(ctx, l.kv, me.wkey, val, 5*time.Second)
	}
	if err == nil {
		l.cfg.Health.Note(nil)
		me.rev, me.written = rev, buf // val, for the record (encodeRecord)
		l.held.hold(key, me)
		return claimed, me
	}
	if room && l.cfg.Health.Note(err) {
		// Out of space: every retry would be refused, and nothing was written.
		l.cfg.Logger.Warn("ledger: ledger claim refused: store full", "key", key, "err", err)
		return full, me
	}
	cctx, cancel := context.WithTimeout(ctx, claimBudget)
	defer cancel()
	var (
		held bool
		seen Entry // the entry another claim holds, as read
	)
	rev, err = store.Update(cctx, l.kv, key, store.Policy{Budget: claimBudget}, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		held, seen = false, Entry{}
		if cur == nil && !room {
			return nil, store.ErrNoRoom
		}
		if cur != nil {
			switch err := json.Unmarshal(cur.Value(), &seen); {
			case err == nil && seen.Claim == me.Claim:
				return nil, store.ErrNoChange // the first create landed; its ack was lost
			case err != nil || seen.State != stateAbandoned:
				held = true
				return nil, store.ErrNoChange
			}
		}
		return val, nil
	})
	switch {
	case errors.Is(err, store.ErrNoRoom):
		return noRoom, me
	case err != nil:
		if ctx.Err() == nil {
			l.cfg.Logger.Warn("ledger: ledger claim failed", "key", key, "err", err)
			l.Abandon(key, me.Claim)
		}
		if l.cfg.Health.Note(err) {
			return full, me
		}
		return failed, me
	case held:
		return duplicate, seen
	}
	me.rev = rev
	l.held.hold(key, me)
	return claimed, me
}

// claimIDs names the claims of this router: its prefix and a sequence.
type claimIDs struct {
	prefix string
	seq    atomic.Uint64
}

func (c *claimIDs) next() string {
	var buf [64]byte // a nuid prefix and a number: one allocation, the string
	return string(strconv.AppendUint(append(append(buf[:0], c.prefix...), '-'), c.seq.Add(1), 10))
}

// claims are this router's running claims, by key, renewed until released.
type claims struct {
	router string // every claim held is this router's
	mu     sync.Mutex
	m      map[string]held
}

// held is a running claim as claims keeps it: by value, at most 128 bytes,
// so the map keeps it in its slot with no allocation of its own.
type held struct {
	claim, call, canon string
	deadline, touched  time.Time
	rev                uint64
}

func (c *claims) entry(h held) Entry {
	return Entry{State: stateRunning, Router: c.router, Claim: h.claim, Call: h.call, Canon: h.canon, Deadline: h.deadline, Touched: h.touched, rev: h.rev}
}

// hold starts renewing this router's running claim of key; release stops.
func (c *claims) hold(key string, claim Entry) {
	c.mu.Lock()
	c.m[key] = held{claim: claim.Claim, call: claim.Call, canon: claim.Canon, deadline: claim.Deadline, touched: claim.Touched, rev: claim.rev}
	c.mu.Unlock()
}

func (c *claims) release(key, claim string) {
	c.mu.Lock()
	if h, ok := c.m[key]; ok && h.claim == claim {
		delete(c.m, key)
	}
	c.mu.Unlock()
}

// current returns claim with its latest revision and lease.
func (c *claims) current(key string, claim Entry) Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.m[key]; ok && h.claim == claim.Claim {
		if h.rev != claim.rev { // renewed since written
			claim.written = nil
		}
		claim.rev, claim.Touched = h.rev, h.touched
	}
	return claim
}

// all returns a copy of every claim held.
func (c *claims) all() map[string]Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := make(map[string]Entry, len(c.m))
	for key, h := range c.m {
		all[key] = c.entry(h)
	}
	return all
}

// renewed notes a renewal of claim at revision rev.
func (c *claims) renewed(key string, claim Entry, rev uint64) {
	c.mu.Lock()
	if h, ok := c.m[key]; ok && h.claim == claim.Claim {
		h.rev, h.touched = rev, claim.Touched
		c.m[key] = h
	}
	c.mu.Unlock()
}

// Renew renews the lease of every running claim this router holds, every
// heartbeat: one compare-and-set per claim, renewParallel at a time so
// thousands fit in a heartbeat. A claim that moved on (another router
// recorded its result, or took it over) is let go.
func (l *Ledger) Renew(ctx context.Context, now time.Time) error {
	var g errgroup.Group
	g.SetLimit(renewParallel)
	for key, c := range l.held.all() {
		g.Go(func() error { return renewOne(ctx, l, key, c, now) })
	}
	return g.Wait()
}

// renewParallel bounds the lease renewals in flight at once.
const renewParallel = 32

// renewOne renews l's claim c of key (Ledger keeps to 15 methods).
func renewOne(ctx context.Context, l *Ledger, key string, c Entry, now time.Time) error {
	for range 2 { // a conflict: read the entry once and try again if it is still ours
		c.Touched = now.UTC()
		val := encode(&c)
		rev, err := l.kv.Update(ctx, key, val, c.rev)
		l.cfg.Health.Note(err)
		if err == nil {
			l.held.renewed(key, c, rev)
			return nil
		}
		if !store.IsConflict(err) {
			return err
		}
		e, err := l.kv.Get(ctx, key)
		if le, ok := entryOf(e, err); !ok || le.Claim != c.Claim || le.State != stateRunning {
			if err == nil || store.IsNotFound(err) {
				l.held.release(key, c.Claim)
			}
			return err
		}
		c.rev = e.Revision()
	}
	return nil
}

// Abandon marks, in the background, a claim whose call did not run as
// abandoned, so a re-send claims it rather than wait in vain.
func (l *Ledger) Abandon(key, claim string) {
	l.writes.Go(func() {
		ctx, cancel := l.cfg.Landing()
		defer cancel()
		_, err := store.Update(ctx, l.kv, key, store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
			le, ok := entryOf(cur, nil)
			if !ok || le.Claim != claim || le.State != stateRunning {
				return nil, store.ErrNoChange // not ours, or never written
			}
			le.State = stateAbandoned
			return encode(&le), nil
		})
		if err != nil {
			l.cfg.Logger.Error("ledger: abandoned ledger claim not released", "key", key, "err", err)
		}
	})
}

// Record stores the result of a claimed call and returns the result the
// agent gets: res, or the one a re-send recorded when it took the claim
// over (this router's lease lapsed), so the call has one answer. It waits
// up to recordWait for the write, so a result is normally recorded before
// anyone hears of it; past that the write goes on in the background, past
// ctx too, while recorded answers key from memory. landed: P_ledger held
// the returned result when Record returned (docs/protocol.md 3.4, 1.15).
func (l *Ledger) Record(ctx context.Context, key string, claim Entry, res bus.Result) (_ bus.Result, landed bool) {
	claim = l.held.current(key, claim)
	defer l.held.release(key, claim.Claim)
	done := claim // a copy: the claim's strings leak to the writes, res stays on the stack
	done.State, done.Result = stateDone, &res
	if done.ResultRef = byRef(ctx, l, key, &res); done.ResultRef != "" {
		done.Result = nil
	}
	val, buf := encodeRecord(l, &done, claim.written)
	store.BoundOf(l.kv).Grew(len(val))
	// The common case in one round trip, bounded by recordWait past ctx:
	// the claim is as this router left it.
	start := time.Now()
	_, err := store.UpdateDetached(ctx, l.kv, claim.storeKey(key), val, claim.rev, recordWait)
	isFull := l.cfg.Health.Note(err)
	if err == nil {
		buf.done(val)
		return res, true
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(recordWait))
	defer cancel()
	if store.IsConflict(err) {
		// A re-send that took over the claim recorded the call's answer.
		e, err := l.kv.Get(ctx, key)
		if le, ok := entryOf(e, err); ok && le.Claim != claim.Claim && le.recorded() {
			l.cfg.Logger.Warn("ledger: a re-send took over this router's ledger claim (its lease lapsed); the call's answer is the re-send's", "key", key, "by", le.Router)
			return resultOf(ctx, l, &le, bus.Call{ID: res.ID, Name: res.Name}), true
		}
	}
	l.pending.Store(key, pendingResult{res: res, call: claim.digests()})
	written, id := make(chan struct{}), claim.Claim
	l.writes.Go(func() {
		defer close(written)
		ctx, cancel := l.cfg.Landing()
		defer cancel()
		_, err := store.Update(ctx, l.kv, key, store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
			if le, ok := entryOf(cur, nil); ok && le.Claim != id {
				return nil, fmt.Errorf("ledger entry %s was claimed again (%s)", key, le.State)
			}
			return val, nil
		})
		l.cfg.Health.Note(err)
		if err != nil {
			l.cfg.Logger.Error("ledger: ledger record failed", "key", key, "err", err)
		}
		l.pending.Delete(key)
	})
	if isFull {
		return res, false // it lands when space comes back; the agent need not wait for that
	}
	select { // the rest of recordWait
	case <-written:
	case <-ctx.Done():
	}
	return res, false
}

// stale reports whether the router of a running entry is gone: no renewal
// for lease by the owner's clock (Touched) or this router's since it saw a
// change (seen); without a lease, past its deadline and grace.
func stale(le Entry, now, seen time.Time, lease time.Duration) bool {
	if now.After(le.Deadline.Add(grace)) {
		return true
	}
	return !le.Touched.IsZero() && (now.Sub(le.Touched) > lease || now.Sub(seen) > lease)
}

// pollEvery is how often a waiting duplicate polls: lease/3, at most 1 s.
func pollEvery(lease time.Duration) time.Duration {
	return min(max(lease/3, 10*time.Millisecond), time.Second)
}

// wait returns the recorded result of key, waiting while another run has
// it and renews its lease. A stale lease (its router died) is taken over by
// one re-send's compare-and-set (takeOver): unknown_outcome, or a run again
// when c.Retry allows (the claim returned is then this router's to run).
// The wait never outlasts c.Expiry. The duplicates of key on this router
// share one wait (shared): one watch, one poll, one takeover at a time.
func (l *Ledger) wait(ctx context.Context, c Call) (bus.Result, *Entry) {
	if res, ok := l.pending.Load(c.Key); ok {
		return recorded(l, c, res.(pendingResult)), nil
	}
	start := time.Now()
	var expired <-chan time.Time
	if !c.Expiry.IsZero() {
		t := time.NewTimer(time.Until(c.Expiry))
		defer t.Stop()
		expired = t.C
	}
	for {
		w := l.waits.join(l, ctx, c, (*shared).loop)
		select {
		case <-ctx.Done():
			l.waits.leave(l, c.Key, w)
			return bus.InterruptedResult(c.Call), nil
		case <-expired:
			l.waits.leave(l, c.Key, w)
			return bus.TimeoutResult(c.Call, max(c.Expiry.Sub(start), 0).Round(time.Millisecond)), nil
		case <-w.done:
		}
		if w.claim == nil {
			l.waits.leave(l, c.Key, w)
			if w.hit {
				l.cfg.Hits()
			}
			return w.res, nil
		}
		// A takeover to run again: one waiter runs it before it leaves.
		took := w.taken.CompareAndSwap(false, true)
		l.waits.leave(l, c.Key, w)
		if took {
			return bus.Result{}, w.claim
		}
		// Another waiter runs it: wait for its record, on a new watch.
	}
}

// waits are this router's waits for keys' records: one each (shared).
type waits struct {
	mu sync.Mutex
	m  map[string]*shared
}

// shared is the one wait of this router for the record of a key; its loop
// (loop, watch) runs while it has waiters and no outcome.
type shared struct {
	ctx     context.Context    // the loop's: the first waiter's values, ended by quit
	quit    context.CancelFunc // called when the last waiter left before the outcome
	call    Call               // the first waiter's
	waiters int                // guarded by waits.mu
	done    chan struct{}      // closed once the outcome below is set
	res     bus.Result         // the outcome, every waiter's
	hit     bool               // res is a recorded result (a hit per waiter)
	claim   *Entry             // a takeover to run the call again: one waiter's (loop's only)
	cancel  string             // the recorded entry's Cancel (watch's only)
	taken   atomic.Bool        // claim was given to a waiter, or abandoned
}

// join returns the live wait of c.Key on this router, joined, or one it
// starts running loop (in l.loops); a wait that ended is no longer listed.
func (ws *waits) join(l *Ledger, ctx context.Context, c Call, loop func(*shared, *Ledger)) *shared {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w := ws.m[c.Key]; w != nil {
		w.waiters++
		return w
	}
	// The loop outlives its first waiter: its own context, ended by the last.
	lctx, quit := context.WithCancel(context.WithoutCancel(ctx))
	w := &shared{ctx: lctx, quit: quit, call: c, waiters: 1, done: make(chan struct{})}
	if ws.m == nil {
		ws.m = map[string]*shared{}
	}
	ws.m[c.Key] = w
	l.loops.Go(func() { loop(w, l) })
	return w
}

// leave takes a waiter off w; the last one ends the loop before the
// outcome, or abandons after it a claim nobody took.
func (ws *waits) leave(l *Ledger, key string, w *shared) {
	ws.mu.Lock()
	w.waiters--
	last := w.waiters == 0
	ended := isClosed(w.done)
	if last && !ended && ws.m[key] == w {
		delete(ws.m, key)
	}
	ws.mu.Unlock()
	switch {
	case !last:
	case !ended:
		w.quit()
	case w.claim != nil:
		w.unclaimed(l, key)
	}
}

// end sets w's outcome, and gives it to the waiters it has.
func (ws *waits) end(l *Ledger, key string, w *shared, res bus.Result, hit bool, claim *Entry) {
	ws.mu.Lock()
	if ws.m[key] == w {
		delete(ws.m, key)
	}
	w.res, w.hit, w.claim = res, hit, claim
	close(w.done)
	none := w.waiters == 0
	ws.mu.Unlock()
	w.quit() // its context's resources: the watch has stopped or is stopping
	if none && claim != nil {
		w.unclaimed(l, key)
	}
}

// unclaimed abandons w's claim when no waiter took it to run.
func (w *shared) unclaimed(l *Ledger, key string) {
	if w.taken.CompareAndSwap(false, true) {
		l.held.release(key, w.claim.Claim)
		l.Abandon(key, w.claim.Claim)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// loop is w's watch, poll and takeover, until an outcome or no waiter.
func (w *shared) loop(l *Ledger) {
	ctx, c := w.ctx, w.call
	key := c.Key
	start := time.Now()
	// The watch lives as long as ctx, the loop's, ended by the last
	// waiter's leaving (nats.go unsubscribes it then).
	watch, err := l.kv.Watch(ctx, key)
	var updates <-chan jetstream.KeyValueEntry
	if err == nil {
		// Not watch.Stop: deleting its consumer can take 5 s on a
		// cluster, and the result is known already (store.Stops).
		defer l.stops.Go(watch)
		updates = watch.Updates()
	}
	poll := time.NewTicker(pollEvery(l.cfg.Lease))
	defer poll.Stop()
	var (
		last   *Entry  // the entry as last read
		seen   = start // when this router last saw it change
		reread = updates == nil
	)
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return // every waiter left
		case now := <-poll.C:
			switch {
			case reread:
			case last == nil: // the watch has not delivered the entry yet
				if now.Sub(start) < l.cfg.Lease {
					continue
				}
			case !stale(*last, now, seen, l.cfg.Lease):
				continue
			}
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			e, err = l.kv.Get(gctx, key)
			cancel()
			switch {
			case store.IsNotFound(err):
				l.waits.end(l, key, w, UnknownOutcome(c.Call), false, nil) // the entry left the dedupe window unrecorded
				return
			case err != nil:
				continue // the waiters' expiry, or the entry's deadline, bounds this
			}
		case u, ok := <-updates:
			if !ok {
				updates, reread = nil, true
				continue
			}
			if u == nil || u.Operation() != jetstream.KeyValuePut {
				continue
			}
			e = u
		}
		le, ok := entryOf(e, nil)
		if !ok {
			l.waits.end(l, key, w, bus.InternalResult(c.Call, fmt.Errorf("ledger entry %s is corrupt", key)), false, nil)
			return
		}
		le.rev = e.Revision()
		now := time.Now()
		if last == nil || le.rev != last.rev {
			seen = now
		}
		last, reread = &le, updates == nil
		switch {
		case le.recorded():
			l.waits.end(l, key, w, resultOf(ctx, l, &le, c.Call), true, nil)
			return
		case le.State == stateAbandoned:
			// The first run never happened; it answered unavailable.
			l.waits.end(l, key, w, Unavailable(c.Call), false, nil)
			return
		case !stale(le, now, seen, l.cfg.Lease):
			continue
		}
		res, claim, ok := l.takeOver(ctx, key, le, c)
		if ok {
			l.waits.end(l, key, w, res, false, claim)
			return
		}
		reread = true // lost the race, or the write failed: read again
	}
}

// takeOver ends a running entry whose router is gone, by compare-and-set
// on the revision read, so exactly one duplicate decides; ok false: the
// entry changed first or could not be written.
func (l *Ledger) takeOver(ctx context.Context, key string, le Entry, c Call) (bus.Result, *Entry, bool) {
	now := time.Now().UTC()
	next := Entry{Router: l.cfg.Router, Claim: l.ids.next(), Call: le.Call, Canon: le.Canon, Deadline: le.Deadline}
	var res bus.Result
	switch {
	case c.Durable && now.Before(le.Deadline.Add(TimeoutGrace)):
		return bus.Result{}, nil, false // its worker may still report: wait for the deadline
	case c.Durable:
		res = bus.TimeoutResult(c.Call, c.Timeout)
	case c.Retry:
		next.State, next.Touched, next.Deadline = stateRunning, now, now.Add(c.Timeout)
	default:
		res = UnknownOutcome(c.Call)
	}
	if next.State == "" {
		next.State, next.Result = stateDone, &res
	}
	val := encode(&next)
	uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	rev, err := l.kv.Update(uctx, key, val, le.rev)
	cancel()
	if l.cfg.Health.Note(err) {
		// The store is full: the dead router's call may have run, and
		// nothing more can be known or recorded now.
		l.cfg.Logger.Warn("ledger: stale ledger claim not taken over: store full", "key", key, "err", err)
		if next.State == stateRunning || c.Durable {
			res = UnknownOutcome(c.Call)
		}
		return res, nil, true
	}
	if err != nil {
		if !store.IsConflict(err) {
			l.cfg.Logger.Warn("ledger: stale ledger claim not taken over", "key", key, "err", err)
		}
		return bus.Result{}, nil, false
	}
	l.cfg.Logger.Warn("ledger: took over a ledger claim whose router stopped renewing its lease", "key", key, "owner", le.Router,
		"touched", le.Touched, "rerun", c.Retry && !c.Durable)
	if next.State == stateRunning {
		next.rev = rev
		l.held.hold(key, next)
		return bus.Result{}, &next, true
	}
	return res, nil, true
}

// Interrupt records res, the interrupted result of call key that a cancel
// ended before it started (docs/protocol.md 3.5), unless the key has an
// entry (a run claimed it first; the cancel reaches that run): a re-sent
// batch gets res and the call never runs. One create; a conflict is no
// error.
func (l *Ledger) Interrupt(ctx context.Context, key string, res bus.Result) error {
	now := time.Now().UTC()
	e := Entry{State: stateDone, Router: l.cfg.Router, Claim: l.ids.next(), Deadline: now, Result: &res}
	_, err := store.Create(ctx, l.kv, key, encode(&e), store.Bounded)
	l.cfg.Health.Note(err)
	if store.IsConflict(err) {
		return nil
	}
	return err
}

// Stop waits until the records in flight have landed and the waits' loops
// and watches have ended, or until ctx ends. A router's drain waits for
// them through Config.Landing instead.
func (l *Ledger) Stop(ctx context.Context) error {
	if !life.WaitFor(ctx, &l.writes) {
		return errors.New("ledger: records still in flight")
	}
	if !life.WaitFor(ctx, &l.loops) {
		return errors.New("ledger: waits still running")
	}
	return l.stops.Wait(ctx)
}

// Call is what the ledger knows of one call.
type Call struct {
	// Key is the call key (session.replyid.callid), as in P_parked.
	Key  string
	Call bus.Call
	// Digest (1.12) and Canon (1.13) of the call as the agent sent it (a
	// confirmed call's parked input, not an edit): Entry.Call and Canon.
	Digest, Canon string
	// Timeout is how long the run may take (a lease-less entry's wait).
	Timeout time.Duration
	// Expiry is the batch's expirytime, ending a duplicate's wait; zero: none.
	Expiry time.Time
	// Retry: the call may run again (idempotent with max_attempts > 1,
	// docs/protocol.md 5.6), so a dead router's claim is taken over to run it.
	Retry bool
	// Durable: any router records its worker's result (5.8), so a dead
	// router's claim is waited for until its deadline, then times out.
	Durable bool
}

// Once runs run at most once per c.Key within the dedupe window and
// records its result (Claimed, then Record). An unavailable result (no
// worker took it) is not recorded but released, so a re-send runs the call
// once a worker can (docs/protocol.md 3.1). landed is Record's; false for
// every other way out.
func (l *Ledger) Once(ctx context.Context, c Call, run func() bus.Result) (_ bus.Result, landed bool) {
	res := l.Claimed(ctx, c, func(claim Entry) bus.Result {
		res := run()
		if res.Error != nil && res.Error.Code == bus.CodeUnavailable {
			l.Release(ctx, c.Key, claim)
			return res
		}
		res, landed = l.Record(ctx, c.Key, claim, res)
		return res
	})
	return res, landed
}

// Release abandons this router's claim of key, whose call did not run: a
// re-send may claim it again, a waiting duplicate gets unavailable. Like
// Record it waits up to recordWait, then goes on in the background (Abandon).
func (l *Ledger) Release(ctx context.Context, key string, claim Entry) {
	claim = l.held.current(key, claim)
	defer l.held.release(key, claim.Claim)
	gone := claim
	gone.State = stateAbandoned
	_, err := store.UpdateDetached(ctx, l.kv, claim.storeKey(key), encode(&gone), claim.rev, recordWait)
	l.cfg.Health.Note(err)
	if err != nil {
		l.Abandon(key, claim.Claim)
	}
}

// Claimed is the one dedupe decision for a call key: the first claim runs
// run (which records the result), a duplicate gets the recorded result
// (wait), a claim not written answers unavailable, or store full.
func (l *Ledger) Claimed(ctx context.Context, c Call, run func(claim Entry) bus.Result) bus.Result {
	key := c.Key
	if res, ok := l.pending.Load(key); ok {
		return recorded(l, c, res.(pendingResult))
	}
	switch how, claim := l.claim(ctx, key, c.Timeout, c.Expiry, digests{c.Digest, c.Canon}); how {
	case claimed:
		defer l.held.release(key, claim.Claim)
		return run(claim)
	case duplicate:
		if claim.digests().other(c) {
			return bus.OtherCallResult(c.Call) // another call under this key: no wait, no result of it
		}
		if claim.recorded() {
			// The entry read holds the result: no watch to wait on.
			l.cfg.Hits()
			return resultOf(ctx, l, &claim, c.Call)
		}
		res, taken := l.wait(ctx, c)
		if taken != nil {
			defer l.held.release(key, taken.Claim)
			return run(*taken)
		}
		return res
	case full:
		return StoreFull(c.Call, l.cfg.Health)
	case noRoom:
		return bus.ErrorResult(c.Call, bus.CodeLimitExceeded, fmt.Sprintf(
			"LimitExceededError: The call of tool '%s' was not run: the ledger of calls %v. Call it again later.", c.Call.Name, store.ErrNoRoom))
	default:
		if ctx.Err() != nil {
			return bus.InterruptedResult(c.Call)
		}
		return Unavailable(c.Call)
	}
}

// pendingResult is a recorded result not landed yet, with its digests.
type pendingResult struct {
	res  bus.Result
	call digests
}

// recorded is what a duplicate c gets from p, a result not landed yet:
// that result, unless p is another call's. (Ledger keeps to 15 methods.)
func recorded(l *Ledger, c Call, p pendingResult) bus.Result {
	if p.call.other(c) {
		return bus.OtherCallResult(c.Call)
	}
	l.cfg.Hits()
	return p.res
}

// digests are a claim's call (1.12) and canon (1.13) digests.
type digests struct{ call, canon string }

func (e *Entry) digests() digests { return digests{e.Call, e.Canon} }

// other reports whether a claim with digests held is another call than c
// (docs/protocol.md 3.1): by 1.13's digests when both have them, else by
// 1.12's (held's may equal either of c's: a canonical input is compact
// too), else not.
func (held digests) other(c Call) bool {
	switch {
	case held.canon != "" && c.Canon != "":
		return held.canon != c.Canon
	case held.call != "" && c.Digest != "":
		return held.call != c.Digest && held.call != c.Canon
	}
	return false
}

// StoreFull is the result of a call that did not run because JetStream
// refused its record for want of space (docs/protocol.md 3.3, `internal`).
func StoreFull(c bus.Call, h *store.Health) bus.Result {
	_, why, _ := h.Full()
	why = cmp.Or(why, "insufficient resources")
	return bus.ErrorResult(c, bus.CodeInternal, fmt.Sprintf(
		"InternalError: %s: JetStream refused to record the call of tool '%s' (%s); it did not run. Call it again once the operator has freed space.", store.FullText, c.Name, why))
}

// Unavailable and UnknownOutcome are bus's results, by the ledger's names.
var (
	Unavailable    = bus.NotRecordedResult
	UnknownOutcome = bus.UnknownOutcomeResult
)

// Await waits until key's entry holds a result, and returns it with the
// cancel the entry names (Entry.Cancel, "": none); false when ctx ends
// first, or the watch cannot start or ends. The Await calls of one key on
// this router share one watch (l.awaits); each answered is a hit.
func (l *Ledger) Await(ctx context.Context, key string) (_ bus.Result, cancel string, ok bool) {
	a := l.awaits.join(l, ctx, Call{Key: key}, (*shared).watch)
	select {
	case <-ctx.Done():
		l.awaits.leave(l, key, a)
		return bus.Result{}, "", false
	case <-a.done:
	}
	l.awaits.leave(l, key, a)
	if a.hit {
		l.cfg.Hits()
	}
	return a.res, a.cancel, a.hit
}

// watch is an Await wait's loop: it follows the key until its entry holds
// a result, the watch ends, or the last waiter leaves.
func (a *shared) watch(l *Ledger) {
	ctx, key := a.ctx, a.call.Key
	w, err := l.kv.Watch(ctx, key)
	if err != nil {
		l.awaits.end(l, key, a, bus.Result{}, false, nil)
		return
	}
	defer l.stops.Go(w) // in the background, as loop's
	for {
		select {
		case <-ctx.Done():
			return // every waiter left
		case u, ok := <-w.Updates():
			if !ok {
				l.awaits.end(l, key, a, bus.Result{}, false, nil)
				return
			}
			if u == nil || u.Operation() != jetstream.KeyValuePut {
				continue
			}
			if le, ok := entryOf(u, nil); ok && le.recorded() {
				res, err := result(ctx, l, &le)
				a.cancel = le.Cancel // before end closes a.done
				l.awaits.end(l, key, a, res, err == nil, nil)
				return
			}
		}
	}
}

// errRecorded stops a compare-and-set whose entry has its result already.
var errRecorded = errors.New("ledger: the call has a result already")

// End records res as the result of the claimed call key, unless a
// worker's result got in first: that one stands and is returned.
func (l *Ledger) End(key string, claim Entry, res bus.Result) bus.Result {
	ctx, cancel := l.cfg.Landing()
	defer cancel()
	var first *bus.Result
	_, err := store.Update(ctx, l.kv, key, store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		if le, ok := entryOf(cur, nil); ok && le.recorded() {
			got := resultOf(ctx, l, &le, bus.Call{ID: res.ID, Name: res.Name})
			first = &got
			return nil, errRecorded
		}
		claim.State, claim.Result = stateDone, &res
		return encode(&claim), nil
	})
	switch {
	case first != nil:
		return *first
	case err != nil:
		l.cfg.Logger.Error("ledger: durable call's end not recorded", "key", key, "err", err)
	}
	return res
}

// RecordResult records a durable call's result from its worker in the
// call's running entry; a failure past the entry's deadline as late. cancel
// is the cancel the worker's interrupted result names ("": none), kept
// with res (Entry.Cancel), not with late.
func (l *Ledger) RecordResult(ctx context.Context, key string, res, late bus.Result, cancel string) (bus.ExecRecorded, error) {
	var why string
	_, err := store.Update(ctx, l.kv, key, store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		var le Entry
		switch {
		case cur == nil:
			why = "no call of this key is running (its ledger entry expired or never was)"
		case json.Unmarshal(cur.Value(), &le) != nil:
			why = "the call's ledger entry is corrupt"
		case le.State == stateDone:
			why = "the call has a result already"
		case le.State == stateAbandoned:
			why = "the call was abandoned"
		default:
			le.State, le.Result, le.Cancel = stateDone, &res, cancel
			if res.State != bus.StateSuccess && !time.Now().Before(le.Deadline) {
				le.Result, le.Cancel = &late, ""
			}
			return encode(&le), nil
		}
		return nil, errRecorded
	})
	if errors.Is(err, errRecorded) {
		return bus.ExecRecorded{Recorded: false, Reason: why}, nil
	}
	if err != nil {
		return bus.ExecRecorded{}, fmt.Errorf("ledger: record %s: %w", key, err)
	}
	return bus.ExecRecorded{Recorded: true}, nil
}

// TimeoutGrace is how long past a deadline the router awaits the worker.
const TimeoutGrace = 50 * time.Millisecond
