package router

import (
	"bytes"
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
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/rcache"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/skills"
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

// guard is the router's guardrails, built by newGuard; its methods are
// the steps and verbs the pipeline and the handlers call, each a no-op
// for a guardrail that is off (or a nil guard).
type guard struct {
	id     string // the router's
	log    *slog.Logger
	ids    Identities
	reg    *registry.Registry
	groups *groups.Store
	parked *parked.Store // a re-sent batch's parked calls were counted (counted)
	ledger *store.KV     // so were its recorded ones
	skills *routerSkills // search_tools finds skills too

	lim    *limits.Limiter        // nil without rules
	cache  *rcache.Cache          // nil when off
	cached *prometheus.CounterVec // result cache lookups by outcome
	audit  *audit.Trail           // nil when off
	lost   prometheus.Counter     // audit records that could not be stored
	// refusals bounds the records of refused batches per caller
	// (refused.go); suppressed counts those past the bound.
	refusals   audit.Refusals
	suppressed prometheus.Counter
	pending    sync.Map // *batch → *auditPending: its records not yet known stored (a batch cut off by the drain deadline leaves its entry: the router is stopping)
	limited    sync.Map // *callState → the limit rule that refused it, until audited
	missed     sync.Map // call key → its cache key: looked up by the quota step, a miss
}

// auditPending is a batch's audit records on their way to P_AUDIT.
type auditPending struct {
	mu sync.Mutex
	ps []*audit.Pending
}

// newGuardrails sets up the guardrails' JetStream resources (only those
// configured).
func newGuardrails(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, subj bus.Subjects, cfg Config, g *guard) error {
	if len(cfg.Guard.Limits.Rules) > 0 {
		lim, err := limits.New(ctx, js, subj, limits.Config{Policy: cfg.Guard.Limits, Replicas: cfg.Store.Replicas,
			Memory: cfg.Store.Memory, Now: cfg.Guard.Now})
		if err != nil {
			return fmt.Errorf("router: %w", err)
		}
		g.lim = lim
	}
	if ac := cfg.Guard.Audit; ac != nil {
		acfg := *ac
		acfg.Replicas, acfg.Memory = cfg.Store.Replicas, cfg.Store.Memory
		var err error
		if g.audit, err = audit.New(ctx, nc, subj, acfg); err != nil {
			return fmt.Errorf("router: %w", err)
		}
		lost := prometheus.NewCounter(prometheus.CounterOpts{Name: "toolbus_audit_records_lost_total",
			Help: "Audit records the router could not store in P_AUDIT (each one is logged in full)."})
		if g.lost, err = register(cfg.Metrics, lost); err != nil {
			return err
		}
		suppressed := prometheus.NewCounter(prometheus.CounterOpts{Name: "toolbus_audit_refusals_suppressed_total",
			Help: "Refused batches and queries not recorded in P_AUDIT because their caller was past its rate (docs/guardrails.md)."})
		if g.suppressed, err = register(cfg.Metrics, suppressed); err != nil {
			return err
		}
	}
	if cfg.Guard.Cache {
		c, err := rcache.New(ctx, js, subj, rcache.Config{Replicas: cfg.Store.Replicas, Memory: cfg.Store.Memory, Now: cfg.Guard.Now})
		if err != nil {
			return fmt.Errorf("router: %w", err)
		}
		g.cache = c
		cached := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "toolbus_result_cache_lookups_total",
			Help: "Result cache lookups of cacheable tool calls, by result (hit or miss)."}, []string{"tool", "result"})
		if g.cached, err = register(cfg.Metrics, cached); err != nil {
			return err
		}
	}
	return nil
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

// cachedRun runs a tool call through the result cache: a call of a tool
// with cache_ttl_ms whose key (definition, input, scope) has a stored
// result within its TTL is answered with it, marked in its metadata
// (docs/protocol.md 3.3), and nothing runs; otherwise the call runs and a
// successful result is stored. A call the quota step already looked up
// (a miss: limit, cacheHit) is not looked up again.
func (g *guard) cachedRun(ctx context.Context, j *job, run func(context.Context, *job) bus.Result) bus.Result {
	if g == nil || g.cache == nil {
		return run(ctx, j)
	}
	var key string
	if k, looked := g.missed.LoadAndDelete(j.key()); looked {
		key = k.(string)
	} else {
		var ok, hit bool
		var res bus.Result
		if key, res, ok, hit = g.lookup(ctx, j.tool, j.session, j.user, j.call); !ok {
			return run(ctx, j)
		} else if hit {
			return res
		}
	}
	res := run(ctx, j)
	g.cache.Put(context.WithoutCancel(ctx), key, time.Duration(j.tool.Def.CacheTTLMS)*time.Millisecond, res)
	return res
}

// lookup looks call (its input validated) of tool t up in the result
// cache, and counts the lookup: ok is false for a call the cache does not
// serve, hit true with the stored result, renamed for this call.
func (g *guard) lookup(ctx context.Context, t *registry.Tool, session string, user json.RawMessage, call bus.Call) (key string, res bus.Result, ok, hit bool) {
	key, ok = rcache.Key(&t.Def, session, userOf(user), call.Input)
	if !ok {
		return "", bus.Result{}, false, false
	}
	if res, hit = g.cache.Get(ctx, key); hit {
		g.cached.WithLabelValues(call.Name, "hit").Inc()
		res.ID, res.Name = call.ID, call.Name
		return key, res, true, true
	}
	g.cached.WithLabelValues(call.Name, "miss").Inc()
	return key, bus.Result{}, true, false
}

// cacheHit is the result cache's answer to call c when it has one, looked
// up before the call is counted: a hit runs nothing and costs nothing, so
// only the rules with cache_hits count it (docs/guardrails.md "When a
// call counts"). A miss is remembered for cachedRun, which then stores
// the call's result without looking it up again.
func (g *guard) cacheHit(ctx context.Context, b *batch, c *callState) (bus.Result, bool) {
	if g.cache == nil || c.target.Tool.Def.CacheTTLMS <= 0 {
		return bus.Result{}, false
	}
	call := bus.Call{ID: c.call.ID, Name: c.call.Name, Input: c.input}
	key, res, ok, hit := g.lookup(ctx, c.target.Tool, b.session, b.data.User, call)
	if ok && !hit {
		g.missed.Store(bus.CallKey(b.session, b.replyID, c.call.ID), key)
	}
	return res, hit
}

// limit is the quota step of a call's pipeline, after its permission
// decision and before it runs or parks: a registry tool's call over one of
// its limits ends limit_exceeded with retry_after_ms (docs/protocol.md
// 3.3), and nothing runs. reset_tools, search_tools, the skill loader and
// request-scoped tools are not counted, nor is a call of a re-sent batch
// that the ledger or a parked record will answer (the first copy was
// counted; read-only calls run again, and count again), nor a call the
// result cache answers (cacheHit: only rules with cache_hits count it; the
// hit is the call's result). When the counts cannot be reached the call
// does not run either (fail closed): it ends unavailable.
func (g *guard) limit(b *batch, c *callState, spec parkSpec) *bus.Result {
	if g == nil || g.lim == nil {
		return nil
	}
	lim := g.lim
	t := c.target.Tool
	if t == nil || (c.target.Skill || c.target.Read) {
		return nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	call := limits.Call{Tool: t.Def.Name, ReadOnly: t.Def.ReadOnly, User: userOf(b.data.User), Session: b.session}
	if spec.kind == "" { // a call that parks is looked up when it runs, if ever
		if res, hit := g.cacheHit(ctx, b, c); hit {
			call.CacheHit = true
			ref, err := lim.Check(ctx, call)
			if err != nil || ref != nil {
				return g.refuse(c, t, ref, err)
			}
			return &res
		}
	}
	if g.counted(ctx, b, c, spec) {
		return nil
	}
	ref, err := lim.Check(ctx, call)
	if err != nil || ref != nil {
		g.missed.Delete(bus.CallKey(b.session, b.replyID, c.call.ID)) // it will not run
		return g.refuse(c, t, ref, err)
	}
	return nil
}

// refuse is the result of call c of tool t that its limits refused (ref),
// or that could not be checked (err); nil when neither.
func (g *guard) refuse(c *callState, t *registry.Tool, ref *limits.Refusal, err error) *bus.Result {
	if err != nil {
		g.log.Warn("router: limits not reachable", "tool", t.Def.Name, "err", err)
		return ptr(bus.ErrorResult(c.call, bus.CodeUnavailable, fmt.Sprintf(
			"ToolUnavailableError: The limits of the tool '%s' cannot be checked right now, so it did not run. Try again shortly.", t.Def.Name)))
	}
	if ref == nil {
		return nil
	}
	res := bus.ErrorResult(c.call, bus.CodeLimitExceeded, ref.Message(t.Def.Name))
	res.Error.RetryAfterMS = ref.RetryAfterMS()
	if g.audit != nil {
		g.limited.Store(c, ref.Rule)
	}
	return &res
}

// counted reports whether an earlier copy of this batch already counted
// call c: the ledger holds it (a call that is not read-only) or it was
// parked (a call that parks).
func (g *guard) counted(ctx context.Context, b *batch, c *callState, spec parkSpec) bool {
	key := bus.CallKey(b.session, b.replyID, c.call.ID)
	if spec.kind != "" {
		_, err := g.parked.Get(ctx, key)
		return err == nil
	}
	if c.target.Tool.Def.ReadOnly {
		return false
	}
	_, err := g.ledger.Get(ctx, key)
	return err == nil
}

// search runs the built-in search_tools over what the session and its
// user could reach, skills included.
func (g *guard) search(ctx context.Context, b *batch, c *callState) bus.Result {
	sess := g.groups.Session(b.session)
	var docs []groups.SkillDoc
	if loaderShown(b.req) && g.skills != nil {
		gs := g.groups.Groups()
		for _, s := range g.skills.cat.Skills(userOf(b.data.User)) {
			docs = append(docs, groups.SkillDoc{Name: s.Name, Description: s.Description, Groups: skills.GroupsOf(s.Name, gs)})
		}
	}
	text, err := g.groups.View(g.reg, sess, b.req).Search(ctx, b.session, c.input, docs)
	if err != nil {
		var be *bus.Error
		if errors.As(err, &be) && be.Code == bus.CodeInvalidInput {
			return bus.ErrorResult(c.call, bus.CodeInvalidInput, be.Message)
		}
		return internal(c.call, err)
	}
	return bus.Result{ID: c.call.ID, Name: c.call.Name, State: bus.StateSuccess, Output: bus.Text(text)}
}

// adminGuard runs the guardrails' admin verbs (docs/protocol.md 9):
// limits (what is used and left) and limits.reset. ok is false for any
// other verb.
func (g *guard) admin(ctx context.Context, verb string, e *bus.Event) (out any, ok bool, err error) {
	if verb != "limits" && verb != "limits.reset" {
		return nil, false, nil
	}
	var q struct {
		Rule    string `json:"rule,omitempty"`
		Tool    string `json:"tool,omitempty"`
		User    string `json:"user,omitempty"`
		Session string `json:"session,omitempty"`
	}
	if len(e.Data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(e.Data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&q); err != nil {
			return nil, true, bus.Errorf(bus.CodeBadRequest, "%s wants {\"rule\", \"tool\", \"user\", \"session\"} (all optional): %v", verb, err)
		}
	}
	if g.lim == nil {
		return map[string]any{"limits": []limits.Usage{}}, true, nil
	}
	lim := g.lim
	call := limits.Call{Tool: q.Tool, User: q.User, Session: q.Session}
	if t, ok := g.reg.Lookup(q.Tool); ok {
		call.ReadOnly = t.Def.ReadOnly // write-only rules do not count a read
	}
	if verb == "limits.reset" {
		n, err := lim.Reset(ctx, q.Rule, call)
		if err != nil {
			return nil, true, bus.Errorf(bus.CodeBadRequest, "%v", err)
		}
		return map[string]any{"reset": n}, true, nil
	}
	us, err := lim.Usage(ctx, call)
	return map[string]any{"limits": us}, true, err
}

// natsUser is the NATS user whose credentials alone may publish in
// session: its bound agent user (docs/security.md); "" when the router is
// open or the session unbound (then any agent or operator may have).
func (g *guard) natsUser(session string) string {
	if g.ids == nil {
		return ""
	}
	if _, bound := g.ids.UserOf(session); bound {
		return "session-" + session
	}
	return ""
}

// record publishes the audit record of a call the batch finished (every
// call that did not park: parked calls are recorded when they end,
// recordParked) without waiting; audited waits for it before the reply.
func (g *guard) record(b *batch, c *callState, res bus.Result) {
	if g == nil {
		return
	}
	if res.State == bus.StateInterrupted && g.cache != nil && g.lim != nil {
		g.missed.Delete(bus.CallKey(b.session, b.replyID, c.call.ID)) // it may never have run
	}
	if g.audit == nil {
		return
	}
	tr := g.audit
	sess := g.groups.Session(b.session)
	rec := &audit.Record{Time: time.Now().UTC(), Router: g.id, Session: b.session, ReplyID: b.replyID, CallID: c.call.ID,
		User: userOf(b.data.User), NATSUser: g.natsUser(b.session), Tool: c.call.Name, Outcome: auditOutcome(res)}
	if !b.start.IsZero() {
		rec.DurationMS = time.Since(b.start).Milliseconds()
	}
	rec.Decision = audit.Decision{Behavior: audit.Allow, Mode: sess.Mode}
	code := ""
	if res.Error != nil {
		code = res.Error.Code
	}
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
		if rule, ok := g.limited.LoadAndDelete(c); ok {
			rec.Decision.Rule = rule.(string)
		}
	default:
		d := permission.Decide(permissionContext(sess), &t.Tool.Def, c.input)
		rec.Decision.Rule = d.Reason
		if res.State == bus.StateDenied {
			rec.Decision.Behavior = audit.Deny
		}
		rec.Decision.Cached = bytes.Contains(res.Metadata, []byte(`"`+rcache.MetadataKey+`"`))
	}
	p, err := tr.Write(rec, input)
	if err != nil {
		g.lose(rec, nil, err)
		return
	}
	v, ok := g.pending.Load(b)
	if !ok {
		v, _ = g.pending.LoadOrStore(b, &auditPending{})
	}
	ap := v.(*auditPending)
	ap.mu.Lock()
	ap.ps = append(ap.ps, p)
	ap.mu.Unlock()
}

// audited waits until P_AUDIT holds the audit records of b's calls
// reported so far, published as they finished; reportStep.stored calls it
// once the batch's events are stored, so the two waits overlap and the
// reply, sent after both, follows every record of the calls it carries
// (docs/guardrails.md "Audit trail"). A record that cannot be stored
// within the trail's max_wait is counted and logged in full (lose), and
// the reply goes out: the calls ran.
func (g *guard) audited(b *batch, landing landingFunc) {
	if g == nil || g.audit == nil {
		return
	}
	v, ok := g.pending.LoadAndDelete(b)
	if !ok {
		return
	}
	ap := v.(*auditPending)
	ap.mu.Lock()
	ps := ap.ps
	ap.mu.Unlock()
	ctx, cancel := landing.start()
	defer cancel()
	for _, p := range g.audit.Stored(ctx, ps) {
		g.lose(nil, p.Data(), p.Err())
	}
}

// lose counts an audit record that could not be stored and logs it in
// full (rec, or its encoding data), so that a log shipper still has it.
func (g *guard) lose(rec *audit.Record, data []byte, err error) {
	if g.lost != nil {
		g.lost.Inc()
	}
	if data == nil && rec != nil {
		data, _ = json.Marshal(rec)
	}
	g.log.Error("router: audit record not stored", "record", json.RawMessage(data), "err", err)
}

// recordParked writes the audit record of a parked call that ended: asked
// (a confirmation, naming who answered and when) or external, and waits
// until P_AUDIT holds it.
func (g *guard) recordParked(rec *parked.Record, res bus.Result) {
	if g == nil || g.audit == nil {
		return
	}
	tr := g.audit
	behavior := audit.External
	if rec.Kind == bus.KindConfirm {
		behavior = audit.Ask
	}
	a := &audit.Record{Time: time.Now().UTC(), Router: g.id, Session: rec.Session, ReplyID: rec.ReplyID, CallID: rec.Call.ID,
		User: userOf(rec.User), NATSUser: g.natsUser(rec.Session), Tool: rec.Call.Name, Outcome: auditOutcome(res),
		DurationMS: time.Since(rec.Created).Milliseconds(),
		Decision: audit.Decision{Behavior: behavior, Mode: g.groups.Session(rec.Session).Mode, Rule: rec.Reason,
			Approver: rec.AnsweredBy, AnsweredAt: rec.AnsweredAt}}
	p, err := tr.Write(a, rec.Call.Input)
	if err != nil {
		g.lose(a, nil, err)
		return
	}
	// Stored before the call's result is recorded and its batch goes on
	// (answers.complete): a parked call ends at a person's pace, so the
	// round trip is not worth overlapping.
	ctx, cancel := landing()
	defer cancel()
	for _, p := range tr.Stored(ctx, []*audit.Pending{p}) {
		g.lose(a, p.Data(), p.Err())
	}
}

func auditOutcome(res bus.Result) audit.Outcome {
	o := audit.Outcome{State: res.State}
	if res.Error != nil {
		o.Code = res.Error.Code
	}
	return o
}
