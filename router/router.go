// Package router is the stateless router of toolbus: it receives batches of
// tool calls, checks them, resolves and validates each call, fans the calls
// out to worker queue groups in the order docs/protocol.md 5.2 prescribes, and
// reports results, events and the batch reply. Every piece of shared state
// lives in JetStream, read on the hot path from watch-fed caches, so any
// number of routers serve one deployment interchangeably.
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/external"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/pool"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/registry"
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
	// MaxInflight bounds the messages the router handles at once; zero
	// means 4096. Beyond it a batch or tools query with a reply subject
	// waits for a slot (at most MaxQueued of them, each at most QueueWait)
	// and is otherwise answered busy at once; other messages wait in the
	// subscription (admit.go).
	MaxInflight int
	// MaxQueued bounds the batches and queries waiting for a slot; zero
	// means MaxInflight.
	MaxQueued int
	// QueueWait bounds one such wait; zero means DefaultQueueWait.
	QueueWait time.Duration
	// Groups are group definitions stored at start (from the config file).
	Groups []bus.Group
	// DefaultMode is the permission mode of new sessions; "" means "default".
	DefaultMode string
	// DefaultRules and DefaultWorkDirs seed new sessions' permission context.
	DefaultRules    []bus.Rule
	DefaultWorkDirs []string
	// Skills are local skill sources (docs/protocol.md 10), lowest priority
	// first: each is one skill folder or a folder of skill folders. The
	// P_skills object store is always a source, above them.
	Skills []string
	// Limits bound what one batch may ask; zero fields take the defaults.
	Limits Limits
	// SessionCache bounds the sessions the router keeps decoded in memory;
	// zero means groups.DefaultSessionCache. Sessions are read from KV
	// once per batch run whatever it holds.
	SessionCache int
	// ParkTTL is how long a call waits for an answer before it expires with
	// a timeout result; zero means 24 hours.
	ParkTTL time.Duration
	// Identities, when set, binds sessions to users by their credentials
	// (docs/security.md): a batch's user comes from them, not the claim,
	// and confirmations go to P.approve.<tool> only. nil runs the router
	// open, as before.
	Identities Identities
	// Lease is how long a router's claim on work (a running ledger claim,
	// a parked batch it runs, an answer it settles) lives without being
	// renewed; renewals come every Store.Heartbeat. Past it, another router
	// (a re-sent batch) takes the work over. Zero means three heartbeats.
	Lease time.Duration
	// Logger receives the router's logs; nil discards.
	Logger *slog.Logger
	// Metrics is where the router's Prometheus metrics are registered; nil
	// keeps them private.
	Metrics prometheus.Registerer
}

// Limits bound the input a router takes. A batch past one is refused with
// bad_request and nothing runs; a call that would park past MaxParked gets
// a limit_exceeded result instead.
type Limits struct {
	// MaxCalls is the most calls one batch may hold; zero means bus.MaxCalls (64).
	MaxCalls int
	// MaxInputBytes is the most bytes one call's input may take; zero means
	// DefaultMaxInputBytes.
	MaxInputBytes int
	// MaxParked is the most calls one session may have parked at once;
	// zero means DefaultMaxParked.
	MaxParked int
}

// Defaults of Limits.
const (
	DefaultMaxInputBytes = 1 << 20
	DefaultMaxParked     = 1000
)

func (l *Limits) defaults() {
	if l.MaxCalls <= 0 {
		l.MaxCalls = bus.MaxCalls
	}
	if l.MaxInputBytes <= 0 {
		l.MaxInputBytes = DefaultMaxInputBytes
	}
	if l.MaxParked <= 0 {
		l.MaxParked = DefaultMaxParked
	}
}

// Router serves the router subjects of one deployment.
type Router struct {
	nc     *nats.Conn
	cfg    Config
	subj   bus.Subjects
	source string
	log    *slog.Logger
	sem    chan struct{}
	adm    admission
	pool   *pool.Pool

	store  *store.Store
	reg    *registry.Registry
	groups *groups.Store
	// sessions decides when a batch's session is read from KV (sessions.go)
	sessions *sessionCache
	parked   *external.Store
	led      *ledger
	events   *eventSink
	pipe     *pipeline // the batch pipeline over its ports (ports.go)
	skills   *routerSkills
	m        *metrics.Router

	replays replayLimit // replay consumers made lately, per session (replay.go)

	mu         sync.Mutex
	subs       []*nats.Subscription
	svc        micro.Service
	batches    map[string]*batch  // sessionid/replyid → running batch
	execs      execWatches        // exec requests in flight (exec.go)
	outputs    *offload.Offloader // stores outputs that would take a batch's messages past the payload limit
	stored     *outputs           // seals results' stored outputs and serves P.outputs.<session> (outputs.go)
	exec       executor           // runs tool calls on workers
	durable    executor           // runs durable tools' calls through their work queues
	confirming confirmed          // confirmed calls running outside any batch
	closed     bool
	work       sync.WaitGroup
	bg         sync.WaitGroup // background loops
	stop       context.CancelFunc
	once       sync.Once
	stopErr    error

	// base is the parent of every handler's and batch's context, made in
	// Start; cut cancels it, with errDrainDeadline when a drain's deadline
	// passes with work in flight.
	base     context.Context
	cut      context.CancelCauseFunc
	closedCh chan struct{} // closed once Drain has returned
}

// errDrainDeadline is the cause of the contexts cut off by a drain's
// deadline.
var errDrainDeadline = errors.New("router: cut off by the drain deadline")

// errStopped is the cause of the base context once the router stopped.
var errStopped = errors.New("router: stopped")

// StopTimeout is the drain deadline of Stop.
const StopTimeout = 5 * time.Second

// drainCleanup bounds the wait, past a drain's deadline, for the handlers
// whose context was just cancelled to return.
const drainCleanup = 2 * time.Second

// New returns a Router on nc. Call Start to serve.
func New(nc *nats.Conn, cfg Config) (*Router, error) {
	if cfg.ID == "" {
		cfg.ID = nuid.Next()
	}
	if !bus.ValidID(cfg.ID) {
		return nil, fmt.Errorf("router: id %q must match ^[A-Za-z0-9_-]{1,128}$", cfg.ID)
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 4096
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = cfg.MaxInflight
	}
	if cfg.QueueWait <= 0 {
		cfg.QueueWait = DefaultQueueWait
	}
	cfg.Limits.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
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
	if cfg.Store.Heartbeat <= 0 {
		cfg.Store.Heartbeat = bus.DefaultHeartbeat
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 3 * cfg.Store.Heartbeat
	}
	r := &Router{nc: nc, cfg: cfg, subj: bus.NewSubjects(cfg.Prefix), source: "toolbus/router/" + cfg.ID,
		log: cfg.Logger.With("router", cfg.ID), sem: make(chan struct{}, cfg.MaxInflight), pool: pool.New(time.Minute),
		batches: map[string]*batch{}, closedCh: make(chan struct{})}
	r.durable = workQueue{r} // r.exec is wired in Start (newRequestReply)
	return r, nil
}

// ID returns the router's instance id.
func (r *Router) ID() string { return r.cfg.ID }

// Start creates the JetStream resources, loads the caches and subscribes.
// It returns once the router serves, or with the first error.
func (r *Router) Start(ctx context.Context) error {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return fmt.Errorf("router: jetstream: %w", err)
	}
	r.store, err = store.Setup(ctx, js, r.subj, r.cfg.Store)
	if err != nil {
		return err
	}
	r.base, r.cut = context.WithCancelCause(context.Background())
	runCtx, cancel := context.WithCancel(r.base)
	r.stop = cancel
	r.reg = registry.New(r.store, registry.Config{Heartbeat: r.cfg.Store.Heartbeat, Logger: r.log})
	if err := r.reg.Start(runCtx); err != nil {
		cancel()
		return fmt.Errorf("router: registry: %w", err)
	}
	r.groups = groups.New(r.store, groups.Config{DefaultMode: r.cfg.DefaultMode,
		DefaultRules: r.cfg.DefaultRules, DefaultWorkDirs: r.cfg.DefaultWorkDirs, IdleTTL: r.cfg.Store.SessionTTL, SessionCache: r.cfg.SessionCache, Logger: r.log})
	if err := r.groups.Start(runCtx); err != nil {
		cancel()
		r.reg.Stop()
		return fmt.Errorf("router: groups: %w", err)
	}
	r.sessions = newSessionCache(r.groups, r.store.Sessions, r.cfg.SessionCache)
	if err := r.sessions.start(runCtx); err != nil {
		r.log.Warn("router: sessions not watched; every batch reads its session", "err", err)
	}
	if err := r.startSkills(runCtx); err != nil {
		cancel()
		r.reg.Stop()
		r.groups.Stop()
		return err
	}
	r.parked = external.New(r.store, r.subj, external.Config{TTL: r.cfg.ParkTTL, Owner: r.cfg.ID, Logger: r.log})
	if err := r.parked.Start(runCtx); err != nil {
		r.Stop()
		return fmt.Errorf("router: parked calls: %w", err)
	}
	for _, g := range r.cfg.Groups {
		if err := r.groups.Put(ctx, g); err != nil {
			r.Stop()
			return fmt.Errorf("router: config group %s: %w", g.Name, err)
		}
	}
	r.m = metrics.NewRouter(r.cfg.Metrics, metrics.RouterSources{LiveWorkers: r.reg.Workers,
		ParkedNow: func() int { return len(r.parked.Parked("", "")) }, Sessions: r.groups.Sessions, Capacity: r.cfg.MaxInflight})
	r.led = newLedger(r.store.Ledger, ledgerConfig{router: r.cfg.ID, log: r.log, hits: r.m.DedupeHits.Inc, lease: r.cfg.Lease, health: r.store.Health})
	// The router stores only what the payload limit forces (fit.go): its
	// inline limit is the limit itself, and it never refuses an output.
	if r.outputs, err = offload.New(r.nc, r.subj.ObjectStore(bus.ObjectOutputs), offload.Limits{Inline: int(r.nc.MaxPayload()), Max: 1 << 50}); err != nil {
		r.Stop()
		return err
	}
	r.stored = newOutputs(r.nc, r.subj.ObjectStore(bus.ObjectOutputs))
	if r.events, err = newEventSink(r.nc, r.log, r.store.Health); err != nil {
		r.Stop()
		return err
	}
	r.exec = r.newRequestReply()
	r.pipe = r.newPipeline()
	q := r.subj.RouterQueue()
	for _, s := range []struct {
		subject, queue string
		h              func(*nats.Msg)
	}{
		{r.subj.All("call"), q, r.onBatch},
		{r.subj.All("tools"), q, r.onTools},
		{r.subj.Register(), q, r.onRegister},
		{r.subj.All("admin"), q, r.onAdmin},
		{r.subj.All("answer"), q, r.onAnswer},
		{r.subj.All("approve"), q, r.onApprove},
		{r.subj.All("replay"), q, r.onReplay},
		{r.subj.All("result"), q, r.onResult},
		{r.subj.All("cancel"), "", r.onCancel},
		{r.subj.All("outputs"), q, r.onOutputs},
	} {
		h, shed := s.h, r.sheds(s.subject)
		sub, err := r.nc.QueueSubscribe(s.subject, s.queue, func(m *nats.Msg) { r.dispatch(h, m, shed) })
		if err != nil {
			r.Stop()
			return fmt.Errorf("router: subscribe %s: %w", s.subject, err)
		}
		_ = sub.SetPendingLimits(pendingMsgs, pendingLimit)
		r.mu.Lock()
		r.subs = append(r.subs, sub)
		r.mu.Unlock()
	}
	// Routers show up in NATS micro discovery (`nats micro ls`, `toolbus status`).
	svc, err := micro.AddService(r.nc, micro.Config{Name: "toolbus-router", Version: "1.0.0",
		Description: "toolbus router " + r.cfg.ID, Metadata: map[string]string{"router": r.cfg.ID, "prefix": r.subj.Prefix}})
	if err != nil {
		r.Stop()
		return fmt.Errorf("router: micro service: %w", err)
	}
	r.mu.Lock()
	r.svc = svc
	r.mu.Unlock()
	if err := bus.Flush(ctx, r.nc); err != nil {
		r.Stop()
		return fmt.Errorf("router: flush: %w", err)
	}
	interval := min(max(r.parked.TTL()/10, 10*time.Millisecond), time.Second)
	r.bg.Add(3)
	hb := r.cfg.Store.Heartbeat
	go func() { defer r.bg.Done(); every(runCtx, interval, r.sweep) }()
	go func() { defer r.bg.Done(); every(runCtx, hb, func(now time.Time) { r.watchWorkers(now, hb) }) }()
	go func() {
		defer r.bg.Done()
		every(runCtx, hb, func(now time.Time) { r.renewLeases(now); r.takeOver(now, r.cfg.Lease) })
	}()
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		dropped := map[*nats.Subscription]int{}
		every(runCtx, hb, func(time.Time) { r.watchDropped(dropped) })
	}()
	r.log.Info("router serving", "prefix", r.subj.Prefix)
	return nil
}

// dispatch runs h in its own goroutine, bounded by MaxInflight; when every
// slot is taken, a sheddable message waits in the bounded queue or is
// answered busy, and any other blocks this subscription's delivery
// (back-pressure; admit.go).
func (r *Router) dispatch(h func(*nats.Msg), m *nats.Msg, shed bool) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		if m.Subject == r.subj.Register() {
			// A draining router still records heartbeats (see drain), on
			// the subscription's own goroutine: the work it waits for is
			// the calls in flight.
			h(m)
		}
		return
	}
	r.work.Add(1)
	r.mu.Unlock()
	if !r.admit(m, shed) {
		r.wait(h, m)
		return
	}
	r.handle(h, m)
}

// handle runs h on m in the slot the caller took.
func (r *Router) handle(h func(*nats.Msg), m *nats.Msg) {
	r.m.Inflight.Inc()
	r.pool.Go(func() {
		defer func() {
			r.m.Inflight.Dec()
			if p := recover(); p != nil {
				r.log.Error("router: handler panicked", "subject", m.Subject, "panic", p)
				_ = bus.RespondError(r.nc, m, r.source, bus.Errorf(bus.CodeInternal, "router failed on this message"))
			}
			<-r.sem
			r.work.Done()
		}()
		h(m)
	})
}

// Stop is Drain with a deadline of StopTimeout.
func (r *Router) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	_ = r.Drain(ctx)
}

// Closed is closed once Drain (or Stop) has returned.
func (r *Router) Closed() <-chan struct{} { return r.closedCh }

// Drain stops the router: it stops taking messages at once (other routers
// of the queue group get them), lets the work in flight finish until ctx
// ends, then cancels what is left and returns after at most a short
// cleanup, then stops its caches. Results already given to agents are
// still recorded in the ledger, bounded as they are. A batch cut off by the
// deadline gets no reply, no further events and no batch.done: a call it
// was running is recorded unknown_outcome in the ledger when it is not
// read-only, so a re-sent batch gets that on any router, and runs again
// when it is. Drain returns nil when nothing was cut off, else an error
// that wraps ctx's and counts the calls cut off (also logged). It is safe
// to call twice and concurrently; later calls wait for the first and
// return its result.
func (r *Router) Drain(ctx context.Context) error {
	r.once.Do(func() {
		r.stopErr = r.drain(ctx)
		close(r.closedCh)
	})
	<-r.closedCh
	return r.stopErr
}

func (r *Router) drain(ctx context.Context) error {
	r.mu.Lock()
	subs, svc := r.subs, r.svc
	r.mu.Unlock()
	if svc != nil {
		_ = svc.Stop()
	}
	// Unsubscribed on the server at once; messages already delivered to
	// this router are still handled. Registrations stay served until the
	// work is done: heartbeats are not new work, and without them (with no
	// other router to record them) the watchdog would take the workers of
	// the calls still running for vanished.
	var register *nats.Subscription
	for _, s := range subs {
		if s.Subject == r.subj.Register() {
			register = s
			continue
		}
		_ = s.Drain()
	}
	if len(subs) > 0 {
		_ = bus.Flush(ctx, r.nc)
	}
	for _, s := range subs {
		if s != register {
			waitClosed(ctx, s)
		}
	}
	defer func() {
		if register != nil {
			_ = register.Drain()
			waitClosed(ctx, register)
		}
	}()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.work.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		n := r.callsInFlight()
		if r.cut != nil {
			r.cut(errDrainDeadline)
		}
		select {
		case <-done:
		case <-time.After(drainCleanup):
		}
		r.log.Warn("router: drain deadline passed; calls cut off (a re-sent batch recovers them through the ledger)", "calls", n)
		err = fmt.Errorf("router: drain: %d calls cut off: %w", n, ctx.Err())
	}
	if r.led != nil {
		// Results already given to agents must be recorded: the
		// ledger's writes get the drain's time, and then a little.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := r.led.stop(lctx); err != nil {
			r.log.Error("router: drain", "err", err)
		}
		cancel()
	}
	if r.cut != nil {
		r.cut(errStopped)
	}
	if r.stop != nil {
		r.stop()
	}
	r.bg.Wait()
	if err == nil {
		r.pool.Close()
	} else {
		go r.pool.Close() // handlers that have not returned yet end on their own
	}
	if r.parked != nil {
		r.parked.Stop()
	}
	if r.reg != nil {
		r.reg.Stop()
	}
	if r.groups != nil {
		r.groups.Stop()
	}
	if r.sessions != nil {
		r.sessions.close()
	}
	if r.skills != nil {
		r.skills.cat.Stop()
	}
	return err
}

// callsInFlight counts the calls this router has started and not finished.
func (r *Router) callsInFlight() int {
	r.mu.Lock()
	bs := make([]*batch, 0, len(r.batches))
	for _, b := range r.batches {
		bs = append(bs, b)
	}
	r.mu.Unlock()
	n := 0
	for _, b := range bs {
		b.mu.Lock()
		for _, c := range b.calls {
			if c.result == nil && c.cancel != nil {
				n++
			}
		}
		b.mu.Unlock()
	}
	return n
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

// reject answers m with an io.toolbus.error.
func (r *Router) reject(m *nats.Msg, err error) {
	var be *bus.Error
	if !errors.As(err, &be) {
		be = bus.Errorf(bus.CodeInternal, "%v", err)
	}
	r.m.Rejected.WithLabelValues(be.Code).Inc()
	if be.Code == bus.CodeInternal {
		r.log.Error("router: internal error", "subject", m.Subject, "err", err)
	} else {
		r.log.Debug("router: rejected", "subject", m.Subject, "code", be.Code, "msg", be.Message)
	}
	if err := bus.RespondError(r.nc, m, r.source, be); err != nil {
		r.log.Warn("router: error reply failed", "err", err)
	}
}

// decode reads m's event, checks its type, and checks that its sessionid
// matches the subject token of kind (the token becomes the session id when
// the attribute is absent).
func (r *Router) decode(m *nats.Msg, kind, typ string) (*bus.Event, error) {
	e, err := bus.Decode(m)
	if err != nil {
		return nil, err
	}
	if e.Type != typ {
		return nil, bus.Errorf(bus.CodeBadEvent, "expected an event of type %s on %s, got %q", typ, m.Subject, e.Type)
	}
	if kind == "" {
		return e, nil
	}
	token, ok := r.subj.Token(m.Subject, kind)
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

func (r *Router) onRegister(m *nats.Msg) {
	e, err := r.decode(m, "", bus.TypeRegister)
	if err != nil {
		r.reject(m, err)
		return
	}
	var reg bus.Register
	if err := e.DataAs(&reg); err != nil {
		r.reject(m, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.base, 10*time.Second)
	defer cancel()
	var groupRejects []bus.Rejection
	if !reg.Leaving {
		for _, g := range reg.Groups {
			if err := r.groups.Put(ctx, g); err != nil {
				var be *bus.Error
				if !errors.As(err, &be) {
					r.reject(m, err)
					return
				}
				groupRejects = append(groupRejects, bus.Rejection{Name: g.Name, Reason: be.Message})
			}
		}
	}
	ack, err := r.reg.Register(ctx, reg)
	if err != nil {
		r.reject(m, err)
		return
	}
	ack.Rejected = append(ack.Rejected, groupRejects...)
	if err := bus.Respond(r.nc, m, r.source, bus.TypeRegisterAck, ack); err != nil {
		r.log.Warn("router: register ack failed", "err", err)
	}
}

func (r *Router) onAdmin(m *nats.Msg) {
	verb, _ := strings.CutPrefix(m.Subject, r.subj.Prefix+".admin.")
	e, err := r.decode(m, "", bus.TypeAdmin)
	if err != nil {
		r.reject(m, err)
		return
	}
	if e.SessionID != "" && !bus.ValidID(e.SessionID) {
		r.reject(m, bus.Errorf(bus.CodeBadEvent, "sessionid %q is not valid", e.SessionID))
		return
	}
	ctx, cancel := context.WithTimeout(r.base, 10*time.Second)
	defer cancel()
	out, err := r.admin(ctx, verb, e)
	if err != nil {
		r.reject(m, err)
		return
	}
	if err := bus.Respond(r.nc, m, r.source, bus.TypeAdminReply, out); err != nil {
		r.log.Warn("router: admin reply failed", "err", err)
	}
}

// admin runs one verb of docs/protocol.md section 9.
func (r *Router) admin(ctx context.Context, verb string, e *bus.Event) (any, error) {
	switch verb {
	case "tools.delete":
		var d struct {
			Name string `json:"name"`
		}
		if err := e.DataAs(&d); err != nil || !bus.ValidName(d.Name) {
			return nil, bus.Errorf(bus.CodeBadRequest, "tools.delete wants {\"name\": <tool name>}")
		}
		if err := r.reg.Delete(ctx, d.Name); err != nil {
			return nil, err
		}
		return map[string]any{"deleted": d.Name}, nil
	}
	return r.adminGroups(ctx, verb, e)
}

// landBudget bounds the writes that end a call (a recorded result, an
// answer, a continuation): they are retried until they land, through a
// leader election or a node's restart, for at most this long.
const landBudget = 2 * time.Minute

// landing returns the context of a write that ends a call.
func landing() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), landBudget)
}
