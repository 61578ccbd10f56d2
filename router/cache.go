package router

import (
	"context"
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/rcache"
	"github.com/toolbus/toolbus/registry"
)

// resultCache is the result cache middleware: a call of a tool with
// cache_ttl_ms whose key (definition, input, scope) has a stored result
// within its TTL is answered with it, marked in its metadata
// (docs/protocol.md 3.3), and nothing runs; otherwise the call runs and a
// successful result is stored. A call the quotas already looked up (a
// miss: job.looked) is not looked up again.
type resultCache struct {
	c       resultStore
	lookups *prometheus.CounterVec // by tool and hit or miss
}

// resultStore is what the middleware uses of rcache.Cache.
type resultStore interface {
	Get(ctx context.Context, key string) (bus.Result, bool)
	Put(ctx context.Context, key string, ttl time.Duration, res bus.Result) bool
}

func (rc *resultCache) wrap(next Executor) Executor {
	return ExecFunc(func(ctx context.Context, j *job) bus.Result {
		if !j.runsTool() {
			return next.Exec(ctx, j)
		}
		key := j.cacheKey
		if !j.looked {
			var res bus.Result
			var ok, hit bool
			if key, res, ok, hit = rc.lookup(ctx, j.tool, j.session, j.user, j.call); !ok {
				return next.Exec(ctx, j)
			} else if hit {
				return res
			}
		}
		res := next.Exec(ctx, j)
		rc.c.Put(context.WithoutCancel(ctx), key, time.Duration(j.tool.Def.CacheTTLMS)*time.Millisecond, res)
		return res
	})
}

// lookup looks call (its input validated) of tool t up in the result
// cache, and counts the lookup: ok is false for a call the cache does not
// serve, hit true with the stored result, renamed for this call.
func (rc *resultCache) lookup(ctx context.Context, t *registry.Tool, session string, user json.RawMessage, call bus.Call) (key string, res bus.Result, ok, hit bool) {
	key, ok = rcache.Key(&t.Def, session, userOf(user), call.Input)
	if !ok {
		return "", bus.Result{}, false, false
	}
	if res, hit = rc.c.Get(ctx, key); hit {
		rc.lookups.WithLabelValues(call.Name, "hit").Inc()
		res.ID, res.Name = call.ID, call.Name
		return key, res, true, true
	}
	rc.lookups.WithLabelValues(call.Name, "miss").Inc()
	return key, bus.Result{}, true, false
}
