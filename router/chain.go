package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/rcache"
	"github.com/toolbus/toolbus/store"
)

// Guard configures the guardrails of docs/guardrails.md: tool search,
// quotas and rate limits. The zero value turns every one off, and the
// router then behaves exactly as without them.
type Guard struct {
	// Search offers search_tools beside reset_tools (docs/protocol.md 4.2).
	Search bool
	// ReadOutput offers read_output, which reads a part of one of the
	// session's stored outputs (docs/protocol.md 11).
	ReadOutput bool
	// Pinned tools and groups are visible to every session.
	Pinned groups.Pins
	// Limits are the quotas and rate limits shared by every router.
	Limits limits.Policy
	// Audit, when set, writes one audit record per call to P_AUDIT
	// (docs/guardrails.md); nil writes none.
	Audit *audit.Config
	// Cache turns on the result cache of tools whose definition has
	// cache_ttl_ms; off, such tools run every time.
	Cache bool
	// Now is the limits' and the cache's clock; nil means time.Now (tests
	// pass a fake one).
	Now func() time.Time
}

// The executor chain (docs/router.md "Executor chain"). Every call of a
// batch that does not park ends through one Executor, built once from the
// config: the audit trail, the quotas and the result cache are
// middlewares around the step that runs the call (execStep), and a
// guardrail that is off is not in the chain at all. The tool runner
// below it is a chain too: the dedupe ledger around the core executor
// (exec.go, ledger.go).

// Executor runs one call and returns its result.
type Executor interface {
	Exec(ctx context.Context, j *job) bus.Result
}

// ExecFunc is an Executor of a function.
type ExecFunc func(ctx context.Context, j *job) bus.Result

// Exec calls f.
func (f ExecFunc) Exec(ctx context.Context, j *job) bus.Result { return f(ctx, j) }

// Middleware wraps an Executor.
type Middleware func(Executor) Executor

// chain wraps last in mws, the first outermost; a nil middleware (a
// guardrail that is off) is left out.
func chain(last Executor, mws ...Middleware) Executor {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			last = mws[i](last)
		}
	}
	return last
}

// guardrails are the middlewares the config turns on; each field is nil
// when its guardrail is off.
type guardrails struct {
	audit *auditTrail
	quota *quotas
	cache *resultCache
	// limits serves the limits admin verbs; nil without rules.
	limits *limits.Limiter
}

// middlewares is the chain's order: audit outermost (it records what the
// rest decided), the quotas (which look the cache up first: a hit spends
// no quota), then the result cache.
func (g guardrails) middlewares() []Middleware {
	var mws []Middleware
	if g.audit != nil {
		mws = append(mws, g.audit.wrap)
	}
	if g.quota != nil {
		mws = append(mws, g.quota.wrap)
	}
	if g.cache != nil {
		mws = append(mws, g.cache.wrap)
	}
	return mws
}

// newGuardrails sets up the guardrails the config turns on, with their
// JetStream resources and metrics; counted tells the quotas whether an
// earlier copy of a batch already counted a call.
func newGuardrails(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, subj bus.Subjects, cfg Config, log *slog.Logger, sessions *groups.Store, counted countedPort) (guardrails, error) {
	var g guardrails
	if ac := cfg.Guard.Audit; ac != nil {
		acfg := *ac
		acfg.Replicas, acfg.Memory = cfg.Store.Replicas, cfg.Store.Memory
		tr, err := audit.New(ctx, nc, subj, acfg)
		if err != nil {
			return g, fmt.Errorf("router: %w", err)
		}
		g.audit = &auditTrail{tr: tr, id: cfg.ID, log: log, ids: cfg.Identities, sessions: sessions}
		lost := prometheus.NewCounter(prometheus.CounterOpts{Name: "toolbus_audit_records_lost_total",
			Help: "Audit records the router could not store in P_AUDIT (each one is logged in full)."})
		if g.audit.lost, err = register(cfg.Metrics, lost); err != nil {
			return g, err
		}
		suppressed := prometheus.NewCounter(prometheus.CounterOpts{Name: "toolbus_audit_refusals_suppressed_total",
			Help: "Refused batches and queries not recorded in P_AUDIT because their caller was past its rate (docs/guardrails.md)."})
		if g.audit.suppressed, err = register(cfg.Metrics, suppressed); err != nil {
			return g, err
		}
	}
	if cfg.Guard.Cache {
		c, err := rcache.New(ctx, js, subj, rcache.Config{Replicas: cfg.Store.Replicas, Memory: cfg.Store.Memory, Now: cfg.Guard.Now})
		if err != nil {
			return g, fmt.Errorf("router: %w", err)
		}
		cached := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "toolbus_result_cache_lookups_total",
			Help: "Result cache lookups of cacheable tool calls, by result (hit or miss)."}, []string{"tool", "result"})
		if cached, err = register(cfg.Metrics, cached); err != nil {
			return g, err
		}
		g.cache = &resultCache{c: c, lookups: cached}
	}
	if len(cfg.Guard.Limits.Rules) > 0 {
		lim, err := limits.New(ctx, js, subj, limits.Config{Policy: cfg.Guard.Limits, Replicas: cfg.Store.Replicas,
			Memory: cfg.Store.Memory, Now: cfg.Guard.Now})
		if err != nil {
			return g, fmt.Errorf("router: %w", err)
		}
		g.limits, g.quota = lim, &quotas{lim: lim, cache: g.cache, counted: counted, log: log}
	}
	return g, nil
}

// recordedCalls is the countedPort over P_parked and the ledger.
type recordedCalls struct {
	parked *parked.Store
	ledger *store.KV
}

func (r recordedCalls) counted(ctx context.Context, key string, parks bool) bool {
	var err error
	if parks {
		_, err = r.parked.Read.Get(ctx, key)
	} else {
		_, err = r.ledger.Get(ctx, key)
	}
	return err == nil
}

// register registers c with reg (when set), or returns the collector of
// that name already registered (a second router in one process).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return c, fmt.Errorf("router: metrics: %w", err)
		}
		if got, ok := are.ExistingCollector.(C); ok {
			return got, nil
		}
		return c, fmt.Errorf("router: metrics: %w", err)
	}
	return c, nil
}
