// Package router is the stateless router of toolbus: it checks batches of
// tool calls, resolves and validates each, runs them on worker queue groups
// in the order of docs/protocol.md 5.5, and reports results and events. All
// shared state lives in JetStream, read through watch-fed caches, so routers
// are interchangeable. Router is a thin shell (docs/router.md).
package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/internal/pool"
	"github.com/toolbus/toolbus/internal/replies"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/presence"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/session"
	"github.com/toolbus/toolbus/store"
)

// Config configures a Router. Every zero value has a working default.
type Config struct {
	// ID is the router's instance id; "" means a random one.
	ID string
	// Prefix is the deployment's subject prefix; "" means bus.DefaultPrefix.
	Prefix string
	// Store sizes the JetStream resources the router creates at start.
	Store store.Config
	// MaxInflight bounds the messages handled at once; zero means 4096.
	MaxInflight int
	// MaxSessionInflight bounds the slots one session's batches and tools
	// queries hold at once (shares.go); zero means
	// DefaultSessionShare(MaxInflight), negative no share.
	MaxSessionInflight int
	// MaxQueued bounds the batches and queries waiting for a slot; zero: MaxInflight.
	MaxQueued int
	// Groups are group definitions stored at start (from the config file).
	Groups []bus.Group
	// DefaultMode is the permission mode of new sessions; "" means "default".
	DefaultMode string
	// DefaultRules and DefaultWorkDirs seed new sessions' permission context.
	DefaultRules    []bus.Rule
	DefaultWorkDirs []string
	// Skills are local skill sources (docs/protocol.md 10), lowest priority
	// first, each a skill folder or a folder of them, below P_skills.
	Skills []string
	// SkillViewer also offers AgentScope's Skill viewer (protocol 10); off by default.
	SkillViewer bool
	// Limits bound what one batch may ask; zero fields take the defaults.
	Limits Limits
	// SessionCache bounds the sessions kept decoded in memory; zero means
	// groups.DefaultSessionCache. Each batch run reads its session anyway.
	SessionCache int
	// ParkTTL is how long a call waits for an answer; zero means 24 hours.
	ParkTTL time.Duration
	// RefuseSharedRegister refuses registrations on 1.11's shared
	// P.register (bad_request) where NATS permissions confine workers to
	// their tools' subjects (docs/security.md).
	RefuseSharedRegister bool
	// RegisterRate bounds the bytes of registrations this router reads a
	// second from one NATS account, after a burst of registry.RegisterBurst
	// seconds of them; past it a registration is refused limit_exceeded
	// unread (docs/registry.md). Zero: registry.DefaultRegisterRate;
	// negative: no bound.
	RegisterRate int64
	// Identities binds sessions to users (docs/security.md); nil runs open.
	Identities Identities
	// Lease is how long a router's claim on work lives unrenewed before
	// another router takes it over; zero means three heartbeats.
	Lease time.Duration
	// Notices times the running notices of a batch not yet answered
	// (docs/protocol.md 3.2.1); zero fields mean 2 s, then every 5 s.
	Notices Notices
	// Tasks configures background tasks (background.go).
	Tasks TasksConfig
	// Guard configures search, quotas, the result cache and the audit (chain.go).
	Guard Guard
	// Logger receives the router's logs; nil discards.
	Logger *slog.Logger
	// Metrics registers the router's Prometheus metrics; nil keeps them private.
	Metrics prometheus.Registerer
}

// Limits bound the input a router takes. A batch past one is refused with
// bad_request and nothing runs; a call that would park past MaxParked gets
// a limit_exceeded result instead.
type Limits struct {
	// MaxCalls is the most calls one batch may hold; zero means bus.MaxCalls (64).
	MaxCalls int
	// MaxInputBytes bounds one call's input; zero means DefaultMaxInputBytes.
	MaxInputBytes int
	// MaxParked bounds a session's parked calls; zero means DefaultMaxParked.
	MaxParked int
	// MaxOutput is the output ceiling: a worker's stored output past it is
	// refused (protocol 5.9); zero means offload.DefaultMaxOutput.
	MaxOutput int64
}

// Defaults of Limits.
const (
	DefaultMaxInputBytes = 1 << 20
	DefaultMaxParked     = 1000
)

func (l *Limits) defaults() {
	l.MaxCalls = cmp.Or(max(l.MaxCalls, 0), bus.MaxCalls)
	l.MaxInputBytes = cmp.Or(max(l.MaxInputBytes, 0), DefaultMaxInputBytes)
	l.MaxParked = cmp.Or(max(l.MaxParked, 0), DefaultMaxParked)
	l.MaxOutput = cmp.Or(max(l.MaxOutput, 0), offload.DefaultMaxOutput)
}

// Router serves one deployment's router subjects (docs/router.md).
type Router struct {
	*wire  // connection, subjects, source, logger, metrics, base context, landing: decode, reject, respond
	cfg    Config
	life   *life.Life
	sem    chan struct{}
	beats  chan struct{} // the slots of workers' registrations and heartbeats
	adm    *admission
	shares *shares // each session's share of the slots (shares.go)
	pool   *pool.Pool

	store  *store.Store
	reg    *registry.Registry
	groups *groups.Store
	// sessions decides when a batch's session is read from KV (package session)
	sessions *session.Revisions
	parked   *parked.Store
	presence *presence.Presence // the routers alive (P_routers, docs/protocol.md 8)
	led      *ledger.Ledger     // the dedupe ledger (docs/protocol.md 3.1)
	events   *routerEvents      // the events stream and replies (events.go)
	pipe     *pipeline          // the batch pipeline over its ports (batch.go)
	skills   *routerSkills
	guards   guardrails // the middlewares the config turns on (chain.go)

	// The handlers, built in Start.
	answers  *answers
	conts    *continuations
	handlers []route

	subs       subscriptions
	batches    runningBatches     // batch.go
	notices    *notices           // the running notices of batches awaiting their reply (running.go)
	execs      execWatches        // exec requests in flight (exec.go)
	outputs    *offload.Offloader // stores outputs that would take a batch's messages past the payload limit
	stored     *outputs           // seals results' stored outputs and serves P.outputs.<session> (outputs.go)
	tools      toolRunner         // runs tool calls on workers, through work queues and the ledger (exec.go)
	confirming confirmed          // confirmed calls running outside any batch
	cancelEnds cancelEnds         // cancels of parked calls still to record (park.go)
	bg         *background        // background tasks; nil when off (background.go)

	// tasksBound is P_tasks' soft bound (newBackground) for Bounds, which
	// the metrics read from build on.
	tasksBound atomic.Pointer[store.Bound]

	once     sync.Once
	stopErr  error
	cutCalls int         // calls in flight when a drain's deadline passed
	cut      atomic.Bool // a drain's deadline cut work off
}

// route is one subscription; shed: a full router answers it busy.
type route struct {
	subject, queue string
	h              func(*nats.Msg)
	// timed, instead of h, handles a batch or tools query: told when the
	// router read it, it waits for a slot at most queueWait (admission).
	timed func(*nats.Msg, time.Time)
}

// errDrainDeadline is the cause of the contexts a drain's deadline cut off.
var errDrainDeadline = life.ErrDeadline

// StopTimeout is the drain deadline of Stop.
const StopTimeout = 5 * time.Second

// drainCleanup bounds the wait for cancelled handlers past a drain's deadline.
const drainCleanup = 2 * time.Second

// New returns a Router on nc. Call Start to serve.
func New(nc *nats.Conn, cfg Config) (*Router, error) {
	if cfg.ID == "" {
		cfg.ID = nuid.Next()
	}
	if !bus.ValidID(cfg.ID) {
		return nil, fmt.Errorf("router: id %q must match ^[A-Za-z0-9_-]{1,128}$", cfg.ID)
	}
	cfg.MaxInflight = cmp.Or(max(cfg.MaxInflight, 0), 4096)
	cfg.MaxQueued = cmp.Or(max(cfg.MaxQueued, 0), cfg.MaxInflight)
	cfg.Limits.defaults()
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.DefaultMode != "" && !permission.ValidMode(cfg.DefaultMode) {
		return nil, fmt.Errorf("router: default mode %q must be default, accept_edits, explore, bypass or dont_ask", cfg.DefaultMode)
	}
	for _, rule := range cfg.DefaultRules {
		if err := permission.CheckRule(rule); err != nil {
			return nil, fmt.Errorf("router: default rule %+v: %w", rule, err)
		}
	}
	for _, g := range cfg.Groups {
		if g.Scope == "" {
			g.Scope = bus.ScopeMeta
		}
		if err := groups.CheckGroup(&g); err != nil {
			return nil, fmt.Errorf("router: config group: %w", err)
		}
	}
	cfg.Store.Heartbeat = cmp.Or(max(cfg.Store.Heartbeat, 0), bus.DefaultHeartbeat)
	cfg.Lease = cmp.Or(max(cfg.Lease, 0), 3*cfg.Store.Heartbeat)
	log := cfg.Logger.With("router", cfg.ID)
	w := &wire{nc: nc, subj: bus.NewSubjects(cfg.Prefix), source: "toolbus/router/" + cfg.ID, log: log}
	r := &Router{wire: w, cfg: cfg, sem: make(chan struct{}, cfg.MaxInflight), beats: make(chan struct{}, maxBeats), pool: pool.New(time.Minute)}
	r.life = life.New(life.Config{Cleanup: drainCleanup, LandBudget: landBudget, Logger: log, OnDeadline: func() {
		r.cutCalls = r.batches.callsInFlight()
		r.cut.Store(true)
	}})
	w.base, w.landing = r.life.Context(), r.life.Landing
	r.adm = &admission{wire: w, life: r.life, sem: r.sem, maxQueued: cfg.MaxQueued}
	r.shares = newShares(cfg.MaxInflight, cfg.MaxSessionInflight, cfg.Identities)
	return r, nil
}

// ID returns the router's instance id.
func (r *Router) ID() string { return r.cfg.ID }

// Start builds and subscribes; it returns once serving, or with the first error, undone.
func (r *Router) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = r.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err := r.build(ctx); err != nil {
		return err
	}
	r.bind()
	if r.bg, err = newBackground(ctx, r); err != nil {
		return err
	}
	for _, s := range r.handlers {
		sub, err := r.nc.QueueSubscribe(s.subject, s.queue, func(m *nats.Msg) { r.dispatch(s, m) })
		if err != nil {
			return fmt.Errorf("router: subscribe %s: %w", s.subject, err)
		}
		_ = sub.SetPendingLimits(pendingMsgs, pendingLimit)
		r.subs.mu.Lock()
		r.subs.list = append(r.subs.list, sub)
		r.subs.mu.Unlock()
	}
	// Routers show up in NATS micro discovery (`nats micro ls`, `toolbus status`).
	svc, err := micro.AddService(r.nc, micro.Config{Name: "toolbus-router", Version: "1.0.0",
		Description: "toolbus router " + r.cfg.ID, Metadata: map[string]string{"router": r.cfg.ID, "prefix": r.subj.Prefix}})
	if err != nil {
		return fmt.Errorf("router: micro service: %w", err)
	}
	r.subs.mu.Lock()
	r.subs.svc = svc
	r.subs.mu.Unlock()
	if err := bus.Flush(ctx, r.nc); err != nil {
		return fmt.Errorf("router: flush: %w", err)
	}
	r.loops()
	r.log.Info("router serving", "prefix", r.subj.Prefix)
	return nil
}

// build makes the subsystems, each one's stop a step of the unwind.
func (r *Router) build(ctx context.Context) error {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return fmt.Errorf("router: jetstream: %w", err)
	}
	if r.store, err = store.Setup(ctx, js, r.subj, r.cfg.Store); err != nil {
		return err
	}
	bg := r.life.Background()
	r.life.Defer(func(ctx context.Context) error {
		if r.cut.Load() {
			// Past the cleanup window handlers end on their own: no wait.
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			cancel()
		}
		return r.pool.Close(ctx)
	})
	r.reg = registry.New(r.store, registry.Config{Heartbeat: r.cfg.Store.Heartbeat, Logger: r.log})
	if err := r.reg.Start(bg); err != nil {
		return fmt.Errorf("router: registry: %w", err)
	}
	r.life.Defer(r.reg.Stop)
	r.groups = groups.New(r.store, groups.Config{Session: session.Config{DefaultMode: r.cfg.DefaultMode,
		DefaultRules: r.cfg.DefaultRules, DefaultWorkDirs: r.cfg.DefaultWorkDirs, IdleTTL: r.cfg.Store.SessionTTL, CacheSize: r.cfg.SessionCache}, Search: r.cfg.Guard.Search, Pinned: r.cfg.Guard.Pinned, Quotas: r.cfg.Guard.Limits, Logger: r.log})
	if err := r.groups.Start(bg); err != nil {
		return fmt.Errorf("router: groups: %w", err)
	}
	r.life.Defer(r.groups.Stop)
	r.sessions = session.NewRevisions(r.groups.Store, r.store.Sessions, r.cfg.SessionCache)
	if err := r.sessions.Start(bg); err != nil {
		r.log.Warn("router: sessions not watched; every batch reads its session", "err", err)
	}
	r.life.Defer(r.sessions.Stop)
	if r.skills, err = startSkills(bg, r.cfg.Skills, r.cfg.SkillViewer, r.store, r.groups, r.log); err != nil {
		return err
	}
	r.life.Defer(r.skills.cat.Drain)
	// Presence goes last in the unwind: gone only once the work is.
	r.presence = presence.New(r.store.Routers, presence.Config{ID: r.cfg.ID, Heartbeat: r.cfg.Store.Heartbeat, Logger: r.log})
	if err := r.presence.Start(bg); err != nil {
		return fmt.Errorf("router: presence: %w", err)
	}
	r.life.Defer(r.presence.Stop)
	r.parked = parked.New(r.store, r.subj, parked.Config{TTL: r.cfg.ParkTTL, Owner: r.cfg.ID, Source: r.source, Logger: r.log, MaxPayload: r.nc.MaxPayload,
		Publish: r.nc.PublishMsg, Presence: r.presence})
	if err := r.parked.Start(bg); err != nil {
		return fmt.Errorf("router: parked calls: %w", err)
	}
	r.life.Defer(r.parked.Stop)
	for _, g := range r.cfg.Groups {
		if err := r.groups.Put(ctx, g); err != nil {
			return fmt.Errorf("router: config group %s: %w", g.Name, err)
		}
	}
	if r.guards, err = newGuardrails(ctx, js, r.nc, r.subj, r.cfg, r.log, r.groups, recordedCalls{r.parked, r.store.Ledger}.counted); err != nil {
		return err
	}
	r.m = metrics.NewRouter(r.cfg.Metrics, metrics.RouterSources{LiveWorkers: r.reg.Workers,
		ParkedNow: func() int { return len(r.parked.Read.Parked("", "")) }, Sessions: r.groups.Sessions, Capacity: r.cfg.MaxInflight,
		Bounds: func() []bus.BoundStatus { return r.store.Bounds(bg, r.tasksBound.Load(), r.guards.bounds...) },
		Catalog: []metrics.Catalog{{Kind: "tool", Held: func() int { return len(r.reg.Tools()) }, Bound: store.CountOf(r.store.Tools).Bound},
			{Kind: "group", Held: func() int { return len(r.groups.Groups()) }, Bound: store.CountOf(r.store.Groups).Bound}}})
	refs, err := offload.New(r.nc, r.subj.ObjectStore(bus.ObjectOutputs), offload.Limits{Inline: ledger.RefAbove, Max: 1 << 50})
	if err != nil {
		return err
	}
	r.led = ledger.New(r.store.Ledger, ledger.Config{Router: r.cfg.ID, Logger: r.log, Hits: r.m.DedupeHits.Inc, Lease: r.cfg.Lease,
		Health: r.store.Health, Landing: r.life.Landing, Outputs: refs, Stored: offload.NewStore(r.nc, r.subj.ObjectStore(bus.ObjectOutputs))})
	// Stored only when the payload limit forces it; never refused.
	if r.outputs, err = offload.New(r.nc, r.subj.ObjectStore(bus.ObjectOutputs), offload.Limits{Inline: int(r.nc.MaxPayload()), Max: 1 << 50}); err != nil {
		return err
	}
	st := offload.NewStore(r.nc, r.subj.ObjectStore(bus.ObjectOutputs))
	st.Ceiling = r.cfg.Limits.MaxOutput
	r.stored = &outputs{wire: r.wire, st: st, srv: offload.NewServer(st, offload.Window(r.nc.MaxPayload())),
		room: semaphore.NewWeighted(windowsHeld), maxWaiting: int64(max(r.cfg.MaxInflight/8, 1))}
	r.events, err = newRouterEvents(r.wire, r.store.Health)
	return err
}

// bind builds the handler types over the subsystems, and the routes.
func (r *Router) bind() {
	progress := &progressRelay{wire: r.wire, now: time.Now}
	execReplies := replies.New(r.nc, replies.Options{EndOnClose: true, Unguessable: true, Progress: progress.relay, ProgressDropped: progress.dropped})
	r.tools.exec = chain(requestReply{replies: execReplies, execs: &execSubjects{}, subj: r.subj, source: r.source, workers: r.reg, groups: r.groups, outputs: r.stored, watch: &r.execs},
		once(r.led.Once))
	r.pipe = r.newPipeline()
	r.notices = newNotices(r.cfg.Notices, r.events)
	r.tools.durable = workQueue{wire: r.wire, js: r.store.JS, led: r.led, progress: execReplies}
	r.answers = &answers{wire: r.wire, parked: parkedPort(r.parked), reg: r.reg, groups: r.groups,
		secured: r.cfg.Identities != nil, sealAnswer: r.stored.sealAnswer, fit: r.outputs.Fit, events: r.events,
		runTool: r.tools.runTool, confirming: &r.confirming, audit: r.guards.audit, cancelling: r.cancelEnds.names}
	r.conts = &continuations{wire: r.wire, life: r.life, parked: r.parked, led: r.led,
		answers: r.answers, pipe: r.pipe, batches: &r.batches}
	r.answers.resume = r.conts.resume
	reg := &registrar{wire: r.wire, groups: r.groups, reg: r.reg, refuseShared: r.cfg.RefuseSharedRegister, rate: registry.NewRate(r.cfg.RegisterRate)}
	admin := &adminVerbs{wire: r.wire, id: r.cfg.ID, reg: r.reg, groups: r.groups, parked: r.parked,
		store: r.store, tasksBound: &r.tasksBound, guardBounds: r.guards.bounds, skills: r.skills.cat, limits: r.guards.limits}
	tools := &toolsLister{wire: r.wire, reg: r.reg, groups: r.groups, skills: r.skills, ids: r.cfg.Identities,
		audit: r.guards.audit, readOut: r.cfg.Guard.ReadOutput}
	cancels := &canceller{wire: r.wire, running: r.batches.running, confirming: &r.confirming, parked: r.conts.cancelParked,
		knows: r.parked.Read.Knows, ends: &r.cancelEnds, work: r.life.Go}
	results := &durableResults{wire: r.wire, reg: r.reg, led: r.led, seal: r.stored.sealOutput}
	replay := &replays{wire: r.wire, events: r.store.Events, parked: r.store.ParkedStream, pulls: make(chan struct{}, maxHandoffPulls), work: r.life.Go}
	if ids := r.cfg.Identities; ids != nil {
		replay.bound = func(s string) bool { return !sharedAgents(ids, s) }
	}
	q := r.subj.RouterQueue()
	r.handlers = []route{
		{r.subj.All(kindCall), q, nil, r.onBatch(kindCall)},
		{r.subj.All(kindAsk), q, nil, r.onBatch(kindAsk)},
		{r.subj.All("tools"), q, nil, func(m *nats.Msg, _ time.Time) { tools.onTools(m) }},
		{r.subj.Workers.SharedRegister(), q, reg.onRegister, nil},
		{r.subj.All("register"), q, reg.onRegister, nil}, // P.register.<tool>, P.register.group.<group>
		{r.subj.All("admin"), q, admin.onAdmin, nil},
		{r.subj.All("answer"), q, r.answers.onAnswer, nil},
		{r.subj.All("approve"), q, r.answers.onApprove, nil},
		{r.subj.All("replay"), q, replay.onReplay, nil},
		{r.subj.All("handoff"), q, replay.onHandoff, nil},
		{r.subj.All("result"), q, results.onResult, nil},
		{r.subj.All("cancel"), "", cancels.onCancel, nil},
		{r.subj.All("outputs"), q, r.stored.onOutputs, nil},
	}
}

// loops starts the background loops.
func (r *Router) loops() {
	interval := min(max(cmp.Or(r.cfg.ParkTTL, parked.DefaultTTL)/10, 10*time.Millisecond), time.Second)
	hb := r.cfg.Store.Heartbeat
	r.life.Loop(func(ctx context.Context) { life.Every(ctx, interval, r.conts.sweep) })
	r.life.Loop(func(ctx context.Context) {
		life.Every(ctx, hb, func(now time.Time) { r.execs.watchWorkers(now, hb, r.reg, r.log) })
	})
	r.life.Loop(func(ctx context.Context) {
		life.Every(ctx, hb, func(now time.Time) { r.conts.renewLeases(now); r.conts.takeOver(now, r.cfg.Lease) })
	})
	// Presence beats in a loop of its own, not behind slow renewals.
	r.life.Loop(func(ctx context.Context) {
		life.Every(ctx, hb, func(time.Time) {
			if err := r.presence.Beat(ctx); err != nil {
				r.log.Warn("router: presence not renewed", "err", err)
			}
		})
	})
	r.life.Loop(func(ctx context.Context) {
		dropped := map[*nats.Subscription]int{}
		life.Every(ctx, hb, func(time.Time) { r.adm.watchDropped(r.subs.all(), dropped) })
	})
}

// dispatch runs s's handler on m in its own goroutine, bounded by
// MaxInflight (admission).
func (r *Router) dispatch(s route, m *nats.Msg) {
	if !r.replyAllowed(m.Subject, m.Reply) {
		// Answering there would act for the sender (docs/security.md).
		r.m.Rejected.WithLabelValues("bad_reply").Inc()
		r.log.Debug("router: reply subject refused; answering nothing", "subject", m.Subject, "reply", m.Reply)
		m.Reply = ""
	}
	if !r.life.Enter() {
		if r.isRegistration(m.Subject) {
			// A draining router still records heartbeats, on the callback.
			s.h(m)
		}
		return
	}
	if r.isRegistration(m.Subject) {
		// Slots of their own (docs/security.md): beats waiting behind
		// agents' calls made live workers look vanished.
		r.beats <- struct{}{}
		r.handle(r.beats, handling{h: s.h, m: m})
		return
	}
	if s.timed == nil {
		r.sem <- struct{}{} // back-pressure
		r.handle(r.sem, handling{h: s.h, m: m})
		return
	}
	// A batch or tools query: counted against its session's share, its
	// running notices' clock started now (docs/protocol.md 3.2.1, 1.26).
	t := handling{timed: s.timed, m: m, since: time.Now()}
	var refused string
	if t.sh, refused = r.shares.take(sessionOf(m.Subject)); refused != "" {
		r.adm.overShare(m, refused)
		return
	}
	select {
	case r.sem <- struct{}{}:
		r.handle(r.sem, t)
	default:
		r.adm.wait(m, func() { r.handle(r.sem, t) }, func() { r.shares.give(t.sh) })
	}
}

// maxBeats bounds the registrations and heartbeats (one per tool each
// beat, docs/protocol.md 7.1) a router handles at once, apart from MaxInflight.
const maxBeats = 256

// isRegistration reports whether subject is P.register or under it.
func (r *wire) isRegistration(subject string) bool {
	shared := r.subj.Workers.SharedRegister()
	rest, ok := strings.CutPrefix(subject, shared)
	return ok && (rest == "" || rest[0] == '.')
}

// replyAllowed reports whether the router, with its wide permissions, may
// answer on the sender's reply: never "$...", P.> or its own inboxes, but
// for a registration's (docs/security.md).
func (r *wire) replyAllowed(subject, reply string) bool {
	inbox := r.nc.Opts.InboxPrefix
	if r.isRegistration(subject) {
		inbox = ""
	}
	return replyAllowedFor(reply, r.subj.Prefix, inbox)
}

// replyAllowedFor is replyAllowed for a prefix and an inbox prefix.
func replyAllowedFor(reply, prefix, inboxPrefix string) bool {
	if reply == "" {
		return true
	}
	if strings.HasPrefix(reply, "$") || strings.HasPrefix(reply, prefix+".") {
		return false
	}
	if p := strings.TrimSuffix(inboxPrefix, "."); p != "" && p != "_INBOX" && strings.HasPrefix(reply, p+".") {
		return false
	}
	return true
}

// handle runs what h says in the slot taken of sem, pooled (no closure).
func (r *Router) handle(sem chan struct{}, h handling) {
	r.m.Inflight.Inc()
	t, _ := handlings.Get().(*handling)
	if t == nil {
		t = new(handling)
	}
	*t = h
	t.r, t.sem = r, sem
	r.pool.Run(t)
}

// handling is one message handle runs on the pool: h(m), or timed(m, since).
type handling struct {
	r     *Router
	sem   chan struct{}
	h     func(*nats.Msg)
	timed func(*nats.Msg, time.Time)
	m     *nats.Msg
	since time.Time
	sh    share
}

var handlings sync.Pool

func (t *handling) Run() {
	r, sem, h, timed, m, since, sh := t.r, t.sem, t.h, t.timed, t.m, t.since, t.sh
	*t = handling{}
	handlings.Put(t)
	defer func() {
		r.m.Inflight.Dec()
		if p := recover(); p != nil {
			r.log.Error("router: handler panicked", "subject", m.Subject, "panic", p, "stack", string(debug.Stack()))
			_ = bus.RespondError(r.nc, m, r.source, bus.Errorf(bus.CodeInternal, "router failed on this message"))
		}
		<-sem
		r.shares.give(sh)
		r.life.Leave()
	}()
	if timed != nil {
		timed(m, since)
	} else {
		h(m)
	}
}

// Stop is Drain with a deadline of at most StopTimeout.
func (r *Router) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, StopTimeout)
	defer cancel()
	return r.Drain(ctx)
}

// Closed is closed once Drain (or Stop) has returned.
func (r *Router) Closed() <-chan struct{} { return r.life.Closed() }

// Drain stops taking messages, lets the work in flight finish until ctx
// ends, cancels the rest (a batch cut off gets no reply; the ledger tells a
// re-send) and stops its caches. Its error wraps ctx's and counts the calls
// cut off. Safe to call twice and concurrently.
func (r *Router) Drain(ctx context.Context) error {
	r.once.Do(func() {
		if r.notices != nil {
			r.notices.stop() // a draining router's batches get no more (protocol 3.2.1)
		}
		register := r.subs.drain(ctx, r.nc, r.isRegistration)
		// Registrations stay served until the work is done (the watchdog).
		r.life.Defer(func(ctx context.Context) error {
			for _, s := range register {
				_ = s.Drain()
			}
			for _, s := range register {
				waitClosed(ctx, s)
			}
			return nil
		})
		if err := r.life.Drain(ctx); err != nil {
			r.log.Warn("router: drain deadline passed; calls cut off (a re-sent batch recovers them through the ledger)", "calls", r.cutCalls)
			r.stopErr = fmt.Errorf("router: drain: %d calls cut off: %w", r.cutCalls, ctx.Err())
		}
	})
	<-r.life.Closed()
	return r.stopErr
}

type subscriptions struct {
	mu   sync.Mutex
	list []*nats.Subscription
	svc  micro.Service
}

func (x *subscriptions) all() []*nats.Subscription {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.list
}

// drain stops the service and drains every subscription keep does not keep.
func (x *subscriptions) drain(ctx context.Context, nc *nats.Conn, keep func(subject string) bool) (kept []*nats.Subscription) {
	x.mu.Lock()
	subs, svc := x.list, x.svc
	x.mu.Unlock()
	if svc != nil {
		_ = svc.Stop()
	}
	for _, s := range subs {
		if keep(s.Subject) {
			kept = append(kept, s)
			continue
		}
		_ = s.Drain()
	}
	if len(subs) > 0 {
		_ = bus.Flush(ctx, nc)
	}
	for _, s := range subs {
		if !slices.Contains(kept, s) {
			waitClosed(ctx, s)
		}
	}
	return kept
}

func waitClosed(ctx context.Context, s *nats.Subscription) {
	ch := s.StatusChanged(nats.SubscriptionClosed)
	if !s.IsValid() {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
}

// landBudget bounds the retries of a write that ends a call (a result, an
// answer, a continuation) through a leader election or a restart.
const landBudget = 2 * time.Minute

// landingFunc gives the context of a write that must land (life.Landing);
// nil gives an untracked one: parent's values, bounded by landBudget.
type landingFunc func() (context.Context, context.CancelFunc)

func (f landingFunc) start(parent context.Context) (context.Context, context.CancelFunc) {
	if f == nil {
		return context.WithTimeout(context.WithoutCancel(parent), landBudget)
	}
	return f()
}

// wire is what every handler shares: connection, subjects, decode, answer.
type wire struct {
	nc     *nats.Conn
	subj   bus.Subjects
	source string
	log    *slog.Logger
	m      *metrics.Router // set in Start, before the first subscription
	// base is the router's life's context; landing a must-land write's.
	base    context.Context
	landing func() (context.Context, context.CancelFunc)
}

// reject answers m with an io.toolbus.error.
func (w *wire) reject(m *nats.Msg, err error) {
	var be *bus.Error
	if !errors.As(err, &be) {
		be = bus.Errorf(bus.CodeInternal, "%v", err)
	}
	w.m.Rejected.WithLabelValues(be.Code).Inc()
	if be.Code == bus.CodeInternal {
		w.log.Error("router: internal error", "subject", m.Subject, "err", err)
	} else {
		w.log.Debug("router: rejected", "subject", m.Subject, "code", be.Code, "msg", be.Message)
	}
	if err := bus.RespondError(w.nc, m, w.source, be); err != nil {
		w.log.Warn("router: error reply failed", "err", err)
	}
}

// respond answers m with an event of type typ (what: for the log).
func (w *wire) respond(m *nats.Msg, typ string, data any, what string) {
	err := bus.Respond(w.nc, m, w.source, typ, data)
	if errors.Is(err, nats.ErrMaxPayload) {
		// No message can carry it: the requester hears why (docs/security.md).
		w.log.Warn("router: "+what+" over the max payload", "subject", m.Subject)
		err = bus.RespondError(w.nc, m, w.source, bus.Errorf(bus.CodeLimitExceeded,
			"the reply (%s) is larger than the server's max payload of %d bytes; ask for less (one session, fewer ids)", typ, w.nc.MaxPayload()))
	}
	if err != nil {
		w.log.Warn("router: "+what+" failed", "err", err)
	}
}

// serve decodes m's event, runs fn and answers with its reply or error.
func (w *wire) serve(m *nats.Msg, kind, typ, reply string, fn func(e *bus.Event) (any, error)) {
	e, err := w.decode(m, kind, typ)
	var out any
	if err == nil {
		out, err = fn(e)
	}
	w.answer(m, reply, out, err)
}

// answer replies to m with out as an event of type typ, or with err.
func (w *wire) answer(m *nats.Msg, typ string, out any, err error) {
	if err != nil {
		w.reject(m, err)
		return
	}
	w.respond(m, typ, out, typ+" reply")
}

// decodeCall reads m's event of type typ about one call on P.<kind>.<tool>
// (an answer, a durable result); what names it in an error.
func (w *wire) decodeCall(m *nats.Msg, kind, typ, what string) (string, *bus.Event, error) {
	tool, ok := w.subj.Token(m.Subject, kind)
	if !ok || kind == "result" && !bus.ValidName(tool) {
		return "", nil, bus.Errorf(bus.CodeBadEvent, "subject %q does not name a tool", m.Subject)
	}
	e, err := w.decode(m, "", typ)
	if err == nil && (!bus.ValidID(e.SessionID) || !bus.ValidID(e.ReplyID) || !bus.ValidID(e.ToolCallID)) {
		err = bus.Errorf(bus.CodeBadEvent, "%s needs valid sessionid, replyid and toolcallid attributes", what)
	}
	return tool, e, err
}

// decode reads m's event, checks its type ("": any), and checks that its
// sessionid matches the subject token of kind (the token becomes the
// session id when the attribute is absent).
func (w *wire) decode(m *nats.Msg, kind, typ string) (*bus.Event, error) {
	e, err := bus.Decode(m)
	if err != nil {
		return nil, err
	}
	return w.checked(m, e, kind, typ)
}

// checked is decode's checks of a decoded event e.
func (w *wire) checked(m *nats.Msg, e *bus.Event, kind, typ string) (*bus.Event, error) {
	if typ != "" && e.Type != typ {
		return nil, bus.Errorf(bus.CodeBadEvent, "expected an event of type %s on %s, got %q", typ, m.Subject, e.Type)
	}
	if kind == "" {
		return e, nil
	}
	token, ok := w.subj.Token(m.Subject, kind)
	if !ok || !bus.ValidID(token) {
		return nil, bus.Errorf(bus.CodeBadEvent, "subject %q does not end in a valid session id", m.Subject)
	}
	switch e.SessionID {
	case "":
		e.SessionID = token
	case token:
	default:
		return nil, bus.Errorf(bus.CodeBadEvent, "sessionid %q differs from the subject's session %q", e.SessionID, token)
	}
	return e, nil
}

// Admission (docs/protocol.md 1, busy): a batch or tools query waits for a
// slot at most queueWait behind MaxQueued others, else is answered busy;
// other messages wait in the callback.
const queueWait = 2 * time.Second

// Pending limits of the subscriptions: out of the callbacks' reach, so the
// client's silent slow-consumer drop never comes (watchDropped logs one).
const (
	pendingMsgs  = 1 << 20
	pendingLimit = 256 << 20
)

// admission hands out the router's MaxInflight slots.
type admission struct {
	*wire
	life      *life.Life
	sem       chan struct{}
	maxQueued int

	waiting atomic.Int64
	queued  atomic.Int64 // the bytes of the waiting messages
}

// maxQueuedBytes bounds the bytes of the messages waiting for a slot, as
// pendingLimit bounds those a subscription holds: batches without a reply
// wait with no deadline, and MaxQueued of them at max_payload held
// gigabytes for as long as the slots stayed taken (docs/security.md).
var maxQueuedBytes int64 = pendingLimit

// wait queues m for a slot and runs run once it has one; else answers
// busy, calls undone and matches the caller's life Enter. One without a
// reply subject (nothing to answer busy) waits as long as it takes, behind
// at most maxQueued others and maxQueuedBytes; past them it is dropped,
// counted busy (waiting on the subscription's goroutine, it hid the
// batches behind it).
func (a *admission) wait(m *nats.Msg, run, undone func()) {
	n := int64(m.Size()) // as read, headers included
	leave := func() {
		a.waiting.Add(-1)
		a.queued.Add(-n)
	}
	if bytes := a.queued.Add(n); a.waiting.Add(1) > int64(a.maxQueued) || bytes > maxQueuedBytes {
		leave()
		undone()
		a.refuse(m)
		return
	}
	go func() {
		var expired <-chan time.Time
		if m.Reply != "" {
			t := time.NewTimer(queueWait)
			defer t.Stop()
			expired = t.C
		}
		select {
		case a.sem <- struct{}{}:
			leave()
			if m.Reply != "" && a.life.Draining() { // another router of the queue group takes the re-send
				<-a.sem
				undone()
				a.refuse(m)
				return
			}
			run()
		case <-expired:
			leave()
			undone()
			a.refuse(m)
		}
	}()
}

// refuse answers m busy (docs/protocol.md 1) and ends its work.
func (a *admission) refuse(m *nats.Msg) {
	a.m.Rejected.WithLabelValues(bus.CodeBusy).Inc()
	a.busyReply(m, bus.BusyText)
	a.life.Leave()
}

// busyReply answers m busy, saying why.
func (a *admission) busyReply(m *nats.Msg, why string) {
	if err := bus.RespondError(a.nc, m, a.source, &bus.Error{Code: bus.CodeBusy, Message: why}); err != nil {
		a.log.Warn("router: busy reply failed", "err", err)
	}
}

// overShare answers m busy as its session holds its share of the slots
// (shares.go); one without a reply subject is dropped and counted.
func (a *admission) overShare(m *nats.Msg, why string) {
	a.m.Rejected.WithLabelValues(shareRefused).Inc()
	if m.Reply == "" {
		// Debug: a flood must not flood the log (rejected_total counts them).
		a.log.Debug("router: a batch without a reply subject dropped: its session holds its share of the slots", "subject", m.Subject, "why", why)
	} else {
		a.busyReply(m, why)
	}
	a.life.Leave()
}

// shareRefused is rejected_total's label past a session's share.
const shareRefused = "session_share"

// watchDropped logs and counts messages the NATS client dropped.
func (a *admission) watchDropped(subs []*nats.Subscription, last map[*nats.Subscription]int) {
	for _, s := range subs {
		n, err := s.Dropped()
		if err != nil || n <= last[s] {
			continue
		}
		a.log.Error("router: the NATS client dropped messages as a slow consumer; their senders got no reply", "subject", s.Subject, "dropped", n-last[s])
		a.m.Rejected.WithLabelValues("dropped").Add(float64(n - last[s]))
		last[s] = n
	}
}
