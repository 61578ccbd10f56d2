package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// ledgerEntry is the P_ledger record of one call that is not read-only.
type ledgerEntry struct {
	State    string      `json:"state"` // running or done
	Router   string      `json:"router"`
	Deadline time.Time   `json:"deadline"`
	Result   *bus.Result `json:"result,omitempty"`
}

const (
	ledgerRunning = "running"
	ledgerDone    = "done"
	// ledgerGrace is how long past a running entry's deadline a duplicate
	// waits before it gives up with unknown_outcome.
	ledgerGrace = 5 * time.Second
)

// runOnce runs c at most once per (session, reply id, call id) within the
// dedupe window: the first router to create the ledger entry runs the call
// and records its result; a re-sent batch gets the recorded result, waiting
// for it while the first run is still going.
func (r *Router) runOnce(ctx context.Context, b *batch, c *callState) bus.Result {
	key := b.session + "." + b.replyID + "." + c.call.ID
	deadline := time.Now().Add(time.Duration(c.target.Tool.Def.TimeoutMS) * time.Millisecond * time.Duration(max(c.target.Tool.Def.MaxAttempts, 1)))
	claim, _ := json.Marshal(ledgerEntry{State: ledgerRunning, Router: r.cfg.ID, Deadline: deadline})
	rev, err := r.store.Ledger.Create(ctx, key, claim)
	switch {
	case err == nil:
		res := b.call(ctx, c)
		done, _ := json.Marshal(ledgerEntry{State: ledgerDone, Router: r.cfg.ID, Deadline: deadline, Result: &res})
		// The record must land even when the call was interrupted.
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := r.store.Ledger.Update(wctx, key, done, rev); err != nil {
			r.log.Error("router: ledger record failed", "key", key, "err", err)
		}
		return res
	case errors.Is(err, jetstream.ErrKeyExists):
		return r.awaitRecorded(ctx, key, c)
	default:
		return internal(c.call, fmt.Errorf("ledger: %w", err))
	}
}

// awaitRecorded returns the recorded result of key, waiting while it runs.
func (r *Router) awaitRecorded(ctx context.Context, key string, c *callState) bus.Result {
	w, err := r.store.Ledger.Watch(ctx, key)
	if err != nil {
		return internal(c.call, fmt.Errorf("ledger watch: %w", err))
	}
	defer func() { _ = w.Stop() }()
	timer := time.NewTimer(time.Duration(c.target.Tool.Def.TimeoutMS)*time.Millisecond + ledgerGrace)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return interrupted(c.call)
		case <-timer.C:
			return unknownOutcome(c.call)
		case e, ok := <-w.Updates():
			if !ok {
				return unknownOutcome(c.call)
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var le ledgerEntry
			if json.Unmarshal(e.Value(), &le) != nil {
				return internal(c.call, fmt.Errorf("ledger entry %s is corrupt", key))
			}
			if le.State == ledgerDone && le.Result != nil {
				r.m.DedupeHits.Inc()
				return *le.Result
			}
			if d := time.Until(le.Deadline.Add(ledgerGrace)); d > 0 {
				timer.Reset(d)
			} else {
				return unknownOutcome(c.call)
			}
		}
	}
}

func unknownOutcome(c bus.Call) bus.Result {
	return bus.ErrorResult(c, bus.CodeUnknownOutcome, fmt.Sprintf(
		"UnknownOutcomeError: The earlier run of tool '%s' for this call did not report back; it may or may not have taken effect.", c.Name))
}
