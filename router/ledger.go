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

// once runs j through next at most once per call key within the dedupe
// window, recording its result.
func (l dedupe) once(ctx context.Context, j *job, next executor) bus.Result {
	def := &j.tool.Def
	timeout := time.Duration(def.TimeoutMS) * time.Millisecond * time.Duration(max(def.MaxAttempts, 1))
	return l.Once(ctx, ledgerCall(j, timeout), func() bus.Result { return next.exec(ctx, j) })
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

// unknownOutcome is the result of a call whose run did not report back.
var unknownOutcome = bus.UnknownOutcomeResult
