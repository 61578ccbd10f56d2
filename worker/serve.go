package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/life"
)

// RejectObserver is an Observer that is also told when a router rejects a
// tool's registration, so the worker stops serving it (metrics.Worker).
type RejectObserver interface {
	Rejected(tool, reason string)
}

// serving keeps the worker's endpoints: a queue subscription of each tool
// it serves now, delivering into the readers' channel (readers.go), and the
// NATS micro discovery that lists them (discovery.go). Every tool is
// subscribed before the first registration; a rejected tool's subscription
// drains, and comes back once a router accepts it (docs/worker.md).
type serving struct {
	nc     *nats.Conn
	tools  []*tool
	subj   bus.Subjects
	onExec func(*tool, *request) // serves every request, on a reader
	log    *slog.Logger
	obs    Observer
	disc   *member // in the connection's discovery
	slots  int     // the worker's MaxConcurrent

	bySubject map[string]*tool // by exec subject; fixed at start
	in        *readers

	mu      sync.Mutex
	subs    map[string]*nats.Subscription // by tool: the endpoints now
	stopped bool
}

// start starts the readers and the discovery, and subscribes every tool
// that is not durable.
func (s *serving) start() error {
	s.bySubject = map[string]*tool{}
	for _, t := range s.tools {
		s.bySubject[s.subj.Workers.Exec(t.def.Name)] = t
	}
	s.in = newReaders(pendingMsgs, time.Minute, readerLimit(s.slots), s.take).start()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = map[string]*nats.Subscription{}
	s.disc.endpoints = s.endpoints
	if err := join(s.nc, s.disc); err != nil {
		return err
	}
	for _, t := range s.tools {
		if t.def.Durable {
			continue
		}
		if err := s.add(t); err != nil {
			return err
		}
	}
	return nil
}

// take serves one request a reader took off the channel.
func (s *serving) take(m *nats.Msg) {
	t := s.bySubject[m.Subject]
	if t == nil {
		return // only the tools' exec subjects deliver here
	}
	t.requests.Add(1)
	s.onExec(t, newRequest(m))
}

// add subscribes t's exec subject in its queue group, delivering into the
// readers' channel.
func (s *serving) add(t *tool) error {
	sub, err := s.nc.ChanQueueSubscribe(s.subj.Workers.Exec(t.def.Name), s.subj.Workers.ExecQueue(t.def.Name), s.in.ch)
	if err != nil {
		return fmt.Errorf("worker: endpoint %s: %w", t.def.Name, err)
	}
	s.subs[t.def.Name] = sub
	return nil
}

// endpoints lists the tools with an endpoint now, in the worker's order,
// for discovery.
func (s *serving) endpoints() []*tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var on []*tool
	for _, t := range s.tools {
		if s.subs[t.def.Name] != nil {
			on = append(on, t)
		}
	}
	return on
}

// apply takes one acknowledgement: each tool it names becomes accepted or
// rejected, and the endpoints follow.
func (s *serving) apply(ack *bus.RegisterAck) {
	accepted := make(map[string]bool, len(ack.Accepted))
	for _, n := range ack.Accepted {
		accepted[n] = true
	}
	for _, t := range s.tools {
		if i := slices.IndexFunc(ack.Rejected, func(r bus.Rejection) bool { return r.Name == t.def.Name }); i >= 0 {
			s.reject(t, ack.Rejected[i].Reason)
			t.decide()
		} else if accepted[t.def.Name] {
			t.accepted.Store(true)
			t.decide()
		}
	}
	s.sync()
}

// reject marks t as not served, and says so loudly.
func (s *serving) reject(t *tool, reason string) {
	was := t.accepted.Swap(false)
	msg := "worker: tool rejected by the routers; this worker does not serve it, and registers the same definition again every beat"
	if was {
		msg = "worker: tool rejected by the routers; this worker stopped serving it, and registers the same definition again every beat"
	}
	s.log.Error(msg, "tool", t.def.Name, "reason", reason)
	if ro, ok := s.obs.(RejectObserver); ok {
		ro.Rejected(t.def.Name, reason)
	}
}

// sync makes the endpoints those of the accepted tools that are not
// durable; a rejected tool's subscription drains, what it delivered
// answered unserved.
func (s *serving) sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.subs == nil {
		return
	}
	changed := false
	for _, t := range s.tools {
		sub := s.subs[t.def.Name]
		switch {
		case sub != nil && !t.accepted.Load() && t.isDecided():
			if err := sub.Drain(); err != nil {
				s.log.Warn("worker: endpoint drain", "tool", t.def.Name, "err", err)
			}
			delete(s.subs, t.def.Name)
			changed = true
		case sub == nil && !t.def.Durable && (t.accepted.Load() || !t.isDecided()):
			if err := s.add(t); err != nil {
				s.log.Error("worker: endpoint", "tool", t.def.Name, "err", err)
				continue
			}
			changed = true
		}
	}
	if !changed {
		return
	}
	// The server has the subscriptions and unsubscribes before Registered closes.
	if err := s.nc.FlushTimeout(flushWait); err != nil {
		s.log.Warn("worker: flush", "err", err)
	}
}

// flushWait bounds the wait for the server to confirm new subscriptions.
const flushWait = 10 * time.Second

// isDecided reports whether an acknowledgement has named t.
func (t *tool) isDecided() bool {
	select {
	case <-t.decided:
		return true
	default:
		return false
	}
}

// stop ends the discovery and drains every endpoint for good, waiting
// until ctx ends (unsubscribes them at once when the connection is down);
// the readers then serve what was delivered and exit.
func (s *serving) stop(ctx context.Context) {
	s.mu.Lock()
	if s.stopped || s.subs == nil {
		s.stopped = true
		s.mu.Unlock()
		return
	}
	s.stopped = true
	subs := slices.Collect(maps.Values(s.subs))
	s.mu.Unlock()
	leave(s.nc, s.disc)
	if !s.nc.IsConnected() {
		// No server to drain from: what it delivered is in the readers'
		// channel already, and nothing more comes. A drain would wait for
		// nats.go's flush (10 s), which a connection that is down cannot
		// answer; unsubscribed, the endpoints are not renewed on a reconnect.
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		subs = nil
	}
	closed := make(chan struct{}, len(subs))
	for _, sub := range subs {
		done := func(string) {
			select {
			case closed <- struct{}{}:
			default: // counted already
			}
		}
		sub.SetClosedHandler(done)
		if err := sub.Drain(); err != nil {
			s.log.Warn("worker: endpoint drain", "subject", sub.Subject, "err", err)
			done("")
		}
	}
	for range subs {
		select {
		case <-closed:
		case <-ctx.Done():
		}
	}
	s.in.close()
}

// registrar registers the worker with the routers: once at Start, again
// every heartbeat, and the leave of a drain, as one request per group and
// one per tool (docs/protocol.md 7.1, docs/worker.md). what is the
// registration to send, made fresh for each beat.
type registrar struct {
	nc     *nats.Conn
	subj   bus.Subjects
	source string
	every  time.Duration
	log    *slog.Logger
	what   func() bus.Register
	acked  func(*bus.RegisterAck) // told every acknowledgement, before registered closes

	registered chan struct{} // closed once every request of a registration was acknowledged
	once       sync.Once
	answered   atomic.Bool // a router acknowledged a request of this worker
}

// heartbeat registers every beat until ctx ends. A registration already
// sent is still waited for when ctx ends, so that Drain's leave comes after
// it and a router never applies the beat after the leave; until beatCtx
// ends, which Drain ends when no leave follows (no server).
func (r *registrar) heartbeat(ctx, beatCtx context.Context) {
	life.Every(ctx, r.every, func(time.Time) { r.register(beatCtx) })
}

// register sends one registration and logs its outcome. Until one is
// acknowledged it waits up to firstRegisterWait, not a beat, for the
// replies (docs/worker.md: a router stores new definitions in turn).
func (r *registrar) register(ctx context.Context) {
	wait := r.every
	if !r.answered.Load() {
		wait = max(wait, firstRegisterWait)
	}
	ack, err := r.send(ctx, r.what(), wait)
	if err != nil {
		r.log.Warn("worker: registration not acknowledged", "err", err)
	}
	if len(ack.Accepted) > 0 || len(ack.Rejected) > 0 {
		r.answered.Store(true)
		r.acked(ack) // it logs the rejections
	}
	if err == nil {
		r.once.Do(func() { close(r.registered) })
	}
}

// firstRegisterWait bounds the wait for the first acknowledgement.
const firstRegisterWait = 10 * time.Second

// send sends reg, a registration or a leave, as one request per tool and
// group, all at once (in order until the first registration is
// acknowledged: ordered), and returns the tools' acknowledgements merged,
// waiting at most wait; a group's rejection is logged here. err is the
// first request that failed (ack then holds the others').
func (r *registrar) send(ctx context.Context, reg bus.Register, wait time.Duration) (*bus.RegisterAck, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	type part struct {
		subject string
		reg     bus.Register
		group   bool
		ack     *bus.RegisterAck
		err     error
	}
	var parts []*part
	if !reg.Leaving {
		for _, g := range reg.Groups {
			parts = append(parts, &part{subject: r.subj.Workers.RegisterGroup(g.Name), group: true,
				reg: bus.Register{Worker: reg.Worker, Groups: []bus.Group{g}}})
		}
	}
	for _, d := range reg.Tools {
		one := bus.Register{Worker: reg.Worker, Leaving: reg.Leaving}
		if !reg.Leaving {
			one.Tools, one.BinaryExec, one.CompactExec = []bus.ToolDef{d}, reg.BinaryExec, reg.CompactExec
			if reg.InFlight != nil { // the worker lists its calls: even none
				keys := reg.InFlight[d.Name]
				if keys == nil {
					keys = []string{}
				}
				one.InFlight = map[string][]string{d.Name: keys}
			}
		}
		parts = append(parts, &part{subject: r.subj.Workers.Register(d.Name), reg: one})
	}
	if r.ordered() { // routers list in the order of first registration (7.4)
		for _, p := range parts {
			p.ack, p.err = r.request(ctx, p.subject, p.reg)
		}
	} else {
		var wg sync.WaitGroup
		for _, p := range parts {
			wg.Go(func() { p.ack, p.err = r.request(ctx, p.subject, p.reg) })
		}
		wg.Wait()
	}
	ack := &bus.RegisterAck{Accepted: []string{}, Rejected: []bus.Rejection{}}
	var first error
	for _, p := range parts {
		switch {
		case p.err != nil:
			first = cmp.Or(first, p.err)
		case p.group:
			for _, rj := range p.ack.Rejected {
				r.log.Error("worker: group rejected by the routers", "group", rj.Name, "reason", rj.Reason)
			}
		default:
			ack.Accepted = append(ack.Accepted, p.ack.Accepted...)
			ack.Rejected = append(ack.Rejected, p.ack.Rejected...)
		}
	}
	return ack, first
}

// ordered: until a registration was acknowledged, its requests go one by one.
func (r *registrar) ordered() bool {
	select {
	case <-r.registered:
		return false
	default:
		return true
	}
}

// request sends one registration on subject and returns its
// acknowledgement. A request the NATS server refused (docs/security.md)
// times out; the error returned gives the connection's last error.
func (r *registrar) request(ctx context.Context, subject string, reg bus.Register) (*bus.RegisterAck, error) {
	e, err := bus.NewEvent(bus.TypeRegister, r.source, reg)
	if err != nil {
		return nil, err
	}
	resp, err := bus.SendRequest(ctx, r.nc, subject, e)
	if err != nil {
		if le := r.nc.LastError(); errors.Is(le, nats.ErrPermissionViolation) && strings.Contains(le.Error(), `"`+subject+`"`) {
			return nil, fmt.Errorf("%s: the NATS server refused this login's registration (its credentials do not allow it: --worker-tools, docs/security.md): %w", subject, le)
		}
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	re, err := bus.Decode(resp)
	if err != nil {
		return nil, err
	}
	if re.Type == bus.TypeError {
		var be bus.Error
		_ = re.DataAs(&be)
		return nil, &be
	}
	var ack bus.RegisterAck
	if err := re.DataAs(&ack); err != nil {
		return nil, err
	}
	return &ack, nil
}
