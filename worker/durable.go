package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// workQueue serves a durable tool t of w from its work consumer on the P_WORK
// work queue (docs/protocol.md 5.8), not P.exec.<tool>.
type workQueue struct {
	w *Worker
	t *tool
}

// take is the queue's loop: it takes a call only when the worker has a free
// slot; the call reports progress every third of AckWait until recorded.
func (q workQueue) take(ctx context.Context) {
	w, t := q.w, q.t
	js, err := jetstream.New(w.nc)
	if err != nil {
		w.log.Error("worker: jetstream", "err", err)
		return
	}
	retry := min(max(w.cfg.Heartbeat/10, 50*time.Millisecond), time.Second)
	cons, err := q.consumer(ctx, js, retry)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("worker: durable tool not served here", "tool", t.def.Name, "err", err)
		}
		return
	}
	ackWait := cons.CachedInfo().Config.AckWait
	for {
		if !t.accepted.Load() { // not (yet) accepted: take no call with this definition
			if bus.Sleep(ctx, retry) != nil {
				return
			}
			continue
		}
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := cons.Next(jetstream.FetchContext(fctx))
		cancel()
		if err != nil {
			<-w.sem
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				w.log.Debug("worker: work fetch", "tool", t.def.Name, "err", err)
				if bus.Sleep(ctx, retry) != nil {
					return
				}
			}
			continue
		}
		q.run(msg, ackWait)
	}
}

// consumer looks up the tool's work consumer, which routers make when they
// take its registration: it retries what can pass (saying so at warning
// level once after 30 s) and fails at once on what cannot (lookupFault,
// workConfig).
func (q workQueue) consumer(ctx context.Context, js jetstream.JetStream, retry time.Duration) (jetstream.Consumer, error) {
	stream, name := q.w.subj.Stream(bus.StreamWork), q.w.subj.Workers.WorkConsumer(q.t.def.Name)
	for start, warned := time.Now(), false; ; {
		cons, err := js.Consumer(ctx, stream, name)
		if err == nil {
			return cons, workConfig(cons.CachedInfo().Config, q.w.subj.Workers.Work(q.t.def.Name))
		}
		if fault := lookupFault(err, q.w.nc.LastError(), "$JS.API.CONSUMER.INFO."+stream+"."+name); fault != nil {
			return nil, fault // the context's error too
		}
		level := slog.LevelDebug
		if !warned && time.Since(start) > 30*time.Second {
			level, warned = slog.LevelWarn, true
		}
		q.w.log.Log(ctx, level, "worker: work consumer not there yet (is a router up, and did it accept the tool?)", "tool", q.t.def.Name, "err", err)
		if err := bus.Sleep(ctx, retry); err != nil {
			return nil, err
		}
	}
}

// lookupFault is nil for a failed lookup a later one may pass, else why it
// cannot: a bad name, a push consumer, or a timeout after the server refused
// info, the lookup's subject (last: the connection's last error).
func lookupFault(err, last error, info string) error {
	var api *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		if errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+info+`"`) {
			return fmt.Errorf("permission denied: %w", last)
		}
		return nil
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrStreamNotFound), errors.As(err, &api) && api.Code >= 500:
		return nil
	}
	return err
}

// workConfig refuses a consumer routers did not make for the tool: the
// worker would take other tools' calls from it and end them, or lose calls.
func workConfig(c jetstream.ConsumerConfig, filter string) error {
	if c.FilterSubject != filter || len(c.FilterSubjects) > 0 || c.AckPolicy != jetstream.AckExplicitPolicy {
		return fmt.Errorf("consumer %s has another config: filter %q %q, ack %s (want %q, explicit)",
			c.Durable, c.FilterSubject, c.FilterSubjects, c.AckPolicy, filter)
	}
	return nil
}

// run runs one durable call; the caller holds its slot.
func (q workQueue) run(msg jetstream.Msg, ackWait time.Duration) {
	w, t := q.w, q.t
	m := &nats.Msg{Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data()}
	e, err := bus.Decode(m)
	if err == nil {
		if exp, _ := e.Expiry(); !exp.IsZero() && time.Now().After(exp) {
			_ = msg.Term() // the router ended it with a timeout meanwhile
			<-w.sem
			return
		}
	}
	if err == nil && w.calls.holds(callKey(e.SessionID, e.ReplyID, e.ToolCallID)) {
		// Delivered again while it runs here: the run under way answers for
		// this delivery too (docs/worker.md, "Shape").
		_ = msg.InProgress()
		<-w.sem
		return
	}
	key, tracked := w.accept(t, e, err)
	rp := &workReply{w: w, msg: msg, tool: t.def.Name, stop: make(chan struct{})}
	if e != nil {
		rp.deadline, _ = e.Expiry()
	}
	go rp.beat(max(ackWait/3, 10*time.Millisecond))
	w.pool.Go(func() {
		defer w.release(key, tracked)
		w.exec.serve(t, m, e, err, key, new(Call), new(scratch), rp)
	})
}

// workReply answers a durable call: its result goes to the routers, then
// the message is acknowledged.
type workReply struct {
	w        *Worker
	msg      jetstream.Msg
	tool     string
	deadline time.Time
	stop     chan struct{}
}

// beat reports progress until the call is answered.
func (r *workReply) beat(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			_ = r.msg.InProgress()
		}
	}
}

// recordWindow bounds how long past its deadline a result is offered.
const recordWindow = time.Minute

func (r *workReply) result(out *bus.Event) {
	defer close(r.stop)
	until := time.Now().Add(recordWindow)
	if !r.deadline.IsZero() {
		until = r.deadline.Add(recordWindow)
	}
	// Past a drain's deadline the call is left to be delivered again.
	ctx, cancel := context.WithDeadline(r.w.base, until)
	defer cancel()
	for delay := 10 * time.Millisecond; !r.w.nc.IsClosed(); delay = min(2*delay, time.Second) {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := bus.SendRequest(actx, r.w.nc, r.w.subj.Workers.Result(r.tool), out)
		acancel()
		if err == nil {
			if e, derr := bus.Decode(resp); derr == nil && e.Type == bus.TypeExecRecorded { // recorded, or another was first
				if err := r.msg.DoubleAck(ctx); err != nil {
					r.w.log.Warn("worker: durable call not acknowledged", "tool", r.tool, "call", out.ToolCallID, "err", err)
				}
				return
			}
		}
		if bus.Sleep(ctx, delay) != nil { // unacknowledged, the call is delivered again
			r.w.log.Error("worker: durable result not recorded", "tool", r.tool, "call", out.ToolCallID, "err", err)
			return
		}
	}
}

func (r *workReply) refuse(be *bus.Error) {
	close(r.stop)
	r.w.log.Warn("worker: malformed durable call dropped", "tool", r.tool, "err", be)
	_ = r.msg.Term()
}

func (r *workReply) drop() {
	close(r.stop)
	_ = r.msg.Nak() // cut off by the drain: another worker takes it at once
}
