package security

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
)

// TestAgentConfined: an agent of session s1 cannot bypass the router on
// P.exec.>, register tools, run admin verbs, call or cancel in another
// session, read another session's events (live, replayed or by sniffing
// inboxes and exec requests), or answer a parked call. NATS refuses each
// one itself.
func TestAgentConfined(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	a := d.conn("session-s1")
	for _, s := range []string{"toolbus.exec.greet", "toolbus.exec.deploy", "toolbus.register", "toolbus.register.greet", "toolbus.admin.status",
		"toolbus.admin.session.mode", "toolbus.admin.parked.list", "toolbus.call.s2", "toolbus.tools.s2", "toolbus.cancel.s2", "toolbus.events.s1",
		"toolbus.answer.pick", "toolbus.answer.deploy", "toolbus.external.pick", "$KV.toolbus_sessions.s2",
		"$JS.API.STREAM.DELETE.TOOLBUS_EVENTS", "$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.x"} {
		a.denyPublish(s)
	}
	for _, s := range []string{"toolbus.events.s2", "toolbus.events.>", "toolbus.exec.>", "toolbus.call.>", "_INBOX.>",
		"_INBOX.router.>", "_INBOX.session-s2.>", "toolbus.confirm.>", "toolbus.external.>"} {
		a.denySubscribe(s)
	}
	// Replaying another session's events needs a consumer filtered on it,
	// which the JetStream API refuses to create.
	js, err := jetstream.New(a.nc)
	must(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := js.OrderedConsumer(ctx, "TOOLBUS_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"toolbus.events.s2"}}); err == nil {
		t.Fatal("an ordered consumer on another session's events was created")
	}
	a.waitViolation("Publish", "$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.*.toolbus.events.s2")
	// Through the client: a call in another session and an answer fail.
	ac := a.client()
	if _, err := ac.Call(shortCtx(t), "s2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet"}}}); err == nil {
		t.Fatal("a call in another session went through")
	}
	// A parked call of s1's own batch stays parked: the agent cannot
	// confirm it itself.
	reply, err := ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy"}}}, client.WithReplyID("r1"))
	must(t, err)
	if len(reply.Parked) != 1 {
		t.Fatalf("deploy did not park: %+v", reply)
	}
	yes := true
	if err := ac.Parked().Answer(shortCtx(t), "deploy", "s1", "r1", "c1", bus.Answer{Confirmed: &yes}); err == nil {
		t.Fatal("the agent confirmed its own call")
	}
	var parked struct {
		Parked []bus.Parked `json:"parked"`
	}
	must(t, d.conn("operator").client().Admin(testCtx(t), "parked.list", "s1", struct{}{}, &parked))
	if len(parked.Parked) != 1 {
		t.Fatalf("the call is no longer parked: %+v", parked)
	}
}

// TestAgentWithoutInboxPrefix: a connection that ignores its role's inbox
// prefix cannot even receive its replies.
func TestAgentWithoutInboxPrefix(t *testing.T) {
	d := newDeployment(t)
	nc, err := natsconn.Config{URLs: d.srv.ClientURL(), NKey: security.SeedFile(d.dir, "session-s1")}.Connect("t")
	must(t, err)
	defer nc.Close()
	_, err = client.New(nc, client.Config{}).Tools(shortCtx(t), "s1", "", nil)
	if err == nil {
		t.Fatal("a request with the default _INBOX got its reply")
	}
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestAgentOfEverySession: the agent role may work in any session but
// still not reach P.exec.>, answers, registration or admin verbs.
func TestAgentOfEverySession(t *testing.T) {
	d := newDeployment(t)
	a := d.conn("agent")
	for _, s := range []string{"toolbus.exec.greet", "toolbus.answer.pick", "toolbus.register", "toolbus.register.greet", "toolbus.admin.status", "toolbus.external.pick"} {
		a.denyPublish(s)
	}
	for _, s := range []string{"toolbus.exec.>", "toolbus.call.>", "_INBOX.>", "toolbus.confirm.>"} {
		a.denySubscribe(s)
	}
}

// TestWorkerConfined: a worker publishes only registrations, progress and
// the replies to the exec requests it received; it cannot call tools,
// answer parked calls, forge handoff requests, execute on other workers or
// read calls and replies.
func TestWorkerConfined(t *testing.T) {
	d := newDeployment(t)
	w := d.conn("worker")
	for _, s := range []string{"toolbus.call.s1", "toolbus.tools.s1", "toolbus.exec.greet", "toolbus.answer.pick",
		"toolbus.external.pick", "toolbus.confirm.deploy", "toolbus.admin.tools.delete", "$JS.API.STREAM.INFO.TOOLBUS_EVENTS",
		"$KV.toolbus_ledger.s1.r1.c1", "_INBOX.session-s1.abc", "_INBOX.agent.abc"} {
		w.denyPublish(s)
	}
	for _, s := range []string{"toolbus.call.>", "toolbus.events.>", "toolbus.answer.>", "toolbus.external.>", "_INBOX.>"} {
		w.denySubscribe(s)
	}
}

// TestHandlerConfined: a handler answers and reads only its own tools.
func TestHandlerConfined(t *testing.T) {
	d := newDeployment(t)
	h := d.conn("handler-picker")
	for _, s := range []string{"toolbus.answer.deploy", "toolbus.answer.other", "toolbus.exec.pick", "toolbus.call.s1", "toolbus.admin.parked.list"} {
		h.denyPublish(s)
	}
	for _, s := range []string{"toolbus.external.other", "toolbus.external.>", "toolbus.confirm.pick", "toolbus.events.>", "_INBOX.>"} {
		h.denySubscribe(s)
	}
	js, err := jetstream.New(h.nc)
	must(t, err)
	ctx := shortCtx(t)
	if _, err := js.OrderedConsumer(ctx, "KV_toolbus_parked", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"$KV.toolbus_parked.>"}}); err == nil {
		t.Fatal("the handler read the parked records itself")
	}
	h.waitViolation("Publish", "$JS.API.CONSUMER.CREATE.KV_toolbus_parked.*.$KV.toolbus_parked.>")
}

// TestApproverAndOperatorConfined: neither may execute tools directly nor
// register as a worker; the approver cannot call tools or read events.
func TestApproverAndOperatorConfined(t *testing.T) {
	d := newDeployment(t)
	ap := d.conn("approver")
	for _, s := range []string{"toolbus.exec.deploy", "toolbus.call.s1", "toolbus.register", "toolbus.register.greet", "toolbus.admin.session.mode", "toolbus.external.pick"} {
		ap.denyPublish(s)
	}
	for _, s := range []string{"toolbus.events.>", "toolbus.external.pick", "toolbus.exec.>", "_INBOX.>"} {
		ap.denySubscribe(s)
	}
	op := d.conn("operator")
	for _, s := range []string{"toolbus.exec.deploy", "toolbus.register", "toolbus.register.greet", "toolbus.external.pick", "toolbus.events.s1"} {
		op.denyPublish(s)
	}
	for _, s := range []string{"toolbus.exec.>", "toolbus.call.>", "_INBOX.>"} {
		op.denySubscribe(s)
	}
}

// TestWrongSecretRefused: a seed the server does not know (another
// deployment's) is refused at login with a message that says so, and so is
// a connection without credentials.
func TestWrongSecretRefused(t *testing.T) {
	d := newDeployment(t)
	other := t.TempDir() + "/other"
	_, err := security.Generate(other, "", security.Spec{})
	must(t, err)
	_, err = natsconn.Config{URLs: d.srv.ClientURL(), NKey: security.SeedFile(other, "router")}.Connect("t", nats.MaxReconnects(0))
	if err == nil || !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "refused the login with the nkey seed file") {
		t.Fatalf("another deployment's seed: %v", err)
	}
	_, err = natsconn.Config{URLs: d.srv.ClientURL()}.Connect("t", nats.MaxReconnects(0))
	if err == nil || !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("no credentials: %v", err)
	}
	// Generating into a directory that holds a configuration overwrites nothing.
	if _, err := security.Generate(other, "", security.Spec{}); err == nil {
		t.Fatal("Generate overwrote an existing configuration")
	}
}
