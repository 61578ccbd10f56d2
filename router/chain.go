package router

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/rcache"
	"github.com/toolbus/toolbus/store"
)

// Guard configures the guardrails of docs/guardrails.md; the zero value is all off.
type Guard struct {
	// Search offers search_tools beside reset_tools (docs/protocol.md 4.2).
	Search bool
	// ReadOutput offers read_output (docs/protocol.md 11).
	ReadOutput bool
	// Pinned tools and groups are visible to every session.
	Pinned groups.Pins
	// Limits are the quotas and rate limits shared by every router.
	Limits limits.Policy
	// Audit, when set, writes one audit record per call to P_AUDIT; nil: none.
	Audit *audit.Config
	// Cache turns on the result cache of tools with cache_ttl_ms.
	Cache bool
	// CacheMaxBytes bounds the cache's bucket, its oldest entries dropped
	// past it (rcache.Config.MaxBytes): zero means rcache.DefaultMaxBytes,
	// negative no bound.
	CacheMaxBytes int64
	// Now is the limits' and the cache's clock; nil means time.Now.
	Now func() time.Time
}

// Executor runs one call and returns its result (docs/router.md "Executor chain").
type Executor interface {
	Exec(ctx context.Context, j *job) bus.Result
}

// ExecFunc is an Executor of a function.
type ExecFunc func(ctx context.Context, j *job) bus.Result

// Exec calls f.
func (f ExecFunc) Exec(ctx context.Context, j *job) bus.Result { return f(ctx, j) }

// Middleware wraps an Executor.
type Middleware func(Executor) Executor

// chain wraps last in mws, the first outermost, leaving out nil ones.
func chain(last Executor, mws ...Middleware) Executor {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			last = mws[i](last)
		}
	}
	return last
}

// guardrails are the middlewares the config turns on; nil when off.
type guardrails struct {
	audit  *auditTrail
	guard  *quotas         // the quotas and the result cache, one middleware; nil when both are off
	quota  *quotas         // guard when limits are on: it also counts the calls that park (batch.runCalls)
	limits *limits.Limiter // serves the limits admin verbs
	bounds []store.Named   // the quotas' state's and the cache's, for status and metrics (store.Store.Bounds)
}

// middlewares is the chain's order: audit outermost, then quotas and cache.
func (g guardrails) middlewares() []Middleware {
	var mws []Middleware
	if g.audit != nil {
		mws = append(mws, g.audit.wrap)
	}
	if g.guard != nil {
		mws = append(mws, g.guard.wrap)
	}
	return mws
}

// newGuardrails sets up the guardrails the config turns on.
func newGuardrails(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, subj bus.Subjects, cfg Config, log *slog.Logger, sessions *groups.Store, counted func(ctx context.Context, key string, parks bool) bool) (guardrails, error) {
	var g guardrails
	if ac := cfg.Guard.Audit; ac != nil {
		acfg := *ac
		acfg.Replicas, acfg.Memory = cfg.Store.Replicas, cfg.Store.Memory
		tr, err := audit.New(ctx, nc, subj, acfg)
		if err != nil {
			return g, fmt.Errorf("router: %w", err)
		}
		g.audit = &auditTrail{tr: tr, id: cfg.ID, log: log, ids: cfg.Identities, session: sessions.Session}
		if g.audit.lost, err = register(cfg.Metrics, prometheus.NewCounter(prometheus.CounterOpts{Name: "toolbus_audit_records_lost_total",
			Help: "Audit records the router could not store in P_AUDIT (each one is logged in full)."})); err != nil {
			return g, err
		}
		if g.audit.suppressed, err = register(cfg.Metrics, prometheus.NewCounter(prometheus.CounterOpts{Name: "toolbus_audit_refusals_suppressed_total",
			Help: "Refused batches and queries not recorded in P_AUDIT because their caller was past its rate (docs/guardrails.md)."})); err != nil {
			return g, err
		}
	}
	q := &quotas{counted: counted, ids: cfg.Identities, log: log}
	if cfg.Guard.Cache {
		c, err := rcache.New(ctx, js, subj, rcache.Config{Replicas: cfg.Store.Replicas, Memory: cfg.Store.Memory, Now: cfg.Guard.Now,
			MaxBytes: max(cfg.Guard.CacheMaxBytes, -1)})
		if err != nil {
			return g, fmt.Errorf("router: %w", err)
		}
		q.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "toolbus_result_cache_lookups_total",
			Help: "Result cache lookups of cacheable tool calls, by result (hit or miss)."}, []string{"tool", "result"})
		if q.lookups, err = register(cfg.Metrics, q.lookups); err != nil {
			return g, err
		}
		q.cache, g.guard = c, q
		g.bounds = append(g.bounds, store.Named{Bucket: "cache", B: c.Bytes(), DropsOldest: true})
	}
	if len(cfg.Guard.Limits.Rules) > 0 {
		lim, err := limits.New(ctx, js, subj, limits.Config{Policy: cfg.Guard.Limits, Replicas: cfg.Store.Replicas,
			Memory: cfg.Store.Memory, Now: cfg.Guard.Now})
		if err != nil {
			return g, fmt.Errorf("router: %w", err)
		}
		q.lim, g.limits, g.guard, g.quota = lim.Check, lim, q, q
		rates, budgets := lim.Bounds()
		g.bounds = append(g.bounds, store.Named{Bucket: limits.BucketRates, B: rates}, store.Named{Bucket: "budgets", B: budgets})
	}
	return g, nil
}

// recordedCalls tells whether an earlier copy of a batch recorded a call
// (counted: in P_parked when it parks, else in the ledger).
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

// register registers c with reg (when set), or returns the one registered.
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

// quotas is the middleware of the quotas and the result cache, each looking
// a call up once (docs/guardrails.md "When a call counts"; parks are
// counted by admitPark).
type quotas struct {
	lim     func(context.Context, limits.Call) (*limits.Refusal, error) // limits.Limiter.Check; nil: no limits (the cache alone)
	cache   resultStore                                                 // nil: no result cache
	lookups *prometheus.CounterVec                                      // the cache's, by tool and hit or miss
	counted func(ctx context.Context, key string, parks bool) bool      // recordedCalls.counted
	ids     Identities                                                  // per-user counts of a session's own login with no user
	log     *slog.Logger

	wmu     sync.Mutex
	writing map[string]chan struct{} // the cache's writes in flight (put), closed once ended
}

// A result is stored in the cache off the call path, within
// cacheWriteTimeout, at most maxCacheWrites at once: a slow or leaderless
// JetStream does not delay replies (docs/guardrails.md).
const (
	cacheWriteTimeout = 2 * time.Second
	maxCacheWrites    = 64
)

// resultStore is what the middleware uses of rcache.Cache.
type resultStore interface {
	Get(ctx context.Context, key string) (bus.Result, bool)
	Put(ctx context.Context, key string, ttl time.Duration, res bus.Result) bool
}

func (q *quotas) wrap(next Executor) Executor {
	return ExecFunc(func(ctx context.Context, j *job) bus.Result {
		if !j.runsTool() || q.lim == nil && j.tool.Def.CacheTTLMS <= 0 {
			return next.Exec(ctx, j)
		}
		actx, cancel := context.WithTimeout(j.b.ctx, 10*time.Second)
		key, hit := q.lookup(actx, j)
		refused := q.admit(actx, j, hit != nil)
		cancel()
		j.admit()
		switch {
		case refused != nil:
			return *refused
		case hit != nil:
			j.c.cached = true
			return *hit
		}
		res := next.Exec(ctx, j)
		if key != "" {
			q.put(context.WithoutCancel(ctx), key, time.Duration(j.tool.Def.CacheTTLMS)*time.Millisecond, res)
		}
		return res
	})
}

// put stores res under key in a goroutine (which only reads it: a result's
// later changes copy its output, offload.Fit); a write past maxCacheWrites,
// or of a key already being written, is dropped (its next call misses).
func (q *quotas) put(ctx context.Context, key string, ttl time.Duration, res bus.Result) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if _, ok := q.writing[key]; ok || len(q.writing) >= maxCacheWrites {
		q.log.Debug("result cache: write dropped", "key", key, "in_flight", len(q.writing))
		return
	}
	if q.writing == nil {
		q.writing = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	q.writing[key] = done
	go func() {
		ctx, cancel := context.WithTimeout(ctx, cacheWriteTimeout)
		q.cache.Put(ctx, key, ttl, res)
		cancel()
		q.wmu.Lock()
		delete(q.writing, key)
		q.wmu.Unlock()
		close(done)
	}()
}

// written returns once key's write in flight, if any, has ended (or ctx has):
// a router's later call of it then hits.
func (q *quotas) written(ctx context.Context, key string) {
	q.wmu.Lock()
	done := q.writing[key]
	q.wmu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

// lookup looks j's call up in the result cache and counts the lookup: key ""
// when the cache does not serve it; hit the stored result, renamed.
func (q *quotas) lookup(ctx context.Context, j *job) (key string, hit *bus.Result) {
	if q.cache == nil {
		return "", nil
	}
	key, ok := rcache.Key(&j.tool.Def, j.session, userOf(j.user), j.call.Input)
	if !ok {
		return "", nil
	}
	q.written(ctx, key)
	if res, ok := q.cache.Get(ctx, key); ok {
		q.lookups.WithLabelValues(j.call.Name, "hit").Inc()
		res.ID, res.Name = j.call.ID, j.call.Name
		return key, &res
	}
	q.lookups.WithLabelValues(j.call.Name, "miss").Inc()
	return key, nil
}

// admit counts j's call (hit: answered from the cache); a result if it may not run.
func (q *quotas) admit(ctx context.Context, j *job, hit bool) *bus.Result {
	if q.lim == nil {
		return nil
	}
	d := &j.tool.Def
	if !hit && !d.ReadOnly && q.counted(ctx, j.key(), false) {
		return nil
	}
	return q.check(ctx, j.c, limits.Call{Tool: d.Name, ReadOnly: d.ReadOnly, User: userOf(j.user),
		Login: ownLogin(q.ids, j.session), Session: j.session, CacheHit: hit})
}

// admitPark counts parked call c of a registry tool; a result if it may not park.
func (q *quotas) admitPark(b *batch, c *callState) *bus.Result {
	t := c.target.Tool
	if t == nil || c.target.Skill || c.target.Read {
		return nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if q.counted(ctx, bus.CallKey(b.session, b.replyID, c.call.ID), true) {
		return nil
	}
	return q.check(ctx, c, limits.Call{Tool: t.Def.Name, ReadOnly: t.Def.ReadOnly, User: userOf(b.data.User),
		Login: ownLogin(q.ids, b.session), Session: b.session})
}

// check counts c's call against the limits: the result of a refused or
// uncheckable call (its rule kept for the audit), nil when it may go on.
func (q *quotas) check(ctx context.Context, c *callState, call limits.Call) *bus.Result {
	ref, err := q.lim(ctx, call)
	if err != nil {
		q.log.Warn("router: limits not reachable", "tool", call.Tool, "err", err)
		return new(bus.ErrorResult(c.call, bus.CodeUnavailable, fmt.Sprintf(
			"ToolUnavailableError: The limits of the tool '%s' cannot be checked right now, so it did not run. Try again shortly.", call.Tool)))
	}
	if ref == nil {
		return nil
	}
	res := bus.ErrorResult(c.call, bus.CodeLimitExceeded, ref.Message(call.Tool))
	res.Error.RetryAfterMS = ref.RetryAfterMS()
	c.limitRule = ref.Rule
	return &res
}

// auditTrail is the audit middleware (docs/guardrails.md "Audit trail"): one
// record per call that ends without parking, awaited before the reply;
// parked calls are recorded when they end, refused batches by refused.
type auditTrail struct {
	tr         trail
	id         string // the router's
	log        *slog.Logger
	ids        Identities
	session    func(id string) *groups.Session // groups.Store.Session: the session's permission mode
	lost       prometheus.Counter
	refusals   audit.Refusals // bounds the records of refused batches per caller; suppressed counts those past it
	suppressed prometheus.Counter
}

// trail is what the middleware uses of audit.Trail.
type trail interface {
	Write(rec *audit.Record, input json.RawMessage) (*audit.Pending, error)
	WriteRefusal(rec *audit.Record) (*audit.Pending, error)
	Stored(ctx context.Context, ps []*audit.Pending) (lost []*audit.Pending)
}

func (a *auditTrail) wrap(next Executor) Executor {
	return ExecFunc(func(ctx context.Context, j *job) bus.Result {
		res := next.Exec(ctx, j)
		if j.c != nil {
			a.record(j.b, j.c, res)
		}
		return res
	})
}

// record publishes the audit record of call c of batch b without waiting
// (audited waits); its message id is the call key, so it is stored once.
func (a *auditTrail) record(b *batch, c *callState, res bus.Result) {
	rec := a.callRecord(b.session, b.replyID, c.call, b.data.User, res, audit.Allow)
	if !b.start.IsZero() {
		rec.DurationMS = time.Since(b.start).Milliseconds()
	}
	code := rec.Outcome.Code
	input := c.input
	if input == nil {
		input = c.call.Input
	}
	switch t := c.target; {
	case t.Code != "":
		rec.Decision.Behavior = audit.Unresolved
	case t.Reset, t.Search, t.Skill, t.Read, t.External != nil:
		rec.Decision.Behavior = audit.Builtin
	case code == bus.CodeInvalidInput:
		rec.Decision.Behavior = audit.Invalid
	case code == bus.CodeLimitExceeded:
		rec.Decision.Behavior = audit.Limit
		rec.Decision.Rule = c.limitRule
	default:
		rec.Decision.Rule = c.rule
		if res.State == bus.StateDenied {
			rec.Decision.Behavior = audit.Deny
		}
		rec.Decision.Cached = c.cached // never the result's metadata, which a worker writes
	}
	p, err := a.tr.Write(rec, input)
	if err != nil {
		a.lose(rec, nil, err)
		return
	}
	b.mu.Lock()
	b.audits = append(b.audits, p)
	b.mu.Unlock()
}

// audited waits until P_AUDIT holds the records of b's calls so far (one not
// stored within max_wait is counted and logged); a nil trail waits for nothing.
func (a *auditTrail) audited(b *batch, landing landingFunc) {
	if a == nil {
		return
	}
	ps := take(&b.mu, &b.audits)
	if len(ps) == 0 {
		return
	}
	ctx, cancel := landing.start(b.ctx)
	defer cancel()
	for _, p := range a.tr.Stored(ctx, ps) {
		a.lose(nil, p.Data(), p.Err())
	}
}

// lose counts an audit record not stored and logs it in full for log shippers.
func (a *auditTrail) lose(rec *audit.Record, data []byte, err error) {
	if a.lost != nil {
		a.lost.Inc()
	}
	if data == nil && rec != nil {
		data, _ = json.Marshal(rec)
	}
	a.log.Error("router: audit record not stored", "record", json.RawMessage(data), "err", err)
}

// recordParked writes an ended parked call's audit record and awaits it.
func (a *auditTrail) recordParked(ctx context.Context, rec *parked.Record, res bus.Result) {
	if a == nil {
		return
	}
	behavior, rule := audit.External, rec.Reason
	switch {
	case rec.RequestScoped: // the caller's own tool, maybe named as a registered one (session 37)
		behavior, rule = audit.Builtin, "request-scoped tool declared by the caller (protocol 4.3)"
	case rec.Kind == bus.KindConfirm:
		behavior = audit.Ask
	}
	r := a.callRecord(rec.Session, rec.ReplyID, rec.Call, rec.User, res, behavior)
	r.DurationMS = time.Since(rec.Created).Milliseconds()
	r.Decision.Rule, r.Decision.Approver, r.Decision.AnsweredAt = rule, rec.AnsweredBy, rec.AnsweredAt
	input := rec.Call.Input
	if parked.Held(rec) { // a record this router took over, ended: only its digest (protocol 6.1, 1.23)
		input, r.InputDigest, r.InputOmitted = nil, rec.InputDigest, "held by its digest in the parked call's ended record"
	}
	// Stored first: a parked call ends at a person's pace, no need to overlap.
	p, err := a.tr.Write(r, input)
	a.land(ctx, r, p, err)
}

// land waits until P_AUDIT holds p, the write of rec, or ctx ends.
func (a *auditTrail) land(ctx context.Context, rec *audit.Record, p *audit.Pending, err error) {
	if err != nil {
		a.lose(rec, nil, err)
		return
	}
	for _, p := range a.tr.Stored(ctx, []*audit.Pending{p}) {
		a.lose(rec, p.Data(), p.Err())
	}
}

// ownLogin is session's own agent login (docs/security.md, 1.13); "" on an
// open router or for the shared agent's sessions.
func ownLogin(ids Identities, session string) string {
	if ids == nil || !bus.ValidID(session) || sharedAgents(ids, session) {
		return ""
	}
	return "session-" + session
}

// callRecord is the audit record of call c of session's batch replyID,
// which ended with res; its decision is behavior in the session's mode.
func (a *auditTrail) callRecord(session, replyID string, c bus.Call, user json.RawMessage, res bus.Result, behavior string) *audit.Record {
	rec := &audit.Record{Time: time.Now().UTC(), Router: a.id, Session: session, ReplyID: replyID, CallID: c.ID,
		User: userOf(user), NATSUser: ownLogin(a.ids, session), Tool: c.Name, Outcome: audit.Outcome{State: res.State},
		Decision: audit.Decision{Behavior: behavior, Mode: a.session(session).Mode}}
	if res.Error != nil {
		rec.Outcome.Code = res.Error.Code
	}
	return rec
}

// unboundCaller is the one caller all unbound sessions' refusals count against.
const unboundCaller = "unbound"

// refusedWait bounds the wait for a refusal's record to be stored.
const refusedWait = 5 * time.Second

// refused records a batch or tools query refused whole before any call ran,
// at most audit.RefusalBurst a minute per caller (docs/guardrails.md "Audit
// trail").
func (a *auditTrail) refused(ctx context.Context, session, replyID, kind string, err error) {
	if a == nil {
		return
	}
	if !bus.ValidID(session) {
		// The shared agent may publish on any token: recorded under no session (issue 26).
		if len(session) > 128 {
			session = session[:128]
		}
		kind, session = fmt.Sprintf("%s in session %q", kind, session), ""
	}
	var be *bus.Error
	if !errors.As(err, &be) {
		return
	}
	switch be.Code {
	case bus.CodeBadEvent, bus.CodeBadRequest, bus.CodeDenied, bus.CodeLimitExceeded:
	default:
		return
	}
	natsUser := ownLogin(a.ids, session)
	ok, suppressed := a.refusals.Take(cmp.Or(natsUser, unboundCaller), time.Now())
	if !ok {
		if a.suppressed != nil {
			a.suppressed.Inc()
		}
		return
	}
	if !bus.ValidID(replyID) {
		replyID = ""
	}
	rec := &audit.Record{Time: time.Now().UTC(), Router: a.id, Session: session, ReplyID: replyID, NATSUser: natsUser,
		Decision: audit.Decision{Behavior: audit.Refused, Rule: kind + ": " + be.Message}, Outcome: audit.Outcome{State: bus.StateError, Code: be.Code},
		Suppressed: suppressed}
	if a.ids != nil {
		rec.User, _ = a.ids.UserOf(session)
	}
	ctx, cancel := context.WithTimeout(ctx, refusedWait)
	defer cancel()
	p, err := a.tr.WriteRefusal(rec)
	a.land(ctx, rec, p, err)
}

// refusedRequest records a refused request on P.<kind>.<session>, as refused does.
func (a *auditTrail) refusedRequest(ctx context.Context, subj bus.Subjects, subject, kind string, e *bus.Event, err error) {
	session, ok := subj.Token(subject, kind)
	if !ok {
		return
	}
	replyID := ""
	if e != nil {
		replyID = e.ID
	}
	what := "batch"
	if kind == "tools" {
		what = "tools query"
	}
	a.refused(ctx, session, replyID, what, err)
}

// once is the ledger middleware over ledger.Ledger.Once: a call that is not
// read-only runs through next at most once per call key; j.landed is
// Once's (writtenCall).
func once(onceRun func(ctx context.Context, c ledger.Call, run func() bus.Result) (bus.Result, bool)) Middleware {
	return func(next Executor) Executor {
		return ExecFunc(func(ctx context.Context, j *job) bus.Result {
			def := &j.tool.Def
			if def.ReadOnly {
				return next.Exec(ctx, j)
			}
			timeout := time.Duration(def.TimeoutMS) * time.Millisecond * time.Duration(max(def.MaxAttempts, 1))
			res, landed := onceRun(ctx, ledgerCall(j, timeout), func() bus.Result { return next.Exec(ctx, j) })
			j.landed = landed
			return res
		})
	}
}

// ledgerCall is what the ledger knows of j, whose run may take timeout.
func ledgerCall(j *job, timeout time.Duration) ledger.Call {
	def := &j.tool.Def
	sent := j.call.Input
	if j.sent != nil {
		sent = j.sent
	}
	digest, canon := bus.CallDigests(j.call.Name, sent)
	return ledger.Call{Key: j.key(), Call: j.call, Digest: digest, Canon: canon,
		Timeout: timeout, Expiry: j.deadline,
		Retry: def.Idempotent && def.MaxAttempts > 1, Durable: def.Durable}
}
