package security

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/presence"
)

// TestAttackPresence (protocol 1.13): the routers' presence (P_routers)
// decides whether a router that ended a lone parked call is gone, and so
// whether the others publish that batch's events again. A key forged by
// any other login would keep a dead router present (its lone batches would
// never get batch.done); a deleted or purged one would make a live router
// look gone. With the generated permissions NATS refuses every other role's
// put and delete of a presence key (a KV delete is a publish on the key's
// subject) and the JetStream API that removes keys or the bucket, the
// operator's included, and every role's reading of the keys; the router's
// own key is there, unchanged by the attempts.
func TestAttackPresence(t *testing.T) {
	d := newDeployment(t)
	js := testkit.JetStream(t, d.conn("router").nc)
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	kv, err := js.KeyValue(ctx, "toolbus_routers")
	must(t, err)
	keys, err := kv.Keys(ctx)
	must(t, err)
	if len(keys) != 1 {
		t.Fatalf("presence keys %v, want the router's", keys)
	}
	id := keys[0]
	before, err := kv.Get(ctx, id)
	must(t, err)

	forged, _ := json.Marshal(presence.Value{Router: "dead", Instance: "forged", HeartbeatMS: 500})
	key := "$KV.toolbus_routers." + id
	for _, user := range []string{"worker", "agent", "session-s1", "approver", "handler-picker", "facade", "operator"} {
		l := d.conn(user)
		if user != "operator" {
			// The operator may publish $JS.API (denied below), not $KV.
			must(t, l.nc.PublishMsg(&nats.Msg{Subject: key, Header: nats.Header{"KV-Operation": {"DEL"}}}))
			l.waitViolation("Publish", key)
			l.denyPublish("$KV.toolbus_routers.dead") // a forged router
			l.denySubscribe("$KV.toolbus_routers.>")
		}
		for _, api := range []string{"STREAM.PURGE", "STREAM.MSG.DELETE", "STREAM.DELETE", "STREAM.UPDATE"} {
			l.denyPublish("$JS.API." + api + ".KV_toolbus_routers")
		}
		if user == "operator" {
			// Through the JetStream client, as `nats kv del` would.
			ljs, err := jetstream.New(l.nc)
			must(t, err)
			lkv, err := ljs.KeyValue(shortCtx(t), "toolbus_routers")
			if err == nil {
				if _, err := lkv.Put(shortCtx(t), "dead", forged); err == nil {
					t.Fatal("the operator forged a presence key")
				}
				if err := lkv.Delete(shortCtx(t), id); err == nil {
					t.Fatal("the operator deleted the router's presence key")
				}
			}
		}
	}
	after, err := kv.Get(ctx, id)
	must(t, err)
	var v presence.Value
	must(t, json.Unmarshal(after.Value(), &v))
	if after.Operation() != jetstream.KeyValuePut || v.Router != id || string(after.Value()) != string(before.Value()) {
		t.Fatalf("the router's key after the attacks: %s (%v)", after.Value(), after.Operation())
	}
	if _, err := kv.Get(context.WithoutCancel(ctx), "dead"); err == nil {
		t.Fatal("a forged router is present")
	}
}
