package security

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/security"
)

// TestAttackWorkerEventsThroughJetStreamReply (red team 28c, closed in
// session 29): a worker may not publish on P.events.>, but NATS does not
// check a reply subject against the sender's permissions, and JetStream
// answers on it with its own rights: a durable pull (CONSUMER.MSG.NEXT) or
// an object chunk's publish acknowledgement, sent with reply
// toolbus.events.s1, made the server itself publish into session s1's
// events (a 404 and a 408 status, a publish acknowledgement, a consumer's
// info), and a flood of them would have emptied the events stream
// (MaxBytes, DiscardOld) of every session's real events. The worker and
// bridge logins are now in accounts of their own (docs/security.md
// "Accounts"): their JetStream requests reach the main account as service
// imports, whose answers go back to the sender's account only. Nothing
// lands in s1's events or the stream, and the same requests with the
// login's own inbox are still answered.
func TestAttackWorkerEventsThroughJetStreamReply(t *testing.T) {
	d := newDeployment(t)
	d.startWorker() // batchjob's work consumer exists
	op, br := d.conn("operator"), d.conn(security.RoleBridge)
	watch, err := op.nc.SubscribeSync("toolbus.events.*")
	must(t, err)
	must(t, op.nc.Flush())
	// The bridge's account does not get the worker's answers either.
	bwatch, err := br.nc.SubscribeSync("toolbus.events.s1")
	must(t, err)
	must(t, br.nc.Flush())
	ojs := testkit.JetStream(t, op.nc)
	ctx := testCtx(t)
	st, err := ojs.Stream(ctx, "TOOLBUS_EVENTS")
	must(t, err)
	before, err := st.Info(ctx)
	must(t, err)

	for user, events := range map[string]string{security.RoleWorker: "toolbus.events.s1", security.RoleBridge: "toolbus.events.s2"} {
		w := d.conn(user)
		for _, m := range []*nats.Msg{
			{Subject: "$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_WORK.toolbus-work-batchjob", Data: []byte(`{"batch":1,"expires":100000000}`)},
			{Subject: "$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_WORK.toolbus-work-batchjob", Data: []byte(`{"batch":1,"no_wait":true}`)},
			{Subject: "$O.toolbus_outputs.C.attack", Data: []byte("chunk")},
			{Subject: "$JS.API.CONSUMER.INFO.TOOLBUS_WORK.toolbus-work-batchjob"},
		} {
			m.Reply = events
			must(t, w.nc.PublishMsg(m))
			// The same request with the login's own inbox is answered.
			m.Reply = ""
			if _, err := w.nc.RequestMsg(m, bound); err != nil {
				t.Errorf("%s: %s with its own inbox: %v", user, m.Subject, err)
			}
		}
		w.noViolations()
	}
	// The first pull's 408 comes after its 100 ms.
	for {
		m, err := watch.NextMsg(time.Second)
		if err != nil {
			break
		}
		t.Errorf("a worker's or bridge's request made JetStream publish on %s: %v %.200s", m.Subject, m.Header, m.Data)
	}
	if m, err := bwatch.NextMsg(time.Millisecond); err == nil {
		t.Errorf("the worker's request reached the bridge's account: %v %.200s", m.Header, m.Data)
	}
	after, err := st.Info(ctx)
	must(t, err)
	if after.State.Msgs != before.State.Msgs || after.State.LastSeq != before.State.LastSeq {
		t.Errorf("the events stream went from %d messages (last %d) to %d (last %d)", before.State.Msgs, before.State.LastSeq, after.State.Msgs, after.State.LastSeq)
	}
}
