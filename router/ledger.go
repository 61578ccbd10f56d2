package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// ledgerEntry is the P_ledger record of one call that is not read-only.
type ledgerEntry struct {
	State    string      `json:"state"` // running, done or abandoned
	Router   string      `json:"router"`
	Claim    string      `json:"claim,omitempty"` // which claim this is: a router's claim is told from a re-sent one's
	Deadline time.Time   `json:"deadline"`
	Result   *bus.Result `json:"result,omitempty"`

	rev uint64 // the revision of this router's claim
}

const (
	ledgerRunning = "running"
	ledgerDone    = "done"
	// ledgerAbandoned is a claim whose call never ran: the claim could not
	// be confirmed, so the call was answered unavailable. A re-send may
	// claim it again.
	ledgerAbandoned = "abandoned"
	// ledgerGrace is how long past a running entry's deadline a duplicate
	// waits before it gives up with unknown_outcome. It covers a record
	// that is late because the bucket was electing a leader.
	ledgerGrace = 30 * time.Second
	// claimBudget bounds the attempts to claim a call; past it the call is
	// unavailable, which is safe to re-send.
	claimBudget = 20 * time.Second
	// recordWait is how long a call's result waits for its record before
	// it is given to the agent anyway.
	recordWait = 2 * time.Second
)

// ledger runs each call that is not read-only at most once per (session,
// reply id, call id) within the dedupe window (PROTOCOL.md 3.1).
//
// The first router to claim the key runs the call and records its result;
// a re-sent batch gets the recorded result, waiting for it while the first
// run is still going. A result is given to the agent as soon as the worker
// answers: its record is written in the background and retried until it
// lands, and meanwhile a re-send that reaches this router gets it from
// memory. A claim that cannot be made is answered unavailable, never run.
type ledger struct {
	kv     jetstream.KeyValue
	router string
	log    *slog.Logger
	hits   func()

	mu      sync.Mutex
	pending map[string]bus.Result // recorded results that have not landed yet
	writes  sync.WaitGroup
	seq     atomic.Uint64
	prefix  string
}

func newLedger(kv jetstream.KeyValue, router string, log *slog.Logger, hits func()) *ledger {
	return &ledger{kv: kv, router: router, log: log, hits: hits, pending: map[string]bus.Result{}, prefix: nuid.Next()}
}

// outcome says how a claim went.
type outcome int

const (
	claimed   outcome = iota // this router runs the call
	duplicate                // another run has the call: wait for its record
	failed                   // the ledger could not be written: unavailable
)

// claim tries to become the one run of key. timeout is how long the call
// may take; the claim tells duplicates how long to wait.
func (l *ledger) claim(ctx context.Context, key string, timeout time.Duration) (outcome, ledgerEntry) {
	me := ledgerEntry{State: ledgerRunning, Router: l.router, Deadline: time.Now().Add(timeout).UTC(),
		Claim: fmt.Sprintf("%s-%d", l.prefix, l.seq.Add(1))}
	val, _ := json.Marshal(me)
	// The common case in one round trip: nobody has the key.
	actx, acancel := context.WithTimeout(ctx, 5*time.Second)
	rev, err := l.kv.Create(actx, key, val)
	acancel()
	if err == nil {
		me.rev = rev
		return claimed, me
	}
	cctx, cancel := context.WithTimeout(ctx, claimBudget)
	defer cancel()
	var held bool
	rev, err = store.Update(cctx, l.kv, key, store.Policy{Budget: claimBudget}, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		held = false
		if cur != nil {
			var le ledgerEntry
			switch err := json.Unmarshal(cur.Value(), &le); {
			case err == nil && le.Claim == me.Claim:
				return nil, store.ErrNoChange // the first create landed; its ack was lost
			case err != nil || le.State != ledgerAbandoned:
				held = true
				return nil, store.ErrNoChange
			}
		}
		return val, nil
	})
	switch {
	case err != nil:
		if ctx.Err() == nil {
			l.log.Warn("router: ledger claim failed", "key", key, "err", err)
			l.abandon(key, me.Claim)
		}
		return failed, me
	case held:
		return duplicate, me
	}
	me.rev = rev
	return claimed, me
}

// abandon marks a claim whose outcome is unknown as abandoned, in the
// background: the call did not run, and a re-send must be able to claim it
// rather than wait for a result that will never come.
func (l *ledger) abandon(key, claim string) {
	l.writes.Add(1)
	go func() {
		defer l.writes.Done()
		ctx, cancel := landing()
		defer cancel()
		_, err := store.Update(ctx, l.kv, key, store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
			var le ledgerEntry
			if cur == nil || json.Unmarshal(cur.Value(), &le) != nil || le.Claim != claim || le.State != ledgerRunning {
				return nil, store.ErrNoChange // not ours, or never written
			}
			le.State = ledgerAbandoned
			return json.Marshal(le)
		})
		if err != nil {
			l.log.Error("router: abandoned ledger claim not released", "key", key, "err", err)
		}
	}()
}

// record stores the result of a claimed call. It waits up to recordWait
// for the write to land, so that a result is normally recorded before
// anyone hears of it (a router that dies after telling the agent would
// otherwise leave a re-send nothing but unknown_outcome); past that (the
// bucket is electing a leader) it returns and the write goes on, retried
// until it lands, while recorded answers for key from memory.
func (l *ledger) record(key string, claim ledgerEntry, res bus.Result) {
	claim.State, claim.Result = ledgerDone, &res
	val, _ := json.Marshal(claim)
	// The common case in one round trip: the claim is as this router left it.
	ctx, cancel := context.WithTimeout(context.Background(), recordWait)
	defer cancel()
	_, err := l.kv.Update(ctx, key, val, claim.rev)
	if err == nil {
		return
	}
	l.mu.Lock()
	l.pending[key] = res
	l.mu.Unlock()
	landed := make(chan struct{})
	l.writes.Add(1)
	go func() {
		defer l.writes.Done()
		defer close(landed)
		ctx, cancel := landing()
		defer cancel()
		_, err := store.Update(ctx, l.kv, key, store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
			var le ledgerEntry
			if cur != nil && json.Unmarshal(cur.Value(), &le) == nil && le.Claim != claim.Claim {
				return nil, fmt.Errorf("ledger entry %s was claimed again (%s)", key, le.State)
			}
			return val, nil
		})
		if err != nil {
			l.log.Error("router: ledger record failed", "key", key, "err", err)
		}
		l.mu.Lock()
		delete(l.pending, key)
		l.mu.Unlock()
	}()
	select { // the rest of recordWait
	case <-landed:
	case <-ctx.Done():
	}
}

// recorded returns a result of key that this router holds in memory while
// its record is landing.
func (l *ledger) recorded(key string) (bus.Result, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	res, ok := l.pending[key]
	return res, ok
}

// wait returns the recorded result of key, waiting while another run has
// it. It gives up with unknown_outcome once that run is past its deadline
// and the grace, and reads the entry from the bucket's leader before it
// does, so a watch that missed the record cannot turn a result into an
// unknown outcome.
func (l *ledger) wait(ctx context.Context, key string, c bus.Call, timeout time.Duration) bus.Result {
	if res, ok := l.recorded(key); ok {
		l.hits()
		return res
	}
	w, err := l.kv.Watch(ctx, key)
	var updates <-chan jetstream.KeyValueEntry
	if err == nil {
		defer func() { _ = w.Stop() }()
		updates = w.Updates()
	}
	until := time.Now().Add(timeout + ledgerGrace)
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return interrupted(c)
		case <-poll.C:
			if time.Now().Before(until) && updates != nil {
				continue
			}
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			e, err = l.kv.Get(gctx, key)
			cancel()
			if err != nil && !store.IsNotFound(err) && time.Now().Before(until) {
				continue
			}
			if err != nil {
				return unknownOutcome(c)
			}
		case u, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			if u == nil || u.Operation() != jetstream.KeyValuePut {
				continue
			}
			e = u
		}
		var le ledgerEntry
		if json.Unmarshal(e.Value(), &le) != nil {
			return internal(c, fmt.Errorf("ledger entry %s is corrupt", key))
		}
		switch {
		case le.State == ledgerDone && le.Result != nil:
			l.hits()
			return *le.Result
		case le.State == ledgerAbandoned:
			// The first run never happened; it answered unavailable.
			return unavailableLedger(c)
		}
		until = le.Deadline.Add(ledgerGrace)
		if time.Now().After(until) {
			return unknownOutcome(c)
		}
	}
}

// stop waits until the records in flight have landed or ctx ends.
func (l *ledger) stop(ctx context.Context) error {
	done := make(chan struct{})
	go func() { l.writes.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("ledger: records still in flight")
	}
}

// once runs j through next at most once per call key within the dedupe
// window, recording its result.
func (l *ledger) once(ctx context.Context, j *job, next executor) bus.Result {
	def := &j.tool.Def
	timeout := time.Duration(def.TimeoutMS) * time.Millisecond * time.Duration(max(def.MaxAttempts, 1))
	return l.claimed(ctx, j, timeout, func(claim ledgerEntry) bus.Result {
		res := next.exec(ctx, j)
		l.record(j.key(), claim, res)
		return res
	})
}

// claimed is the one dedupe decision for a call key: the first claim runs
// run (which records the result in the entry), a duplicate (a re-sent
// batch, on any router) gets the recorded result, waiting for it while the
// first run is still going, and a claim that cannot be written answers
// unavailable. timeout is how long the run may take.
func (l *ledger) claimed(ctx context.Context, j *job, timeout time.Duration, run func(claim ledgerEntry) bus.Result) bus.Result {
	key := j.key() // the same key as in P_parked
	if res, ok := l.recorded(key); ok {
		l.hits()
		return res
	}
	switch how, claim := l.claim(ctx, key, timeout); how {
	case claimed:
		return run(claim)
	case duplicate:
		return l.wait(ctx, key, j.call, timeout)
	default:
		if ctx.Err() != nil {
			return interrupted(j.call)
		}
		return unavailableLedger(j.call)
	}
}

func unavailableLedger(c bus.Call) bus.Result {
	return bus.ErrorResult(c, bus.CodeUnavailable, fmt.Sprintf(
		"UnavailableError: The tool '%s' did not run: its run could not be recorded, so it is safe to call again.", c.Name))
}

func unknownOutcome(c bus.Call) bus.Result {
	return bus.ErrorResult(c, bus.CodeUnknownOutcome, fmt.Sprintf(
		"UnknownOutcomeError: The earlier run of tool '%s' for this call did not report back; it may or may not have taken effect.", c.Name))
}
