package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// Publisher is the part of *nats.Conn that sending events needs; it must not
// modify the message's header, which may be shared.
type Publisher interface {
	PublishMsg(m *nats.Msg) error
}

var _ Publisher = (*nats.Conn)(nil)

// Publish sends e on subject in structured mode.
func Publish(p Publisher, subject string, e *Event) error {
	m, err := e.msg(subject, "", true)
	if err != nil {
		return err
	}
	return p.PublishMsg(m)
}

// RespondError answers m, when it has a reply subject, with an io.toolbus.error
// event from source.
func RespondError(p Publisher, m *nats.Msg, source string, err *Error) error {
	return Respond(p, m, source, TypeError, err)
}

// Respond answers m, when it has a reply subject, with an event of type typ.
func Respond(p Publisher, m *nats.Msg, source, typ string, data any) error {
	if m.Reply == "" {
		return nil
	}
	e, err := NewEvent(typ, source, data)
	if err != nil {
		return err
	}
	return Publish(p, m.Reply, e)
}

// Sleep waits for d, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Flush waits until the server has processed everything nc sent, bounded by
// ctx or, when ctx has no deadline, by 10 seconds.
func Flush(ctx context.Context, nc *nats.Conn) error {
	if err := ctx.Err(); err != nil {
		return err // nats.go may still flush, racing the ended context against the pong
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return nc.FlushWithContext(ctx)
}

// Listen subscribes to subject and, once the server has it, hands each
// message to each in its own goroutine until ctx ends or each reports false,
// then unsubscribes and calls end; a burst beyond buf is dropped.
func Listen(ctx context.Context, nc *nats.Conn, subject string, buf int, each func(*nats.Msg) bool, end func()) error {
	msgs := make(chan *nats.Msg, buf)
	sub, err := nc.ChanSubscribe(subject, msgs)
	if err != nil {
		return err
	}
	if err := Flush(ctx, nc); err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	go func() {
		defer end()
		defer func() { _ = sub.Unsubscribe() }()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-msgs:
				if !each(m) {
					return
				}
			}
		}
	}()
	return nil
}

// SendRequest sends e on subject in structured mode and waits for the reply
// until ctx ends.
func SendRequest(ctx context.Context, nc *nats.Conn, subject string, e *Event) (*nats.Msg, error) {
	m, err := e.msg(subject, "", true)
	if err != nil {
		return nil, err
	}
	return nc.RequestMsgWithContext(ctx, m)
}
