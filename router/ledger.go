package router

import (
	"context"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/store"
)

// dedupe is the router's side of the dedupe ledger (package ledger,
// docs/protocol.md 3.1): a call that is not read-only runs through it at
// most once per call key.
type dedupe struct{ *ledger.Ledger }

// once is the ledger middleware over l: a call that is not read-only
// runs through next at most once per call key within the dedupe window,
// and its result is recorded; a read-only call runs through next.
func once(l onceRunner) Middleware {
	return func(next Executor) Executor { return onceExec{l, next} }
}

// onceRunner is what the middleware uses of ledger.Ledger.
type onceRunner interface {
	Once(ctx context.Context, c ledger.Call, run func() bus.Result) bus.Result
}

type onceExec struct {
	l    onceRunner
	next Executor
}

func (x onceExec) Exec(ctx context.Context, j *job) bus.Result {
	def := &j.tool.Def
	if def.ReadOnly {
		return x.next.Exec(ctx, j)
	}
	timeout := time.Duration(def.TimeoutMS) * time.Millisecond * time.Duration(max(def.MaxAttempts, 1))
	return x.l.Once(ctx, ledgerCall(j, timeout), func() bus.Result { return x.next.Exec(ctx, j) })
}

// ledgerCall is what the ledger knows of j, whose run may take timeout.
func ledgerCall(j *job, timeout time.Duration) ledger.Call {
	def := &j.tool.Def
	return ledger.Call{Key: j.key(), Call: j.call, Timeout: timeout, Expiry: j.deadline,
		Retry: def.Idempotent && def.MaxAttempts > 1, Durable: def.Durable}
}

// storeFullOr is res, a call's "No live worker" result, unless the store
// is full: then the workers' heartbeats are refused too, and the honest
// answer is that the store is full (docs/protocol.md 3.3, `internal`).
func storeFullOr(c bus.Call, h *store.Health, res *bus.Result) *bus.Result {
	full, why, _ := h.Full()
	if !full {
		return res
	}
	r := bus.ErrorResult(c, bus.CodeInternal, fmt.Sprintf(
		"InternalError: %s: no live worker of tool '%s' can be seen while JetStream refuses the workers' heartbeats (%s); it did not run. Call it again once the operator has freed space.", store.FullText, c.Name, why))
	return &r
}
