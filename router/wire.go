package router

import (
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/metrics"
)

// wire is what every handler shares: the connection, the deployment's
// subjects, the router's event source, and how a message is decoded and
// answered (docs/protocol.md 2).
type wire struct {
	nc     *nats.Conn
	subj   bus.Subjects
	source string
	log    *slog.Logger
	m      *metrics.Router // set in Start, before the first subscription
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

// respond answers m with an event of type typ; what names the reply in the
// log when it fails.
func (w *wire) respond(m *nats.Msg, typ string, data any, what string) {
	if err := bus.Respond(w.nc, m, w.source, typ, data); err != nil {
		w.log.Warn("router: "+what+" failed", "err", err)
	}
}

// decode reads m's event, checks its type, and checks that its sessionid
// matches the subject token of kind (the token becomes the session id when
// the attribute is absent).
func (w *wire) decode(m *nats.Msg, kind, typ string) (*bus.Event, error) {
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
