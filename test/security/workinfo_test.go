package security

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestWorkerFindsItsConsumerAtOnce (session 37): a tool runner's account
// has no JetStream, and nats-server gives such an account an import of
// $JS.API.> from its system account unless an import of the account's own
// shadows $JS.API.INFO. That import took the worker's CONSUMER.INFO of its
// work consumer too and answered 503 "JetStream not enabled for account"
// before the main account did: a durable tool's worker waited 1-65 s for
// its first call. Each INFO now has one answer, the consumer's, and the
// first durable call runs within seconds of the registration. No runner
// may use the $JS.API.INFO import that keeps the server's away.
func TestWorkerFindsItsConsumerAtOnce(t *testing.T) {
	d := newDeployment(t)
	wl := d.startWorker()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	reply, err := d.conn("session-s2").client().Call(ctx, "s2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "batchjob"}}}, client.WithReplyID("r1"))
	if err != nil || len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess {
		t.Fatalf("batchjob within %v of the registration: %+v %v", bound, reply, err)
	}
	consumerInfoOnce(t, wl.nc, "batchjob")
	wl.noViolations()
	wl.denyPublish("$JS.API.INFO")
	d.conn("bridge").denyPublish("$JS.API.INFO")
}

// consumerInfoOnce asks the info of tool's work consumer a few times as a
// worker on nc and fails unless each request has one answer, not an error.
func consumerInfoOnce(t *testing.T, nc *nats.Conn, tool string) {
	t.Helper()
	s := bus.NewSubjects("")
	subj := "$JS.API.CONSUMER.INFO." + s.Stream(bus.StreamWork) + "." + s.Workers.WorkConsumer(tool)
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	must(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	for i := range 5 { // a second answer of one would be read as the next's
		must(t, nc.PublishRequest(subj, inbox, nil))
		m, err := sub.NextMsg(bound)
		must(t, err)
		var info struct {
			Error *struct{ Code int } `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &info); err != nil || info.Error != nil {
			t.Fatalf("answer %d to the worker's %s: %s", i, subj, m.Data)
		}
	}
	must(t, nc.Flush())
	if n, _, _ := sub.Pending(); n != 0 {
		m, _ := sub.NextMsg(0)
		t.Fatalf("%d more answers, first %s", n, m.Data)
	}
}
