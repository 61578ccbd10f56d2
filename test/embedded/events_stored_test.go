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
	v := leaderEntry(t, e, "toolbus_parked", bus.CallKey(session, reply, call))
	var rec bus.ParkRecord
	if err := json.Unmarshal(v.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec.Rev = v.Revision()
	return &rec
}

// leaderEntry reads key of bucket from the bucket's stream leader, as the
// routers read (store.KV), failing the test when it cannot.
func leaderEntry(t *testing.T, e *env, bucket, key string) jetstream.KeyValueEntry {
	t.Helper()
	js := testkit.JetStream(t, e.nc)
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	v, err := store.NewKV(js, kv, e.replicas()).Get(t.Context(), key)
	if err != nil {
		t.Fatalf("%s/%s: %v", bucket, key, err)
	}
	return v
}

// newestStored is lastStored with the error returned.
func newestStored(t *testing.T, nc *nats.Conn, session string) (*bus.Event, error) {
	js := testkit.JetStream(t, nc)
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

// ledgerRecord reads a call's entry from P_ledger as the routers do, from
// the bucket's stream leader (store.KV), and fails unless it holds a result.
func ledgerRecord(t *testing.T, e *env, session, reply, call string) bus.Result {
	t.Helper()
	v := leaderEntry(t, e, e.client.Subjects().Bucket(bus.BucketLedger), bus.CallKey(session, reply, call))
	var entry struct {
		State  string      `json:"state"`
		Result *bus.Result `json:"result"`
	}
	if err := json.Unmarshal(v.Value(), &entry); err != nil || entry.State != "done" || entry.Result == nil {
		t.Fatalf("ledger entry of %s/%s/%s is %s (%v), want a recorded result", session, reply, call, v.Value(), err)
	}
	return *entry.Result
}

// storedDone waits until the events stream's newest event of session is the
// batch.done of reply, other than the event notID, and returns it.
func storedDone(t *testing.T, e *env, session, reply, notID string) *bus.Event {
	t.Helper()
	var done *bus.Event
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		got, err := newestStored(t, e.nc, session)
		if err != nil {
			return err
		}
		if got.Type != bus.TypeBatchDone || got.ReplyID != reply || got.ID == notID {
			return fmt.Errorf("newest stored event %s %s of %s, want batch.done of %s", got.Type, got.ID, got.ReplyID, reply)
		}
		done = got
		return nil
	})
	return done
}

// What an agent that reconnects right after a reply finds stored
// (docs/protocol.md 3.4, 1.15). Awaited, so in the events stream before
// the reply: the batch.done of a re-sent copy of a writing batch (its
// write answered from the ledger, not recorded by this run), of a durable
// call, of a writing batch that asks "events": "calls"; a parked call's
// record is in P_parked (call.parked is live only, 1.6). Published, not
// awaited, so stored but maybe after the reply: the batch.done of a
// read-only batch and of a batch whose writes' ledger records landed
// before the reply, whose results P_ledger holds by the reply.
func TestEventsStoredBeforeReply(t *testing.T) {
	e := newEnv(t, 1)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "quick", ReadOnly: true, ConcurrencySafe: true, InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("done"), nil })
		handle(t, w, bus.ToolDef{Name: "put", Idempotent: true, InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("put"), nil })
		handle(t, w, durableDef("job"), func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("job"), nil })
	})
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	e.waitLive("job")
	awaited := func(i int, session, reply, what string) {
		t.Helper()
		if got := lastStored(t, e.nc, session); got.Type != bus.TypeBatchDone || got.ReplyID != reply {
			t.Fatalf("batch %d (%s): newest stored event %s of %s, want batch.done of %s", i, what, got.Type, got.ReplyID, reply)
		}
	}
	for i := range 10 {
		// A write whose record landed: in P_ledger by the reply, its
		// batch.done stored soon after.
		reply := client.NewReplyID()
		e.call(t, "s1", []bus.Call{{ID: "c1", Name: "put"}}, client.WithReplyID(reply))
		if res := ledgerRecord(t, e, "s1", reply, "c1"); textOf(res) != "put" {
			t.Fatalf("batch %d: ledger holds %s", i, jsonOf(res))
		}
		first := storedDone(t, e, "s1", reply, "")
		// Its copy, re-sent: the write's result comes from the ledger, and
		// the copy's own batch.done (a new id) is stored before its reply.
		wantSuccess(t, e.call(t, "s1", []bus.Call{{ID: "c1", Name: "put"}}, client.WithReplyID(reply)).Results[0], "put")
		if got := lastStored(t, e.nc, "s1"); got.Type != bus.TypeBatchDone || got.ReplyID != reply || got.ID == first.ID {
			t.Fatalf("batch %d (re-sent copy): newest stored event %s %s of %s, want the copy's batch.done of %s", i, got.Type, got.ID, got.ReplyID, reply)
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
		storedDone(t, e, "s3", reply, "")

		reply = client.NewReplyID()
		e.call(t, "s4", []bus.Call{{ID: "d1", Name: "job"}, {ID: "w1", Name: "put"}}, client.WithReplyID(reply))
		awaited(i, "s4", reply, "a durable call beside a write")

		reply = client.NewReplyID()
		e.batch(t, "s5", bus.Batch{Calls: []bus.Call{{ID: "w1", Name: "put"}}, Events: bus.EventsCalls}, client.WithReplyID(reply))
		awaited(i, "s5", reply, `a write, "events": "calls"`)
	}
}
