package security

import (
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackWorkerEventsThroughJetStreamReply (red team 28c, protocol
// 1.18): a worker may not publish on P.events.>, but NATS does not check a
// reply subject against the sender's permissions, and JetStream answers
// on it with its own rights: a durable pull (CONSUMER.MSG.NEXT) or an
// object chunk's publish acknowledgement, sent with reply
// toolbus.events.s1, would make the server itself publish into session
// s1's events. It does: a 404 and a 408 status, a publish acknowledgement
// and a consumer's info land in s1's events and in the events stream, whose
// MaxBytes (DiscardOld) a flood of them would empty of every session's real
// events; a queued durable exec, pulled so, would land there with its
// session's input, context and user. A known gap (docs/security.md): NATS
// has no permission on reply subjects.
func TestAttackWorkerEventsThroughJetStreamReply(t *testing.T) {
	if os.Getenv("TOOLBUS_RUN_BUGS") == "" {
		t.Skip("BUG (known gap, docs/security.md): JetStream answers a worker's request on toolbus.events.s1")
	}
	d := newDeployment(t)
	d.startWorker() // batchjob's work consumer exists
	op := d.conn("operator")
	watch, err := op.nc.SubscribeSync("toolbus.events.s1")
	must(t, err)
	must(t, op.nc.Flush())
	ojs := testkit.JetStream(t, op.nc)
	ctx := testCtx(t)
	st, err := ojs.Stream(ctx, "TOOLBUS_EVENTS")
	must(t, err)
	before, err := st.Info(ctx)
	must(t, err)

	w := d.conn("worker")
	for _, m := range []*nats.Msg{
		{Subject: "$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_WORK.toolbus-work-batchjob", Data: []byte(`{"batch":1,"expires":100000000}`)},
		{Subject: "$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_WORK.toolbus-work-batchjob", Data: []byte(`{"batch":1,"no_wait":true}`)},
		{Subject: "$O.toolbus_outputs.C.attack", Data: []byte("chunk")},
		{Subject: "$JS.API.CONSUMER.INFO.TOOLBUS_WORK.toolbus-work-batchjob"},
	} {
		m.Reply = "toolbus.events.s1"
		must(t, w.nc.PublishMsg(m))
	}
	must(t, w.nc.Flush())
	for {
		m, err := watch.NextMsg(time.Second)
		if err != nil {
			break
		}
		t.Errorf("a worker's request made JetStream publish on s1's events: %v %.200s", m.Header, m.Data)
	}
	after, err := st.Info(ctx)
	must(t, err)
	if after.State.Msgs != before.State.Msgs {
		t.Errorf("the events stream went from %d to %d messages", before.State.Msgs, after.State.Msgs)
	}
	w.mu.Lock()
	t.Logf("worker's errors: %v", w.errs)
	w.mu.Unlock()
}
