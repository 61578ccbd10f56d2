package router

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/limits"
)

// quotas is the quota middleware (docs/guardrails.md "When a call
// counts"): a registry tool's call over one of its limits ends
// limit_exceeded with retry_after_ms (docs/protocol.md 3.3), and nothing
// runs. reset_tools, search_tools, the skill loader and request-scoped
// tools are not counted, nor is a call of a re-sent batch that the
// ledger or a parked record will answer (the first copy was counted;
// read-only calls run again, and count again), nor a call the result
// cache answers (only rules with cache_hits count it; the hit is the
// call's result). When the counts cannot be reached the call does not run
// either (fail closed): it ends unavailable.
//
// Calls are counted in call order: the calls of a parallel run pass this
// middleware one after another (job.admit), and a call that parks is
// counted by admitPark when it parks, before the run's other calls start.
type quotas struct {
	lim     limiter
	cache   *resultCache // nil when off: then nothing is looked up here
	counted countedPort
	log     *slog.Logger
}

// limiter is what the quotas use of limits.Limiter.
type limiter interface {
	Check(ctx context.Context, c limits.Call) (*limits.Refusal, error)
}

// countedPort tells whether an earlier copy of a batch recorded a call:
// its parked record (a call that parks) or its ledger entry.
type countedPort interface {
	counted(ctx context.Context, key string, parks bool) bool
}

func (q *quotas) wrap(next Executor) Executor {
	return ExecFunc(func(ctx context.Context, j *job) bus.Result {
		res := q.admit(j)
		j.admit()
		if res != nil {
			return *res
		}
		return next.Exec(ctx, j)
	})
}

// admit counts a call that runs now; a result when it does not run. A
// miss in the result cache is kept on the job, so that the cache stores
// the call's result without looking it up again.
func (q *quotas) admit(j *job) *bus.Result {
	c := j.c
	if c == nil || !counts(c) {
		return nil
	}
	t := c.target.Tool
	ctx, cancel := context.WithTimeout(j.b.ctx, 10*time.Second)
	defer cancel()
	call := limits.Call{Tool: t.Def.Name, ReadOnly: t.Def.ReadOnly, User: userOf(j.user), Session: j.session}
	if q.cache != nil && t.Def.CacheTTLMS > 0 {
		key, res, ok, hit := q.cache.lookup(ctx, t, j.session, j.user, j.call)
		if hit {
			call.CacheHit = true
			if refused := q.check(ctx, c, call); refused != nil {
				return refused
			}
			return &res
		}
		j.cacheKey, j.looked = key, ok
	}
	if !t.Def.ReadOnly && q.counted.counted(ctx, j.key(), false) {
		return nil
	}
	return q.check(ctx, c, call)
}

// admitPark counts call c of batch b, which parks; a result when it does
// not park.
func (q *quotas) admitPark(b *batch, c *callState) *bus.Result {
	if !counts(c) {
		return nil
	}
	t := c.target.Tool
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if q.counted.counted(ctx, bus.CallKey(b.session, b.replyID, c.call.ID), true) {
		return nil
	}
	return q.check(ctx, c, limits.Call{Tool: t.Def.Name, ReadOnly: t.Def.ReadOnly, User: userOf(b.data.User), Session: b.session})
}

// counts reports whether c's target is a registry tool the quotas count.
func counts(c *callState) bool {
	t := c.target
	return t.Tool != nil && !t.Skill && !t.Read
}

// check counts call (c's) against the limits: the result of a call they
// refuse, or that could not be checked; nil when it may go on. The
// refusing rule travels with the call, for its audit record.
func (q *quotas) check(ctx context.Context, c *callState, call limits.Call) *bus.Result {
	t := c.target.Tool
	ref, err := q.lim.Check(ctx, call)
	if err != nil {
		q.log.Warn("router: limits not reachable", "tool", t.Def.Name, "err", err)
		return ptr(bus.ErrorResult(c.call, bus.CodeUnavailable, fmt.Sprintf(
			"ToolUnavailableError: The limits of the tool '%s' cannot be checked right now, so it did not run. Try again shortly.", t.Def.Name)))
	}
	if ref == nil {
		return nil
	}
	res := bus.ErrorResult(c.call, bus.CodeLimitExceeded, ref.Message(t.Def.Name))
	res.Error.RetryAfterMS = ref.RetryAfterMS()
	c.limitRule = ref.Rule
	return &res
}
