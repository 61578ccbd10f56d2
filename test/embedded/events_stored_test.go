package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

// lastStored returns the newest event the events stream holds for session.
func lastStored(t *testing.T, nc *nats.Conn, session string) *bus.Event {
	t.Helper()
	e, err := newestStored(t, nc, session)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// parkedRecord reads a call's record from P_parked, as an agent that
// reconnects may (bus.ParkRecord), from the bucket's stream leader as the
// product reads (store.KV): on a cluster, jetstream's own Get is a direct
// get that any replica answers, and a follower that has not applied the
// write yet answers "key not found" though the write was acknowledged.
func parkedRecord(t *testing.T, e *env, session, reply, call string) *bus.ParkRecord {
	t.Helper()
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "toolbus_parked")
	if err != nil {
		t.Fatal(err)
	}
	v, err := store.NewKV(js, kv, e.replicas()).Get(t.Context(), bus.CallKey(session, reply, call))
	if err != nil {
		t.Fatal(err)
	}
	var rec bus.ParkRecord
	if err := json.Unmarshal(v.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec.Rev = v.Revision()
	return &rec
}

// newestStored is lastStored with the error returned.
func newestStored(t *testing.T, nc *nats.Conn, session string) (*bus.Event, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	s, err := js.Stream(ctx, "TOOLBUS_EVENTS")
	if err != nil {
		return nil, err
	}
	m, err := s.GetLastMsgForSubject(ctx, "toolbus.events."+session)
	if err != nil {
		return nil, fmt.Errorf("no event stored for %s: %w", session, err)
	}
	return bus.Decode(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
}

// A writing batch's batch.done is in the events stream, and a parked
// call's record in P_parked, by the time the reply arrives: an agent that
// reconnects right after finds them there. A read-only batch's batch.done is published but not awaited
// (docs/protocol.md 3.4): it is stored, but maybe after the reply.
func TestEventsStoredBeforeReply(t *testing.T) {
	e := newEnv(t, 1)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "quick", ReadOnly: true, ConcurrencySafe: true, InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("done"), nil })
		handle(t, w, bus.ToolDef{Name: "put", Idempotent: true, InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("put"), nil })
	})
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	for i := range 20 {
		reply := client.NewReplyID()
		e.call(t, "s1", []bus.Call{{ID: "c1", Name: "put"}}, client.WithReplyID(reply))
		if got := lastStored(t, e.nc, "s1"); got.Type != bus.TypeBatchDone || got.ReplyID != reply {
			t.Fatalf("batch %d: newest stored event %s of %s, want batch.done of %s", i, got.Type, got.ReplyID, reply)
		}
		reply = client.NewReplyID()
		e.callParked(t, "s2", reply, bus.Call{ID: "p1", Name: "ext"})
		// call.parked is live only (docs/protocol.md 3.4, 1.6): what a
		// reconnecting agent finds is the parked record, stored before
		// the reply.
		if _, err := newestStored(t, e.nc, "s2"); err == nil {
			t.Fatalf("batch %d: call.parked was stored", i)
		}
		if rec := parkedRecord(t, e, "s2", reply, "p1"); rec.Status != bus.ParkParked {
			t.Fatalf("batch %d: parked record %+v", i, rec)
		}
		reply = client.NewReplyID()
		e.call(t, "s3", []bus.Call{{ID: "r1", Name: "quick"}}, client.WithReplyID(reply))
		testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
			got, err := newestStored(t, e.nc, "s3")
			if err != nil {
				return err
			}
			if got.Type != bus.TypeBatchDone || got.ReplyID != reply {
				return fmt.Errorf("batch %d: newest stored event %s of %s, want batch.done of %s", i, got.Type, got.ReplyID, reply)
			}
			return nil
		})
	}
}
