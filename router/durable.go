package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

// workQueue is the executor of durable tools (docs/protocol.md 5.8): the call
// is claimed in the ledger, published to the tool's work queue (P_WORK)
// and taken by one of its workers; the worker sends the result to the
// routers, one of which records it in the ledger entry, and the router
// that published the call reads it there. A worker that dies mid-call
// stops reporting progress and JetStream delivers the call to another
// worker; the ledger entry takes one result, so the agent never sees two.
type workQueue struct {
	log       *slog.Logger
	subj      bus.Subjects
	js        jetstream.JetStream
	led       *ledger
	execEvent func(ctx context.Context, j *job, req bus.ExecRequest, deadline time.Time) (*bus.Event, error)
}

func (x workQueue) exec(ctx context.Context, j *job) bus.Result {
	l := x.led
	deadline, timeout := callDeadline(time.Now(), j.tool.Def.TimeoutMS, j.deadline)
	if timeout <= 0 {
		return timeoutResult(j.call, 0)
	}
	return l.claimed(ctx, j, timeout, func(claim ledgerEntry) bus.Result {
		key := j.key()
		if err := x.publish(ctx, j, deadline); err != nil {
			x.log.Warn("router: durable call not queued", "key", key, "err", err)
			l.abandon(key, claim.Claim)
			if l.health.Note(err) {
				return storeFull(j.call, l.health)
			}
			return unavailableLedger(j.call)
		}
		wctx, cancel := context.WithDeadline(ctx, deadline.Add(timeoutGrace))
		defer cancel()
		if res, ok := l.await(wctx, key); ok {
			return res
		}
		// No result by the deadline, or the call was cancelled or cut off:
		// the call ends so in the ledger, unless a result got in first; a
		// later result is refused, and a delivery past the deadline never
		// runs.
		end := timeoutResult(j.call, timeout)
		switch {
		case context.Cause(ctx) == errDrainDeadline:
			return unknownOutcome(j.call) // the queue still holds it: another router records its result
		case ctx.Err() != nil:
			end = interrupted(j.call)
		}
		return l.end(key, claim, end)
	})
}

// publish puts the call in the tool's work queue, its exec event as for a
// core request. The message id is the call key: a publish retried, or a
// claim taken again after it was abandoned, is one message.
func (x workQueue) publish(ctx context.Context, j *job, deadline time.Time) error {
	e, err := x.execEvent(ctx, j, bus.ExecRequest{Call: j.call, User: j.user, Context: j.context, Attempt: 1}, deadline)
	if err != nil {
		return err
	}
	m, err := e.Msg(x.subj.Work(j.call.Name))
	if err != nil {
		return err
	}
	return store.Retry(ctx, store.Bounded, func(ctx context.Context) error {
		_, err := x.js.PublishMsg(ctx, m, jetstream.WithMsgID(j.key()))
		return err
	})
}

// onResult takes a durable call's result from its worker and records it in
// the call's ledger entry; the reply tells the worker it may acknowledge
// the call's message. A result for a call that already has one (an
// earlier delivery's, a timeout, a cancel) is dropped, and says so.
// durableResults takes durable calls' results on P.result.<tool>
// (docs/protocol.md 5.8).
type durableResults struct {
	*wire
	reg     *registry.Registry
	led     *ledger
	landing func() (context.Context, context.CancelFunc)
	seal    func(session, key string, res bus.Result, patch json.RawMessage) (bus.Result, json.RawMessage)
}

func (r *durableResults) onResult(m *nats.Msg) {
	tool, ok := r.subj.Token(m.Subject, "result")
	if !ok || !bus.ValidName(tool) {
		r.reject(m, bus.Errorf(bus.CodeBadEvent, "subject %q does not name a tool", m.Subject))
		return
	}
	e, err := r.decode(m, "", bus.TypeExecResult)
	if err != nil {
		r.reject(m, err)
		return
	}
	if !bus.ValidID(e.SessionID) || !bus.ValidID(e.ReplyID) || !bus.ValidID(e.ToolCallID) {
		r.reject(m, bus.Errorf(bus.CodeBadEvent, "a durable result needs valid sessionid, replyid and toolcallid attributes"))
		return
	}
	call := bus.Call{ID: e.ToolCallID, Name: tool}
	res, _ := execReply(call, m)
	res, _ = r.seal(e.SessionID, bus.CallKey(e.SessionID, e.ReplyID, e.ToolCallID), res, nil)
	var timeout time.Duration
	if t, ok := r.reg.Lookup(tool); ok {
		timeout = time.Duration(t.Def.TimeoutMS) * time.Millisecond
	}
	ctx, cancel := r.landing()
	defer cancel()
	// As for a core request: a failure that comes at or past the call's
	// deadline is its timeout.
	ack, err := r.led.recordResult(ctx, bus.CallKey(e.SessionID, e.ReplyID, e.ToolCallID), res, timeoutResult(call, timeout))
	if err != nil {
		r.reject(m, err)
		return
	}
	r.respond(m, bus.TypeExecRecorded, ack, "durable result ack")
}

// await waits until key's entry holds a result, and returns it; false when
// ctx ends first.
func (l *ledger) await(ctx context.Context, key string) (bus.Result, bool) {
	w, err := l.kv.Watch(ctx, key)
	if err != nil {
		return bus.Result{}, false
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return bus.Result{}, false
		case u, ok := <-w.Updates():
			if !ok {
				return bus.Result{}, false
			}
			if u == nil || u.Operation() != jetstream.KeyValuePut {
				continue
			}
			var le ledgerEntry
			if json.Unmarshal(u.Value(), &le) == nil && le.State == ledgerDone && le.Result != nil {
				l.hits()
				return *le.Result, true
			}
		}
	}
}

// errRecorded stops a compare-and-set whose entry has its result already.
var errRecorded = errors.New("ledger: the call has a result already")

// end records res as the result of the claimed call key, unless the entry
// has one already (a worker's result got in first): then that one stands
// and is returned.
func (l *ledger) end(key string, claim ledgerEntry, res bus.Result) bus.Result {
	ctx, cancel := l.landing()
	defer cancel()
	var first *bus.Result
	_, err := store.Update(ctx, l.kv, key, store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		var le ledgerEntry
		if cur != nil && json.Unmarshal(cur.Value(), &le) == nil && le.State == ledgerDone && le.Result != nil {
			first = le.Result
			return nil, errRecorded
		}
		claim.State, claim.Result = ledgerDone, &res
		return json.Marshal(claim)
	})
	switch {
	case first != nil:
		return *first
	case err != nil:
		l.log.Error("router: durable call's end not recorded", "key", key, "err", err)
	}
	return res
}

// recordResult records a durable call's result from its worker in the
// call's running entry.
// A failed result that comes past the entry's deadline is recorded as
// late, the call's timeout.
func (l *ledger) recordResult(ctx context.Context, key string, res, late bus.Result) (bus.ExecRecorded, error) {
	var why string
	_, err := store.Update(ctx, l.kv, key, store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		var le ledgerEntry
		switch {
		case cur == nil:
			why = "no call of this key is running (its ledger entry expired or never was)"
		case json.Unmarshal(cur.Value(), &le) != nil:
			why = "the call's ledger entry is corrupt"
		case le.State == ledgerDone:
			why = "the call has a result already"
		case le.State == ledgerAbandoned:
			why = "the call was abandoned"
		default:
			le.State, le.Result = ledgerDone, &res
			if res.State != bus.StateSuccess && !time.Now().Before(le.Deadline) {
				le.Result = &late
			}
			return json.Marshal(le)
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
