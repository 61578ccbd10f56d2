package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/life"
)

// registrar registers the worker with the routers: once at Start, again
// every heartbeat, and the leave of a drain (docs/protocol.md 7.1). what
// is the registration to send, made fresh for each beat.
type registrar struct {
	nc     *nats.Conn
	subj   bus.Subjects
	source string
	every  time.Duration
	log    *slog.Logger
	what   func() bus.Register
	acked  func(*bus.RegisterAck) // told every acknowledgement, before registered closes

	registered chan struct{} // closed at the first acknowledgement
	once       sync.Once
}

// heartbeat registers every beat until ctx ends. A registration already
// sent is not abandoned when ctx ends: it is waited for until a router
// answers it or a beat passes, so that Drain, which waits for this loop,
// sends its leave after it and a router cannot apply the heartbeat after
// the leave (which kept the worker's tools listed for three more beats).
func (r *registrar) heartbeat(ctx context.Context) {
	life.Every(ctx, r.every, func(time.Time) { r.register(context.WithoutCancel(ctx)) })
}

// register sends one registration and logs its outcome.
func (r *registrar) register(ctx context.Context) {
	ack, err := r.send(ctx, r.what())
	if err != nil {
		r.log.Warn("worker: registration not acknowledged", "err", err)
		return
	}
	if r.acked != nil {
		r.acked(ack) // it logs the rejections
	} else {
		for _, rej := range ack.Rejected {
			r.log.Error("worker: tool rejected", "tool", rej.Name, "reason", rej.Reason)
		}
	}
	r.once.Do(func() { close(r.registered) })
}

// send sends one registration (or a leave) and returns the acknowledgement.
func (r *registrar) send(ctx context.Context, reg bus.Register) (*bus.RegisterAck, error) {
	e, err := bus.NewEvent(bus.TypeRegister, r.source, reg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.every)
	defer cancel()
	resp, err := bus.SendRequest(ctx, r.nc, r.subj.Workers.Register(), e)
	if err != nil {
		return nil, err
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
