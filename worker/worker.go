// Package worker is the runtime that serves tools on the bus: typed tools
// whose schema is derived from their input type, raw JSON tools for bridged
// sources, per-tool queue groups so copies share the load, a concurrency
// limit, progress events, cancellation through the context, heartbeats that
// keep the tools listed, and a drain on shutdown.
//
//	w, _ := worker.New(nc, worker.Config{})
//	worker.Register(w, bus.ToolDef{Name: "echo", Description: "Echo the text."},
//		func(ctx context.Context, c *worker.Call, in EchoIn) (string, error) { return in.Text, nil })
//	_ = w.Start(ctx)
//	defer w.Stop() // or w.Drain(ctx) with your own deadline
package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/internal/pool"
	"github.com/toolbus/toolbus/natsconn"
)

// Config configures a Worker.
type Config struct {
	// ID is the worker's instance id, a valid identifier; "" means a random one.
	ID string
	// Prefix is the deployment's subject prefix; "" means bus.DefaultPrefix.
	Prefix string
	// Heartbeat is how often the worker registers again; zero means
	// bus.DefaultHeartbeat. Routers forget a worker after three missed beats.
	Heartbeat time.Duration
	// MaxConcurrent bounds the calls this worker runs at once, across all its
	// tools; zero means DefaultMaxConcurrent. When every slot is busy, further
	// requests wait for one (at most waitLimit of them; more are answered busy).
	MaxConcurrent int
	// MaxWaitingBytes bounds the bytes (data and headers) of the requests
	// waiting for a slot; past it, as past their count, a request is
	// answered busy. Zero means DefaultMaxWaitingBytes.
	MaxWaitingBytes int64
	// Groups are group definitions sent with every registration.
	Groups []bus.Group
	// Logger receives the worker's logs; nil discards.
	Logger *slog.Logger
	// Observer is told about waiting, running and finished calls (for
	// metrics: metrics.NewWorker); nil means nobody is told.
	Observer Observer
	// Version is reported by NATS micro discovery; "" means "1.0.0".
	Version string
	// InlineLimit is the encoded size of an output above which its largest
	// blocks are stored in the outputs object store as references
	// (docs/protocol.md 5.9); zero means offload.DefaultInlineLimit (1 MiB),
	// capped by the payload limit less 64 KiB.
	InlineLimit int
	// MaxOutput is the encoded output size above which a result is refused
	// as a tool error; zero means offload.DefaultMaxOutput (64 MiB).
	MaxOutput int64
}

// DefaultMaxConcurrent is Config.MaxConcurrent's default.
const DefaultMaxConcurrent = 64

// DefaultMaxWaitingBytes is Config.MaxWaitingBytes's default: without it,
// 1,024 waiting requests of the router's 1 MiB inputs held a gigabyte.
const DefaultMaxWaitingBytes = 64 << 20

// Handler runs one call of a raw tool. Returning an error gives an error
// result whose text is the error's; returning a result passes it through.
type Handler func(ctx context.Context, c *Call) (*bus.ExecResult, error)

type tool struct {
	def bus.ToolDef
	h   Handler

	requests, calls, errors, nanos atomic.Int64 // for micro stats (discovery.go)
	// accepted: a router accepted the registration, so it is served;
	// decided is closed at the first acknowledgement that names it.
	accepted   atomic.Bool
	decided    chan struct{}
	decideOnce sync.Once
}

// decide closes t.decided once.
func (t *tool) decide() { t.decideOnce.Do(func() { close(t.decided) }) }

// toolStats is the data of a tool endpoint in `nats micro stats`.
type toolStats struct {
	Calls        int64   `json:"calls"`
	Errors       int64   `json:"errors"`
	AverageRunMS float64 `json:"average_run_ms"`
}

// Worker serves tools. It is safe for concurrent use; tools must be
// registered before Start.
type Worker struct {
	nc     *nats.Conn
	owned  bool // dialed by Dial: Drain closes it
	cfg    Config
	subj   bus.Subjects
	source string
	sem    chan struct{}
	pool   *pool.Pool // runs durable calls (durable.go)
	log    *slog.Logger
	off    *offload.Offloader

	calls *callTable // calls.go; reg: serve.go; exec: exec.go (docs/worker.md, "Shape")
	reg   *registrar
	exec  *executor

	mu        sync.Mutex
	tools     []*tool
	started   bool
	cancelSub *nats.Subscription
	serve     *serving
	obs       Observer

	loops sync.WaitGroup // heartbeat and work-queue loops
	// stopLoops ends the loops and waits for them; a heartbeat in flight is
	// waited for (a leave follows it, 7.1) unless cut.
	stopLoops func(cut bool)
	stopOnce  sync.Once
	stopErr   error

	waiting, busyN atomic.Int64 // requests waiting for a slot (at most maxWaiting), answered busy
	waitingBytes   atomic.Int64 // their sizes (at most cfg.MaxWaitingBytes)
	maxWaiting     int

	life   *life.Life      // the calls accepted and not yet answered
	base   context.Context // life's: every call's parent, cancelled with errDrained past a drain's deadline
	cutN   int             // calls running when the drain's deadline passed
	closed chan struct{}   // closed when Drain has returned
}

// ErrStarted is returned when tools are added after Start.
var ErrStarted = errors.New("worker: already started")

// New returns a Worker on nc.
func New(nc *nats.Conn, cfg Config) (*Worker, error) {
	cfg.ID = cmp.Or(cfg.ID, nuid.Next())
	if !bus.ValidID(cfg.ID) {
		return nil, fmt.Errorf("worker: id %q must match ^[A-Za-z0-9_-]{1,128}$", cfg.ID)
	}
	cfg.Heartbeat = cmp.Or(max(cfg.Heartbeat, 0), bus.DefaultHeartbeat)
	cfg.MaxConcurrent = cmp.Or(max(cfg.MaxConcurrent, 0), DefaultMaxConcurrent)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Version = cmp.Or(cfg.Version, "1.0.0")
	cfg.Observer = cmp.Or[Observer](cfg.Observer, nopObserver{})
	if cfg.InlineLimit < 0 || cfg.MaxOutput < 0 || cfg.MaxWaitingBytes < 0 {
		return nil, fmt.Errorf("worker: InlineLimit, MaxOutput and MaxWaitingBytes must not be negative")
	}
	cfg.MaxWaitingBytes = cmp.Or(cfg.MaxWaitingBytes, DefaultMaxWaitingBytes)
	subj := bus.NewSubjects(cfg.Prefix)
	off, err := offload.New(nc, subj.ObjectStore(bus.ObjectOutputs), offload.Limits{Inline: cfg.InlineLimit, Max: cfg.MaxOutput})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	var w *Worker
	lf := life.New(life.Config{Cleanup: drainCleanup, Logger: cfg.Logger, OnDeadline: func() {
		n := w.calls.queuedLen()
		w.mu.Lock()
		w.cutN = n
		w.mu.Unlock()
	}})
	w = &Worker{off: off, life: lf, base: lf.Context(), closed: make(chan struct{}), nc: nc, cfg: cfg, subj: subj, source: "toolbus/worker/" + cfg.ID,
		sem: make(chan struct{}, cfg.MaxConcurrent), pool: pool.New(time.Minute), log: cfg.Logger.With("worker", cfg.ID),
		calls: newCallTable(subj), obs: cfg.Observer}
	w.calls.linger = 3 * cfg.Heartbeat // a router's patience for a call nobody lists (docs/protocol.md 5.7)
	w.maxWaiting = waitLimit(cfg.MaxConcurrent)
	w.reg = &registrar{nc: nc, subj: subj, source: w.source, every: cfg.Heartbeat, log: w.log, what: w.registration, registered: make(chan struct{})}
	w.exec = &executor{nc: nc, subj: subj, source: w.source, log: w.log, off: off, obs: cfg.Observer, base: w.base, calls: w.calls}
	return w, nil
}

// ID returns the worker's instance id.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle adds a raw tool: def is sent as is (its InputSchema must be set) and
// h receives the input as JSON. It returns ErrStarted after Start.
func (w *Worker) Handle(def bus.ToolDef, h Handler) error {
	def.Defaults()
	if !bus.ValidName(def.Name) {
		return fmt.Errorf("worker: tool name %q must match ^[A-Za-z0-9_-]{1,64}$", def.Name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrStarted
	}
	if slices.ContainsFunc(w.tools, func(t *tool) bool { return t.def.Name == def.Name }) {
		return fmt.Errorf("worker: tool %q added twice", def.Name)
	}
	w.tools = append(w.tools, &tool{def: def, h: h, decided: make(chan struct{})})
	return nil
}

// Registered is closed once a router has acknowledged the first registration.
func (w *Worker) Registered() <-chan struct{} { return w.reg.registered }

// Start subscribes the cancel subject and every tool in its queue group,
// registers with the routers, and keeps registering every heartbeat until
// Stop. A tool runs calls only once a router accepted it; a rejected tool
// is unsubscribed, logged and counted (RejectObserver), and registered
// again every beat (docs/worker.md).
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrStarted
	}
	w.started = true
	tools := w.tools
	w.mu.Unlock()

	var err error
	w.cancelSub, err = w.nc.Subscribe(w.subj.All("cancel"), w.calls.onCancel)
	if err != nil {
		return fmt.Errorf("worker: subscribe cancel: %w", err)
	}
	w.serve = &serving{nc: w.nc, tools: tools, log: w.log, obs: w.obs, subj: w.subj, onExec: w.onExec,
		disc: &member{worker: w.cfg.ID, version: w.cfg.Version, subj: w.subj}, slots: w.cfg.MaxConcurrent}
	if err := w.serve.start(); err != nil {
		return err
	}
	w.reg.acked = w.serve.apply
	if err := bus.Flush(ctx, w.nc); err != nil {
		return fmt.Errorf("worker: flush: %w", err)
	}
	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx)) // the loops outlive Start's context
	beatCtx, cutBeat := context.WithCancel(context.WithoutCancel(ctx))   // a beat in flight outlives the loop
	w.stopLoops = func(cut bool) {
		stopLoops()
		if cut {
			cutBeat()
		}
		w.loops.Wait()
		cutBeat()
	}
	w.reg.register(ctx)
	w.loops.Go(func() { w.reg.heartbeat(loopCtx, beatCtx) })
	for _, t := range tools {
		if t.def.Durable {
			w.loops.Go(func() { workQueue{w, t}.take(loopCtx) })
		}
	}
	return nil
}

// Served returns the names of the tools this worker serves now over core
// request/reply: those a router accepted, durable tools aside.
func (w *Worker) Served() []string {
	if w.serve == nil {
		return nil
	}
	var names []string
	for _, t := range w.serve.endpoints() {
		names = append(names, t.def.Name)
	}
	return names
}

// waitLimit bounds the requests that wait for a slot; more are answered busy.
func waitLimit(maxConcurrent int) int { return max(4*maxConcurrent, 1024) }

// pendingMsgs is the capacity of the endpoints' channel (readers.go): far
// above what arrives while no reader is free, so that the NATS client's
// silent slow-consumer drop stays out of reach (docs/worker.md, "Waiting
// and busy").
const pendingMsgs = 1 << 16

// registration is what every beat sends: the tools, and the calls
// accepted, running or waiting for a slot.
func (w *Worker) registration() bus.Register {
	// This worker reads every exec form and answers in the form it came in (5.1).
	reg := bus.Register{Worker: w.cfg.ID, Groups: w.cfg.Groups, InFlight: w.calls.queuedByTool(), BinaryExec: true, CompactExec: true}
	w.mu.Lock()
	for _, t := range w.tools {
		reg.Tools = append(reg.Tools, t.def)
	}
	w.mu.Unlock()
	return reg
}

// request is one exec request from its arrival to its answer, pooled; its
// Call is allocated on its own, since a handler may keep it (docs/worker.md,
// "one allocation per exec request").
type request struct {
	m       nats.Msg
	e       bus.Event
	err     error
	key     string
	tracked bool
	call    *Call
	sc      scratch
	reply   coreReply
	w       *Worker // set by dispatch, for Run
	t       *tool
}

// requests are the pooled requests; run puts one back once it is answered.
var requests = sync.Pool{New: func() any { return new(request) }}

// newRequest is a pooled request for m.
func newRequest(m *nats.Msg) *request {
	r := requests.Get().(*request)
	r.m = *m
	return r
}

func (w *Worker) onExec(t *tool, r *request) {
	if !t.accepted.Load() {
		select {
		case <-t.decided: // rejected; delivered before the endpoint went
			w.exec.unserved(t, &r.m)
		default: // before the first acknowledgement: wait for it, at most a beat
			go func() {
				timer := time.NewTimer(w.cfg.Heartbeat)
				defer timer.Stop()
				select {
				case <-t.decided:
				case <-timer.C:
				}
				if !t.accepted.Load() {
					w.exec.unserved(t, &r.m)
					return
				}
				w.onExec(t, r)
			}()
		}
		return
	}
	// Decoded before waiting for a slot, so that a waiting call is listed in
	// the beats; the data is checked as executor.serve reads it.
	r.err = bus.DecodeHead(&r.m, &r.e)
	select {
	case w.sem <- struct{}{}:
		r.key, r.tracked = w.accept(t, &r.e, r.err)
		w.dispatch(t, r)
		return
	default:
	}
	// Every slot is busy: the request waits in a goroutine, so that the
	// reader reads on; past maxWaiting requests, or MaxWaitingBytes of
	// them, it is answered busy at once.
	size := msgSize(&r.m)
	n, held := w.waiting.Add(1), w.waitingBytes.Add(size)
	if n > int64(w.maxWaiting) || held > w.cfg.MaxWaitingBytes {
		w.waiting.Add(-1)
		w.waitingBytes.Add(-size)
		w.exec.busy(t, &r.m, w.busyN.Add(1), w.cfg.MaxConcurrent, n-1, held-size)
		return
	}
	r.key, r.tracked = w.accept(t, &r.e, r.err)
	w.obs.Waiting(1)
	go func() {
		w.sem <- struct{}{}
		w.waiting.Add(-1)
		w.waitingBytes.Add(-size)
		w.obs.Waiting(-1)
		if r.err == nil {
			if exp, _ := r.e.Expiry(); !exp.IsZero() && time.Now().After(exp) {
				w.release(r.key, r.tracked) // the router answered it timeout meanwhile
				return
			}
		}
		w.dispatch(t, r)
	}()
}

// msgSize is what a waiting request holds: its data, subject, reply and
// header names and values.
func msgSize(m *nats.Msg) int64 {
	n := len(m.Data) + len(m.Subject) + len(m.Reply)
	for k, vs := range m.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return int64(n)
}

// dispatch serves an accepted request in its slot, on the goroutine that
// took it (a reader, or the one it waited for its slot in).
func (w *Worker) dispatch(t *tool, r *request) {
	r.w, r.t = w, t
	r.run()
}

func (r *request) run() {
	w := r.w
	r.reply = coreReply{w.exec, &r.m, r.err == nil && bus.CompactForm(r.m.Header, &r.e)}
	r.call = new(Call)
	w.exec.serve(r.t, &r.m, &r.e, r.err, r.key, r.call, &r.sc, &r.reply)
	w.release(r.key, r.tracked)
	*r = request{}
	requests.Put(r)
}

// unserved answers a request of a tool no router accepted: it never runs.
func (w *executor) unserved(t *tool, m *nats.Msg) {
	_ = bus.RespondError(w.nc, m, w.source, bus.Errorf(bus.CodeUnavailable,
		"this worker's definition of %q was not accepted by the routers; it does not serve it", t.def.Name))
}

// busy answers a request that found every slot busy and waiting others
// waiting, holding held bytes; n counts the busy answers so far.
func (w *executor) busy(t *tool, m *nats.Msg, n int64, slots int, waiting, held int64) {
	if bo, ok := w.obs.(BusyObserver); ok {
		bo.Busy(t.def.Name)
	}
	if n&(n-1) == 0 { // 1, 2, 4, 8 ...: loud, but not a flood
		w.log.Warn("worker: every slot busy and too many calls or bytes waiting; answered busy", "tool", t.def.Name, "busy_total", n,
			"slots", slots, "waiting", waiting, "waiting_bytes", held)
	}
	_ = bus.RespondError(w.nc, m, w.source, &bus.Error{Code: bus.CodeBusy,
		Message: fmt.Sprintf("%s is at capacity: %d calls running and %d waiting (%d bytes)", w.source, slots, waiting, held)})
}

// BusyObserver is an Observer that is also told of each request the worker
// answered busy (metrics.Worker counts them).
type BusyObserver interface {
	Busy(tool string)
}

// accept counts a call the worker took, listed in its heartbeats by key
// until release; tracked says whether a drain waits for it.
func (w *Worker) accept(t *tool, e *bus.Event, err error) (key string, tracked bool) {
	tracked = w.life.Enter()
	if err == nil && e.SessionID != "" && e.ReplyID != "" && e.ToolCallID != "" {
		key = callKey(e.SessionID, e.ReplyID, e.ToolCallID)
		w.calls.queue(key, t.def.Name)
	}
	return key, tracked
}

// release ends what accept began, and frees the call's slot.
func (w *Worker) release(key string, tracked bool) {
	<-w.sem
	w.calls.unqueue(key)
	if tracked {
		w.life.Leave()
	}
}

// replier answers one exec request: over core request/reply, or through
// the work queue for a durable tool (durable.go).
type replier interface {
	result(out *bus.Event) // the call's result
	refuse(be *bus.Error)  // the request is malformed: it never runs
	drop()                 // cut off by the drain deadline: no answer
}

// coreReply answers on the request's reply subject, in the form the
// request came in.
type coreReply struct {
	w       *executor
	m       *nats.Msg
	compact bool // the request came in the compact form (docs/protocol.md 5.1)
}

func (r *coreReply) result(out *bus.Event) {
	if r.m.Reply != "" {
		var err error
		call := out.ToolCallID
		if r.compact { // the call is the inbox's: the result names nothing else (5.2)
			out.SessionID, out.ReplyID, out.ToolCallID, out.TraceParent, out.TraceState = "", "", "", "", ""
			err = bus.PublishBinary(r.w.nc, r.m.Reply, out, true)
		} else if bus.IsBinary(r.m.Header) {
			err = bus.PublishBinary(r.w.nc, r.m.Reply, out, false)
		} else { // AppendJSON's data, checked already
			err = bus.SendTrusted(r.m.Reply, out, "", r.w.nc.PublishMsg)
		}
		if err != nil {
			r.w.log.Warn("worker: reply failed", "subject", r.m.Subject, "call", call, "err", err)
		}
	}
}

func (r *coreReply) refuse(be *bus.Error) { _ = bus.RespondError(r.w.nc, r.m, r.w.source, be) }

func (r *coreReply) drop() {}

// errDrained is the cause of a call's context cut off by a drain's deadline.
var errDrained = life.ErrDeadline

// cancelMemory is how long a worker remembers a cancel, so that an exec
// request that was already on its way when the cancel went out never runs.
const cancelMemory = 2 * time.Minute

// StopTimeout is the drain deadline of Stop.
const StopTimeout = 5 * time.Second

// drainCleanup bounds the wait, past a drain's deadline, for the calls
// whose context was just cancelled to return.
const drainCleanup = time.Second

// Drain stops the worker: it tells the routers it is leaving, stops taking
// calls, and lets the calls in flight finish until ctx ends; then it
// cancels those still running (they send no result) and returns after a
// short cleanup with an error counting them. It is safe to call twice and
// concurrently; later calls return the first's result.
func (w *Worker) Drain(ctx context.Context) error {
	w.stopOnce.Do(func() {
		w.stopErr = w.drain(ctx)
		if w.owned {
			w.nc.Close()
		}
		close(w.closed)
	})
	<-w.closed
	return w.stopErr
}

// Dial connects with conn (natsconn.FromEnv() reads the nats CLI's
// environment: URLs, credentials, TLS, inbox prefix) and returns a worker
// on that connection; Drain and Stop close it. The connection reconnects
// for ever, as a long-running worker wants.
func Dial(conn natsconn.Config, cfg Config) (*Worker, error) {
	nc, err := conn.Connect("toolbus-worker", nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w, err := New(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	w.owned = true
	return w, nil
}

// Stop is Drain with a deadline of at most StopTimeout.
func (w *Worker) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, StopTimeout)
	defer cancel()
	return w.Drain(ctx)
}

// Closed is closed once Drain (or Stop) has returned.
func (w *Worker) Closed() <-chan struct{} { return w.closed }

func (w *Worker) drain(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	// Without a server no leave can go out, so a beat in flight (it waits a
	// beat for an answer) is not waited for either; asked once, lest a
	// reconnect between the two send a leave before a beat it did not wait for.
	connected := w.nc.IsConnected()
	w.stopLoops(!connected)
	if connected { // routers stop choosing this worker before its subscriptions go
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		leave := bus.Register{Worker: w.cfg.ID, Leaving: true, Tools: w.registration().Tools} // one leave per tool (7.1)
		if _, err := w.reg.send(sctx, leave, w.reg.every); err != nil {
			w.log.Debug("worker: leaving not acknowledged", "err", err)
		}
		cancel()
	}
	// The endpoints drain (the readers serve what they delivered), then the
	// calls accepted so far are waited for.
	var err error
	if w.serve != nil {
		w.serve.stop(ctx)
	}
	if lerr := w.life.Drain(ctx); lerr != nil {
		w.log.Warn("worker: drain deadline passed; calls cut off", "calls", w.cutN)
		err = fmt.Errorf("worker: drain: %d calls cut off: %w", w.cutN, ctx.Err())
	}
	if w.cancelSub != nil {
		_ = w.cancelSub.Unsubscribe()
	}
	// Past the deadline, calls that ignore their context end on their own.
	_ = w.pool.Close(ctx)
	if w.serve != nil {
		w.serve.in.wait(ctx)
	}
	return err
}

// notObject reports whether an exec's input is present, not null and no
// JSON object: protocol 5.1's input is the object that passed the schema.
func notObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] != '{' && string(raw) != "null"
}

// absentIfNull maps the JSON null of an absent user or context to nil.
func absentIfNull(raw json.RawMessage) json.RawMessage {
	if string(raw) == "null" {
		return nil
	}
	return raw
}

// Observer is told what a worker does, for metrics (metrics.NewWorker keeps
// Prometheus ones; this package links no metrics library). Its methods are
// called from many goroutines at once and must return quickly.
type Observer interface {
	// Waiting is called with +1 when a request starts waiting for a free
	// slot (Config.MaxConcurrent) and with -1 when it gets one.
	Waiting(delta int)
	// Running is called with +1 when a call starts running and with -1
	// when it has ended.
	Running(delta int)
	// Finished is called once for every call that ran, with its tool, its
	// result state (bus.StateSuccess, ...) and how long it ran.
	Finished(tool, state string, d time.Duration)
}

// nopObserver is the Observer of a worker configured without one.
type nopObserver struct{}

func (nopObserver) Waiting(int)                            {}
func (nopObserver) Running(int)                            {}
func (nopObserver) Finished(string, string, time.Duration) {}
