package security

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// relayed sends an event of type typ with data on subject as l, with its
// own inbox as the reply subject, and returns what came back on that inbox
// within wait: the router's answer, stored messages or JetStream statuses.
func relayed(t *testing.T, l *login, subject, typ string, data any, wait time.Duration) []*nats.Msg {
	t.Helper()
	e, err := bus.NewEvent(typ, "test/"+l.name, data)
	must(t, err)
	b, err := e.Encode()
	must(t, err)
	inbox := l.nc.NewInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	must(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	must(t, l.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: b}))
	var got []*nats.Msg
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return got
		}
		got = append(got, m)
		if m.Header.Get("Status") != "" || m.Subject == inbox && !isRequest(m) {
			return got // the router's answer, or the closing status
		}
	}
}

// isRequest reports whether m is a handoff request, which a router
// relaying the handoff sends on the pull's inbox (docs/protocol.md 6.2).
func isRequest(m *nats.Msg) bool {
	e, err := bus.Decode(m)
	return err == nil && (e.Type == bus.TypeExternalReq || e.Type == bus.TypeConfirmReq)
}

// refusedBy fails unless msgs is exactly one io.toolbus.error of code.
func refusedBy(t *testing.T, what string, msgs []*nats.Msg, code string) {
	t.Helper()
	if len(msgs) != 1 {
		t.Fatalf("%s: %d messages, want one refusal", what, len(msgs))
	}
	e, err := bus.Decode(msgs[0])
	if err != nil || e.Type != bus.TypeError {
		t.Fatalf("%s: %v %s, want an io.toolbus.error", what, err, msgs[0].Data)
	}
	var be bus.Error
	must(t, e.DataAs(&be))
	if be.Code != code {
		t.Fatalf("%s: %s %q, want %s", what, be.Code, be.Message, code)
	}
}

// replayConsumer returns the name of the one replay consumer of the events
// stream, as the operator lists it (an attacker who learned it otherwise).
func replayConsumer(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	st, err := js.Stream(testCtx(t), "TOOLBUS_EVENTS")
	must(t, err)
	var names []string
	lister := st.ConsumerNames(testCtx(t))
	for name := range lister.Name() {
		if strings.HasPrefix(name, "replay-") {
			names = append(names, name)
		}
	}
	if len(names) != 1 {
		t.Fatalf("replay consumers %v, want one", names)
	}
	return names[0]
}

// TestForeignConsumerRefused: another session's agent, and the shared
// agent, that know session s1's replay consumer name can neither look it
// up, pull from it nor delete it: NATS refuses every JetStream API subject
// (no agent has any), and the router refuses the name on their own replay
// subject exactly as an unknown one, relaying nothing. s1's replay goes on
// unharmed. Names carry 128 random bits.
func TestForeignConsumerRefused(t *testing.T) {
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
	waitType(t, rp, bus.TypeBatchDone)
	ojs := testkit.JetStream(t, d.conn("operator").nc)
	name := replayConsumer(t, ojs)
	if !bus.ValidConsumerName("replay", name) {
		t.Fatalf("consumer name %q is not replay-<26 base32 characters> (128 bits)", name)
	}

	for _, c := range []struct{ user, session string }{{"session-s2", "s2"}, {"agent", "s9"}} {
		l := d.conn(c.user)
		for _, api := range []string{"INFO", "MSG.NEXT", "DELETE"} {
			l.denyPublish("$JS.API.CONSUMER." + api + ".TOOLBUS_EVENTS." + name)
		}
		subject := "toolbus.replay." + c.session
		msgs := relayed(t, l, subject, bus.TypeConsumerNext, bus.ConsumerNext{Consumer: name, Batch: 10}, bound)
		refusedBy(t, c.user+" pulls s1's consumer", msgs, bus.CodeBadRequest)
		refusedBy(t, c.user+" stops s1's consumer", relayed(t, l, subject, bus.TypeConsumerStop, bus.ConsumerStop{Consumer: name}, bound), bus.CodeBadRequest)
		// An unknown name gets the very same answer: no oracle.
		other := bus.NewConsumerName("replay")
		unknown := relayed(t, l, subject, bus.TypeConsumerNext, bus.ConsumerNext{Consumer: other}, bound)
		refusedBy(t, c.user+" pulls an unknown consumer", unknown, bus.CodeBadRequest)
		if a, b := errorText(t, msgs[0], name), errorText(t, unknown[0], other); a != b {
			t.Fatalf("a foreign consumer's refusal differs from an unknown one's:\n%s\n%s", a, b)
		}
	}
	if _, err := ojs.Consumer(ctx, "TOOLBUS_EVENTS", name); err != nil {
		t.Fatalf("s1's consumer after the attempts: %v", err)
	}
	if _, err := ac.Call(ctx, "s1", greet, client.WithReplyID("r2")); err != nil {
		t.Fatal(err)
	}
	if e := waitType(t, rp, bus.TypeBatchDone); e.ReplyID != "r2" {
		t.Fatalf("s1 replayed %s next", e.ReplyID)
	}
}

// errorText is an io.toolbus.error's code and message, name blanked.
func errorText(t *testing.T, m *nats.Msg, name string) string {
	t.Helper()
	e, err := bus.Decode(m)
	must(t, err)
	var be bus.Error
	must(t, e.DataAs(&be))
	return be.Code + " " + strings.ReplaceAll(be.Message, name, "X")
}

// TestNoPushConsumer: neither the approver, a handler nor the MCP facade
// may create a JetStream consumer (a push consumer's deliver_subject,
// which nats-server checks against nothing, would let it write the handoff
// requests or a bucket's records into a session's events or a bucket);
// approver and handlers read the handoff through router-made consumers,
// each only its own kind and tools; the facade follows the buckets with
// subscriptions.
func TestNoPushConsumer(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	ap, hl, fl := d.conn("approver"), d.conn("handler-picker"), d.conn("facade")
	push, _ := json.Marshal(map[string]any{"stream_name": "KV_toolbus_parked", "config": map[string]any{
		"deliver_subject": "toolbus.events.s1", "filter_subject": "$KV.toolbus_parked.>", "ack_policy": "none"}})
	for _, c := range []struct {
		l        *login
		subjects []string
	}{
		{ap, []string{"$JS.API.CONSUMER.CREATE.KV_toolbus_parked.x.$KV.toolbus_parked.*.*.*", "$JS.API.CONSUMER.CREATE.KV_toolbus_parked.x.$KV.toolbus_parked.>",
			"$JS.API.CONSUMER.CREATE.KV_toolbus_parked", "$JS.API.CONSUMER.DURABLE.CREATE.KV_toolbus_parked.approver",
			"$JS.API.CONSUMER.MSG.NEXT.KV_toolbus_parked.approver", "toolbus.handoff.external.pick", "toolbus.handoff.external"}},
		{hl, []string{"$JS.API.CONSUMER.CREATE.KV_toolbus_parked.x.$KV.toolbus_parked.*.*.*", "$JS.API.CONSUMER.DURABLE.CREATE.KV_toolbus_parked.handler-picker",
			"$JS.API.CONSUMER.INFO.KV_toolbus_parked.handler-picker", "toolbus.handoff.confirm", "toolbus.handoff.confirm.deploy", "toolbus.handoff.external.deploy"}},
		{fl, []string{"$JS.API.CONSUMER.CREATE.KV_toolbus_tools.x.$KV.toolbus_tools.>", "$JS.API.CONSUMER.CREATE.KV_toolbus_mcp.x.$KV.toolbus_mcp.>",
			"$JS.API.CONSUMER.CREATE.OBJ_toolbus_skills.x.$O.toolbus_skills.M.>", "$JS.API.CONSUMER.CREATE.KV_toolbus_parked.x.$KV.toolbus_parked.>",
			"toolbus.handoff.confirm"}},
	} {
		for _, s := range c.subjects {
			must(t, c.l.nc.Publish(s, push))
			c.l.waitViolation("Publish", s)
		}
	}
	// Their own kind and tools still work, through the router.
	ctx := testCtx(t)
	ac := d.conn("session-s1").client()
	for i, tool := range []string{"deploy", "pick"} {
		id := []string{"c1", "c2"}[i]
		if _, err := ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: id, Name: tool}}}, client.WithReplyID("r-"+tool)); err != nil {
			t.Fatal(err)
		}
	}
	if e := readHandoff(t, ap, "toolbus.confirm.deploy"); e.ToolCallID != "c1" {
		t.Fatalf("approver read %+v", e)
	}
	if e := readHandoff(t, hl, "toolbus.external.pick"); e.ToolCallID != "c2" {
		t.Fatalf("handler read %+v", e)
	}
	handoffFilters(t, d, ap, hl)
}

// handoffFilters: the handoff relay is a trust boundary (docs/security.md):
// every follower's consumer reads every call record of P_parked, and the
// router hands out only the records of the kind and tool the subject
// names. A handler of pick, pulling its own consumer dry, gets pick's
// external request and never deploy's confirmation (the approver the
// reverse); a consumer made for another kind or tool — the approver's, or
// one an operator made with the same filter — is refused on the handler's
// subject, and nothing is relayed.
func handoffFilters(t *testing.T, d *deployment, ap, hl *login) {
	t.Helper()
	for _, c := range []struct {
		l       *login
		subject string
		typ     string
		call    string
	}{
		{hl, "toolbus.handoff.external.pick", bus.TypeExternalReq, "c2"},
		{ap, "toolbus.handoff.confirm.deploy", bus.TypeConfirmReq, "c1"},
		{ap, "toolbus.handoff.confirm", bus.TypeConfirmReq, "c1"},
	} {
		ready := relayed(t, c.l, c.subject, bus.TypeHandoffFollow, struct{}{}, bound)
		var r bus.ReplayReady
		if e, err := bus.Decode(ready[0]); err != nil || e.Type != bus.TypeHandoffReady || e.DataAs(&r) != nil {
			t.Fatalf("%s: follow answered %s", c.subject, ready[0].Data)
		}
		msgs := relayed(t, c.l, c.subject, bus.TypeConsumerNext, bus.ConsumerNext{Consumer: r.Consumer, Batch: 256}, bound)
		if last := msgs[len(msgs)-1]; last.Header.Get("Status") != "404" {
			t.Fatalf("%s: the pull ended with %q %s", c.subject, last.Header.Get("Status"), last.Data)
		}
		if len(msgs) != 2 {
			t.Fatalf("%s: %d messages, want one request and the closing status", c.subject, len(msgs))
		}
		e, err := bus.Decode(msgs[0])
		if err != nil || e.Type != c.typ || e.ToolCallID != c.call || msgs[0].Header.Get(jetstream.SequenceHeader) == "" {
			t.Fatalf("%s: got %v %s, want %s of %s", c.subject, err, msgs[0].Data, c.typ, c.call)
		}
		if c.l == ap && c.subject == "toolbus.handoff.confirm.deploy" {
			refusedBy(t, "handler pulls the approver's consumer", relayed(t, hl, "toolbus.handoff.external.pick", bus.TypeConsumerNext, bus.ConsumerNext{Consumer: r.Consumer}, bound), bus.CodeBadRequest)
		}
	}
	ctx := testCtx(t)
	ojs := testkit.JetStream(t, d.conn("operator").nc)
	stream, err := ojs.Stream(ctx, "KV_toolbus_parked")
	must(t, err)
	for _, meta := range []map[string]string{{"toolbus.feed": "confirm.*"}, {"toolbus.feed": "external.deploy"}, {"toolbus.feed": "external.*"}, nil} {
		name := bus.NewConsumerName("handoff")
		_, err = stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: name, FilterSubject: "$KV.toolbus_parked.*.*.*", Metadata: meta,
			AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute})
		must(t, err)
		refusedBy(t, fmt.Sprintf("handler pulls a consumer made for %v", meta), relayed(t, hl, "toolbus.handoff.external.pick", bus.TypeConsumerNext, bus.ConsumerNext{Consumer: name}, bound), bus.CodeBadRequest)
	}
}

// TestRouterRepliesOnlyToInboxes: a reply subject is the sender's choice,
// and the router publishes with the deployment's widest permissions. An
// agent that names the JetStream API, a bucket or a protocol subject as
// its reply gets nothing done there: the router answers no such subject.
// The attacks: deleting the events stream with a tools query's reply, and
// having a relayed replay pull deliver the session's events on a
// confirmation subject (the push consumer's deliver_subject, through the
// router).
func TestRouterRepliesOnlyToInboxes(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	ctx := testCtx(t)
	a := d.conn("session-s1")
	ac := a.client()
	if _, err := ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet"}}}, client.WithReplyID("r1")); err != nil {
		t.Fatal(err)
	}
	ap := d.conn("approver")
	confirms, err := ap.nc.SubscribeSync("toolbus.confirm.deploy")
	must(t, err)
	must(t, ap.nc.Flush())
	query, err := bus.NewEvent(bus.TypeToolsQuery, "test", struct{}{})
	must(t, err)
	qb, err := query.Encode()
	must(t, err)
	for _, reply := range []string{"$JS.API.STREAM.DELETE.TOOLBUS_EVENTS", "$JS.API.STREAM.PURGE.TOOLBUS_EVENTS", "$KV.toolbus_tools.greet", "toolbus.confirm.deploy", "_INBOX.router.x"} {
		must(t, a.nc.PublishMsg(&nats.Msg{Subject: "toolbus.tools.s1", Reply: reply, Data: qb}))
	}
	rp, err := ac.Replay(ctx, "s1")
	must(t, err)
	defer rp.Stop(t.Context())
	waitType(t, rp, bus.TypeBatchDone)
	ojs := testkit.JetStream(t, d.conn("operator").nc)
	name := replayConsumer(t, ojs)
	next, err := bus.NewEvent(bus.TypeConsumerNext, "test", bus.ConsumerNext{Consumer: name, Batch: 10})
	must(t, err)
	nb, err := next.Encode()
	must(t, err)
	must(t, a.nc.PublishMsg(&nats.Msg{Subject: "toolbus.replay.s1", Reply: "toolbus.confirm.deploy", Data: nb}))
	// A well-formed request after them is answered: the router is past
	// the ones above.
	if _, err := ac.Tools(ctx, "s1", "", nil); err != nil {
		t.Fatal(err)
	}
	st, err := ojs.Stream(ctx, "TOOLBUS_EVENTS")
	must(t, err)
	if info, err := st.Info(ctx); err != nil || info.State.Msgs == 0 {
		t.Errorf("the events stream after the attack: %v %+v", err, info)
	}
	kv, err := ojs.KeyValue(ctx, "toolbus_tools")
	must(t, err)
	if e, err := kv.Get(ctx, "greet"); err != nil || strings.Contains(string(e.Value()), bus.TypeToolsList) {
		t.Errorf("greet's definition after the attack: %v", err)
	}
	if m, err := confirms.NextMsg(time.Second); err == nil {
		t.Fatalf("the router published on toolbus.confirm.deploy: %s", m.Data)
	}
}
