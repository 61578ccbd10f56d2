package security

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
)

// TestSharedAgentCannotStarveBoundReplays (held-out attack, issue 26):
// the shared agent may replay in any session without its own user, and a
// session id is its to choose, so 8 replay consumers in each of 128 made-up
// sessions filled the events stream's 1,024: every session with its own
// agent user then got limit_exceeded for its replay. Unbound sessions now
// stop at 3/4 of the bound, so a bound session still gets its replay.
func TestSharedAgentCannotStarveBoundReplays(t *testing.T) {
	d := newDeployment(t)
	all := d.conn("agent")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		made    int
		limited int
	)
	sem := make(chan struct{}, 16)
	for s := range 140 {
		for range 8 {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				e, err := bus.NewEvent(bus.TypeReplay, "attacker", bus.Replay{})
				if err != nil {
					t.Error(err)
					return
				}
				msg, err := bus.SendRequest(testCtx(t), all.nc, fmt.Sprintf("toolbus.replay.x%d", s), e)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := bus.Decode(msg)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && got.Type == bus.TypeReplayReady:
					made++
				case err == nil && got.Type == bus.TypeError:
					limited++
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("the shared agent made %d replay consumers; %d refused", made, limited)
	rp, err := d.conn("session-s1").client().Replay(testCtx(t), "s1")
	var be *bus.Error
	if errors.As(err, &be) {
		t.Fatalf("a bound session's replay after the shared agent's flood: %v", err)
	}
	must(t, err)
	rp.Stop(t.Context())
}

// TestRelayedPullReplyConfined (held-out attack, issue 26): a relayed
// pull's messages go to the request's reply subject, which the sender
// chooses. A session agent that pulls its own replay with the reply
// toolbus.events.s1 or a bucket's $KV subject, or an approver that pulls
// the handoff so, would have JetStream publish there with the router's
// reach. The router answers no reply subject under $ or the prefix, so
// nothing arrives and the bucket is unchanged.
func TestRelayedPullReplyConfined(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	ctx := testCtx(t)
	greet := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet", Input: client.Input(map[string]string{"who": "x"})}}}
	s2 := d.conn("session-s2")
	if _, err := s2.client().Call(ctx, "s2", greet, client.WithReplyID("r2")); err != nil {
		t.Fatal(err)
	}
	op := d.conn("operator")
	watch, err := op.nc.SubscribeSync("toolbus.events.s1")
	must(t, err)
	kv, err := op.nc.SubscribeSync("$KV.>")
	must(t, err)
	must(t, op.nc.Flush())
	consumer := func(l *login, subject, typ string) string {
		e, err := bus.NewEvent(typ, "attacker", bus.Replay{})
		must(t, err)
		msg, err := bus.SendRequest(ctx, l.nc, subject, e)
		must(t, err)
		got, err := bus.Decode(msg)
		must(t, err)
		var ready bus.ReplayReady
		must(t, got.DataAs(&ready))
		if ready.Consumer == "" {
			t.Fatalf("no consumer: %s", msg.Data)
		}
		return ready.Consumer
	}
	pull := func(l *login, subject, name, reply string) {
		e, err := bus.NewEvent(bus.TypeConsumerNext, "attacker", bus.ConsumerNext{Consumer: name, Batch: 64, ExpiresMS: 200})
		must(t, err)
		m, err := e.Msg(subject)
		must(t, err)
		m.Reply = reply
		must(t, l.nc.PublishMsg(m))
		must(t, l.nc.Flush())
	}
	name := consumer(s2, "toolbus.replay.s2", bus.TypeReplay)
	for _, reply := range []string{"toolbus.events.s1", "$KV.toolbus_tools.greet", "toolbus.confirm.greet"} {
		pull(s2, "toolbus.replay.s2", name, reply)
	}
	ap := d.conn("approver")
	hname := consumer(ap, "toolbus.handoff.confirm", bus.TypeHandoffFollow)
	pull(ap, "toolbus.handoff.confirm", hname, "toolbus.events.s1")
	// A pull with the sender's own inbox still works: the router is
	// serving, so the pulls above were read and refused.
	in, err := s2.nc.SubscribeSync(s2.nc.NewRespInbox())
	must(t, err)
	pull(s2, "toolbus.replay.s2", name, in.Subject)
	if _, err := in.NextMsg(bound); err != nil {
		t.Fatalf("own pull: %v", err)
	}
	if m, err := watch.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("s1's events got a message through a relayed pull: %s", m.Data)
	}
	for {
		m, err := kv.NextMsg(100 * time.Millisecond)
		if err != nil {
			break
		}
		if strings.HasPrefix(m.Subject, "$KV.toolbus_tools.") {
			if e, err := bus.Decode(m); err == nil && e.Type != "" {
				t.Fatalf("a stored event was written to %s", m.Subject)
			}
		}
	}
}

// TestOddSessionRefusalAudited (held-out attack, issue 26): the shared
// agent may publish P.call.<any token>, and a token that is no valid
// session id (x%y) made the batch's refusal skip the audit altogether:
// a claim of alice there left no record and no count. It is recorded now,
// under no session, with the token quoted, and counted against the
// unbound callers' bound.
func TestOddSessionRefusalAudited(t *testing.T) {
	d := newDeployment(t, func(c *router.Config) { c.Guard.Audit = &audit.Config{} })
	ctx := testCtx(t)
	all := d.conn("agent")
	e, err := bus.NewEvent(bus.TypeCallBatch, "attacker", bus.Batch{User: json.RawMessage(`"alice"`), Calls: []bus.Call{{ID: "c1", Name: "greet"}}})
	must(t, err)
	e.ID = "r-odd"
	msg, err := bus.SendRequest(ctx, all.nc, "toolbus.call.x%y", e)
	must(t, err)
	if got, _ := bus.Decode(msg); got == nil || got.Type != bus.TypeError {
		t.Fatalf("a batch on toolbus.call.x%%y: %s", msg.Data)
	}
	js := testkit.JetStream(t, d.conn("operator").nc)
	found := false
	must(t, audit.Export(ctx, js, bus.NewSubjects(""), audit.Filter{}, func(raw json.RawMessage) error {
		var r audit.Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		if r.Decision.Behavior == audit.Refused && strings.Contains(r.Decision.Rule, `"x%y"`) {
			found = true
		}
		return nil
	}))
	if !found {
		t.Fatal("the refusal of a batch in session x%y is not in the audit trail")
	}
}
