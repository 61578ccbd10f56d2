package router

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/ledger"
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
	log    *slog.Logger
	subj   bus.Subjects
	js     jetstream.JetStream
	led    *ledger.Ledger
	source string // the router's, of the work messages
}

// Exec claims j in the ledger and queues it.
func (x workQueue) Exec(ctx context.Context, j *job) bus.Result {
	l := x.led
	deadline, timeout := callDeadline(time.Now(), j.tool.Def.TimeoutMS, j.deadline)
	if timeout <= 0 {
		return timeoutResult(j.call, 0)
	}
	return l.Claimed(ctx, ledgerCall(j, timeout), func(claim ledger.Entry) bus.Result {
		key := j.key()
		if err := x.publish(ctx, j, deadline); err != nil {
			x.log.Warn("router: durable call not queued", "key", key, "err", err)
			l.Abandon(key, claim.Claim)
			if l.Health().Note(err) {
				return ledger.StoreFull(j.call, l.Health())
			}
			return ledger.Unavailable(j.call)
		}
		wctx, cancel := context.WithDeadline(ctx, deadline.Add(ledger.TimeoutGrace))
		defer cancel()
		if res, ok := l.Await(wctx, key); ok {
			return res
		}
		// No result by the deadline, or the call was cancelled or cut off:
		// the call ends so in the ledger, unless a result got in first; a
		// later result is refused, and a delivery past the deadline never
		// runs.
		end := timeoutResult(j.call, timeout)
		switch {
		case context.Cause(ctx) == errDrainDeadline:
			return ledger.UnknownOutcome(j.call) // the queue still holds it: another router records its result
		case ctx.Err() != nil:
			end = interrupted(j.call)
		}
		return l.End(key, claim, end)
	})
}

// publish puts the call in the tool's work queue, its exec event as for a
// core request. The message id is the call key: a publish retried, or a
// claim taken again after it was abandoned, is one message.
func (x workQueue) publish(ctx context.Context, j *job, deadline time.Time) error {
	var e bus.Event
	execEventTo(&e, ctx, x.source, j, bus.ExecRequest{Call: j.call, User: j.user, Context: j.context, Attempt: 1}, deadline)
	m, err := e.Msg(x.subj.Workers.Work(j.call.Name))
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
	reg  *registry.Registry
	led  *ledger.Ledger
	seal func(session, key string, res bus.Result, patch json.RawMessage) (bus.Result, json.RawMessage)
}

func (r *durableResults) onResult(m *nats.Msg) {
	tool, e, err := r.decodeCall(m, "result", bus.TypeExecResult, "a durable result")
	if err != nil {
		r.reject(m, err)
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
	ack, err := r.led.RecordResult(ctx, bus.CallKey(e.SessionID, e.ReplyID, e.ToolCallID), res, timeoutResult(call, timeout))
	r.answer(m, bus.TypeExecRecorded, ack, err)
}
