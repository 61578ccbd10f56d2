package security

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackReplayOtherConsumer (session 32, red team on 3.4, held): a
// replay consumer's name is given to the session that asked for it, and
// appears nowhere else; an agent that learnt s1's anyway pulls from it,
// stops it, or asks for a huge batch on its own subject. The router takes
// a consumer only when it made it for the asking session (its filter is
// that session's events): s2's agent and the shared agent are refused
// "no consumer" exactly as for a name that does not exist, s1's consumer
// is untouched, and a batch past bus.MaxConsumerBatch is bad_request.
func TestAttackReplayOtherConsumer(t *testing.T) {
	d := newDeployment(t)
	s := bus.NewSubjects("")
	ask := func(nc *nats.Conn, session, typ string, data any) *bus.Event {
		t.Helper()
		e, err := bus.NewEvent(typ, "attacker", data)
		must(t, err)
		e.SessionID = session
		m, err := bus.SendRequest(testCtx(t), nc, s.Replay(session), e)
		must(t, err)
		got, err := bus.Decode(m)
		must(t, err)
		return got
	}
	s1 := d.conn("session-s1").nc
	ready := ask(s1, "s1", bus.TypeReplay, bus.Replay{})
	var made bus.ReplayReady
	if err := ready.DataAs(&made); err != nil || made.Consumer == "" {
		t.Fatalf("s1's replay: %s %v", ready.Data, err)
	}
	refused := func(who string, e *bus.Event, want string) {
		t.Helper()
		var be bus.Error
		if e.Type != bus.TypeError || e.DataAs(&be) != nil || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, want) {
			t.Fatalf("%s: %s %s, want bad_request %q", who, e.Type, e.Data, want)
		}
	}
	for _, a := range []struct{ login, session string }{{"session-s2", "s2"}, {"agent", "sa"}} {
		nc := d.conn(a.login).nc
		refused(a.login+" pulls s1's consumer", ask(nc, a.session, bus.TypeConsumerNext, bus.ConsumerNext{Consumer: made.Consumer, Batch: 1, ExpiresMS: 1000}), "no consumer")
		refused(a.login+" stops s1's consumer", ask(nc, a.session, bus.TypeConsumerStop, bus.ConsumerStop{Consumer: made.Consumer}), "no consumer")
	}
	refused("s1 pulls a huge batch", ask(s1, "s1", bus.TypeConsumerNext, bus.ConsumerNext{Consumer: made.Consumer, Batch: bus.MaxConsumerBatch + 1, ExpiresMS: 1000}), "batch must be")
	// s1's consumer is still there: a pull is relayed (JetStream's 408 at
	// its expiry, no refusal); then s1 stops it (no answer when it works).
	if e, err := pull(s1, made.Consumer); err != nil || e != nil {
		t.Fatalf("s1 pulls its own consumer: %v %+v", err, e)
	}
	e, err := bus.NewEvent(bus.TypeConsumerStop, "s1", bus.ConsumerStop{Consumer: made.Consumer})
	must(t, err)
	e.SessionID = "s1"
	must(t, bus.SendWith(s.Replay("s1"), e, "", s1.PublishMsg))
	testkit.CheckFor(t, 3*bound, 10*time.Millisecond, func() error {
		e, err := pull(s1, made.Consumer)
		if err == nil && (e == nil || e.Type != bus.TypeError) {
			err = fmt.Errorf("s1's stopped consumer still pulled: %+v", e)
		}
		return err
	})
}

// pull relays one pull of consumer as session s1 and returns the refusal
// it got, or nil when JetStream answered (a status: no message).
func pull(nc *nats.Conn, consumer string) (*bus.Event, error) {
	e, err := bus.NewEvent(bus.TypeConsumerNext, "s1", bus.ConsumerNext{Consumer: consumer, Batch: 1, ExpiresMS: 500})
	if err != nil {
		return nil, err
	}
	e.SessionID = "s1"
	m, err := e.Msg(bus.NewSubjects("").Replay("s1"))
	if err != nil {
		return nil, err
	}
	r, err := nc.RequestMsg(m, bound/2) // a pull racing its stop may go unanswered
	if err != nil {
		return nil, err
	}
	if r.Header.Get("Status") != "" {
		return nil, nil
	}
	return bus.Decode(r)
}
