package security

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAgentMakesNoConsumer: an agent cannot create a JetStream consumer
// at all, pull or push, ephemeral or durable (nats-server checks neither a
// push consumer's deliver_subject against its creator's permissions nor
// durability, so a session agent allowed CONSUMER.CREATE could have the
// server publish its events on toolbus.confirm.<tool> or a bucket's
// subject). It replays through the consumer a router makes for its own
// session, and only its own.
func TestAgentMakesNoConsumer(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	a := d.conn("session-s1")
	for _, s := range []string{
		"$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.push1.toolbus.events.s1", // a push consumer with deliver_subject in the body
		"$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.pull1.toolbus.events.s1",
		"$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.w.toolbus.events.*",
		"$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS",
		"$JS.API.CONSUMER.DURABLE.CREATE.TOOLBUS_EVENTS.d1",
		"$JS.API.CONSUMER.CREATE.KV_toolbus_parked.x.$KV.toolbus_parked.>",
		"toolbus.replay.s2", // another session's replay
	} {
		a.denyPublish(s)
	}
	ctx := testCtx(t)
	ac := a.client()
	if _, err := ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet", Input: client.Input(map[string]string{"who": "x"})}}}, client.WithReplyID("r1")); err != nil {
		t.Fatal(err)
	}
	rp, err := ac.Replay(ctx, "s1")
	must(t, err)
	defer rp.Stop(t.Context())
	if e := waitType(t, rp, bus.TypeBatchDone); e.SessionID != "s1" || e.ReplyID != "r1" {
		t.Fatalf("replayed %+v", e)
	}
	// The router refuses a replay request whose sessionid is not the
	// subject's (nothing is made).
	op := d.conn("operator")
	e, err := bus.NewEvent(bus.TypeReplay, "test", bus.Replay{})
	must(t, err)
	e.SessionID = "s2"
	msg, err := bus.SendRequest(shortCtx(t), op.nc, "toolbus.replay.s1", e)
	must(t, err)
	if got, _ := bus.Decode(msg); got == nil || got.Type != bus.TypeError {
		t.Fatalf("replay with a mismatched sessionid: %s", msg.Data)
	}
	a.noViolationsBut("$JS.API.", "toolbus.replay.s2")
}

// TestSharedAgentLockedOut: once a session has its own agent user, the
// shared agent user can neither act in it nor read it: publishing a call,
// a tools query, a cancel or a replay request there is denied by NATS, a
// subscription to its events is refused, and a wildcard subscription gets
// no event of it (nats-server checks the deny list on each delivery),
// while it still works in sessions without their own user.
func TestSharedAgentLockedOut(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	all := d.conn("agent")
	for _, s := range []string{"toolbus.call.s1", "toolbus.tools.s1", "toolbus.cancel.s1", "toolbus.replay.s1", "toolbus.outputs.s1", "toolbus.call.s2",
		"$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.w.toolbus.events.*"} {
		all.denyPublish(s)
	}
	all.denySubscribe("toolbus.events.s1")
	wild, err := all.nc.SubscribeSync("toolbus.events.*")
	must(t, err)
	must(t, all.nc.Flush())
	ctx := testCtx(t)
	greet := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet", Input: client.Input(map[string]string{"who": "x"})}}}
	if _, err := d.conn("session-s1").client().Call(ctx, "s1", greet, client.WithReplyID("r1")); err != nil {
		t.Fatal(err)
	}
	if _, err := all.client().Call(ctx, "s9", greet, client.WithReplyID("r9")); err != nil {
		t.Fatal(err)
	}
	// s1's events went out before s9's batch was sent; the first event
	// the wildcard gets is s9's, and none of s1's comes.
	deadline := time.Now().Add(bound)
	seen9 := false
	for time.Now().Before(deadline) {
		m, err := wild.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		e, err := bus.Decode(m)
		must(t, err)
		if e.SessionID == "s1" {
			t.Fatalf("the shared agent read a bound session's event: %s %s", m.Subject, e.Type)
		}
		if e.SessionID == "s9" && e.Type == bus.TypeBatchDone {
			seen9 = true
			break
		}
	}
	if !seen9 {
		t.Fatal("the shared agent got no event of s9, a session without its own user")
	}
	rp, err := all.client().Replay(ctx, "s9")
	must(t, err)
	defer rp.Stop(t.Context())
	waitType(t, rp, bus.TypeBatchDone)
}

// TestReplayConsumerLost: when the router-made replay consumer is lost
// (deleted here, as a node's loss would), the client asks a router for
// another one from the next sequence: the events go on, none twice.
func TestReplayConsumerLost(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	ctx := testCtx(t)
	ac := d.conn("session-s1").client()
	greet := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet", Input: client.Input(map[string]string{"who": "x"})}}}
	if _, err := ac.Call(ctx, "s1", greet, client.WithReplyID("r1")); err != nil {
		t.Fatal(err)
	}
	rp, err := ac.Replay(ctx, "s1")
	must(t, err)
	defer rp.Stop(t.Context())
	if e := waitType(t, rp, bus.TypeBatchDone); e.ReplyID != "r1" {
		t.Fatalf("replayed %+v", e)
	}
	ojs := testkit.JetStream(t, d.conn("operator").nc)
	st, err := ojs.Stream(ctx, "TOOLBUS_EVENTS")
	must(t, err)
	names := st.ConsumerNames(ctx)
	n := 0
	for name := range names.Name() {
		if strings.HasPrefix(name, "replay-") {
			must(t, ojs.DeleteConsumer(ctx, "TOOLBUS_EVENTS", name))
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d replay consumers, want 1", n)
	}
	if _, err := ac.Call(ctx, "s1", greet, client.WithReplyID("r2")); err != nil {
		t.Fatal(err)
	}
	for {
		e := waitType(t, rp, bus.TypeBatchDone)
		if e.ReplyID == "r1" {
			t.Fatal("r1's batch.done came twice")
		}
		if e.ReplyID == "r2" {
			break
		}
	}
}

// TestReplayBounded: a session gets at most 8 replay consumers from one
// router within their idle time; the next request is limit_exceeded and
// makes nothing.
func TestReplayBounded(t *testing.T) {
	d := newDeployment(t)
	ac := d.conn("session-s1").client()
	ctx := testCtx(t)
	var open []*client.Events
	defer func() {
		for _, rp := range open {
			rp.Stop(t.Context())
		}
	}()
	for range 8 {
		rp, err := ac.Replay(ctx, "s1")
		must(t, err)
		open = append(open, rp)
	}
	_, err := ac.Replay(ctx, "s1")
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeLimitExceeded {
		t.Fatalf("the 9th replay: %v, want limit_exceeded", err)
	}
	// Another session is not held back by s1's.
	rp, err := d.conn("session-s2").client().Replay(ctx, "s2")
	must(t, err)
	rp.Stop(t.Context())
}
