package security

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestProbePush: what nats-server does with an agent's push consumer.
func TestProbePush(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	agent := d.conn("session-s1")
	ap := d.conn("approver")
	sub, err := ap.nc.SubscribeSync("toolbus.confirm.deploy")
	must(t, err)
	must(t, ap.nc.Flush())
	js, err := jetstream.New(agent.nc)
	must(t, err)
	ctx := testCtx(t)
	_, err = js.CreateConsumer(ctx, "TOOLBUS_EVENTS", jetstream.ConsumerConfig{Name: "evil", FilterSubject: "toolbus.events.s1", DeliverPolicy: jetstream.DeliverAllPolicy})
	t.Logf("pull named: %v", err)
	_, err = js.CreateConsumer(ctx, "TOOLBUS_EVENTS", jetstream.ConsumerConfig{Durable: "evil2", FilterSubject: "toolbus.events.s1"})
	t.Logf("durable via CREATE: %v", err)
	// a push consumer through the raw API
	req := `{"stream_name":"TOOLBUS_EVENTS","config":{"name":"push1","deliver_subject":"toolbus.confirm.deploy","filter_subject":"toolbus.events.s1","ack_policy":"none","deliver_policy":"all"}}`
	m, err := agent.nc.Request("$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.push1.toolbus.events.s1", []byte(req), 5*time.Second)
	if err == nil {
		t.Logf("push create: %s", m.Data)
	} else {
		t.Logf("push create: %v", err)
	}
	if _, err := agent.client().Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet", Input: client.Input(map[string]string{"who": "x"})}}}); err != nil {
		t.Fatal(err)
	}
	if msg, err := sub.NextMsg(3 * time.Second); err == nil {
		t.Logf("HOLE: approver got on %s: %.200s", msg.Subject, msg.Data)
	} else {
		t.Logf("no delivery: %v", err)
	}
	req = `{"stream_name":"TOOLBUS_EVENTS","config":{"name":"push2","deliver_subject":"$KV.toolbus_sessions.s2","filter_subject":"toolbus.events.s1","ack_policy":"none","deliver_policy":"all"}}`
	m, err = agent.nc.Request("$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.push2.toolbus.events.s1", []byte(req), 5*time.Second)
	if err == nil {
		t.Logf("push2 create: %s", m.Data)
	}
	op := d.conn("operator")
	ojs, _ := jetstream.New(op.nc)
	kv, err := ojs.KeyValue(ctx, "toolbus_sessions")
	must(t, err)
	time.Sleep(time.Second)
	if e, err := kv.Get(ctx, "s2"); err == nil {
		t.Logf("HOLE: KV s2 = %.200s", e.Value())
	} else {
		t.Logf("kv s2: %v", err)
	}
	// the shared agent: wildcard filter
	all := d.conn("agent")
	m, err = all.nc.Request("$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS.w1.toolbus.events.*", []byte(`{"stream_name":"TOOLBUS_EVENTS","config":{"name":"w1","filter_subject":"toolbus.events.*"}}`), 5*time.Second)
	t.Logf("shared wildcard: %v %v", err, m)
}
