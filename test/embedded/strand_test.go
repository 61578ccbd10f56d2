package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/worker"
)

// A router ends a parked call (here the answer's compare-and-set), publishes
// its call.result and dies before the result joins the batch's
// continuation (parked.Store.Resume): the continuation waits for a result
// no answer can bring, and its queued call. Once a lease has passed, a
// router mends it (docs/protocol.md 6.1, 1.11): the result joins, the batch
// resumes, the queued call runs once, and the events stream holds one
// call.result per call and one batch.done. Without the mend the batch never
// completes. A copy of the batch re-sent afterwards with "events": "calls"
// reports the parked call's result from its record under the same id
// (3.1), so the stream still holds one. The router dies after its
// call.result, or before it.
func TestStrandedBatchMendedAfterLease(t *testing.T) {
	for _, published := range []bool{true, false} {
		t.Run(fmt.Sprintf("call.result published %v", published), func(t *testing.T) { strandAndMend(t, published) })
	}
}

func strandAndMend(t *testing.T, published bool) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "solo", ConcurrencySafe: false}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			runs.Add(1)
			return textResult("solo ran"), nil
		})
	})
	e.waitLive("solo")
	const reply = "r1"
	// c1's input is its record's only: the continuation holds its digest (1.20).
	calls := []bus.Call{{ID: "c1", Name: "ext", Input: bigInput(2 << 10)}, {ID: "c2", Name: "solo"}}
	r := e.callParked(t, "s1", reply, calls...)
	if len(r.Parked) != 2 || r.Parked[1].Kind != bus.KindQueued {
		t.Fatalf("reply %s", jsonOf(r))
	}
	js := testkit.JetStream(t, e.nc)
	kv, err := js.KeyValue(t.Context(), "toolbus_parked")
	if err != nil {
		t.Fatal(err)
	}
	// The dead router's work: the answer's one compare-and-set (parked →
	// done, the result with it), then (published) the call.result event,
	// with the id of the call; no Resume.
	key := bus.CallKey("s1", reply, "c1")
	entry, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var rec bus.ParkRecord
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	res := bus.Result{ID: "c1", Name: "ext", State: bus.StateSuccess, Output: bus.Text("answered")}
	rec.Status, rec.Result = bus.ParkDone, &res
	rec.Answer = &bus.Answer{State: res.State, Output: res.Output}
	rec.AnsweredBy, rec.AnsweredAt = "test/handler", time.Now().UTC()
	v, err := json.Marshal(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(t.Context(), key, v, entry.Revision()); err != nil {
		t.Fatal(err)
	}
	ev, err := bus.NewEvent(bus.TypeCallResult, "toolbus/router/gone", res)
	if err != nil {
		t.Fatal(err)
	}
	ev.ID = parked.ResultID("s1", reply, "c1")
	ev.SessionID, ev.ReplyID, ev.ToolCallID, ev.Subject = "s1", reply, "c1", "c1"
	m, err := ev.StoredMsg("toolbus.events.s1")
	if err != nil {
		t.Fatal(err)
	}
	if published {
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	// count is how many events of each kind the stream holds for the batch
	// ("call.result:c1", "batch.done").
	count := func() (map[string]int, []*bus.Event, error) {
		evs, err := stored(t, e.nc, "s1")
		n := map[string]int{}
		for _, ev := range evs {
			if ev.ReplyID == reply {
				k := ev.Type[len("io.toolbus."):]
				if ev.ToolCallID != "" {
					k += ":" + ev.ToolCallID
				}
				n[k]++
			}
		}
		return n, evs, err
	}
	var evs []*bus.Event
	testkit.CheckFor(t, 3*bound, 20*time.Millisecond, func() error {
		n, all, err := count()
		if err != nil || n["batch.done"] == 0 {
			return fmt.Errorf("events %v (%v): no batch.done yet", n, err)
		}
		evs = all
		return nil
	})
	n, _, err := count()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"call.result:c1": 1, "call.result:c2": 1, "batch.done": 1}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Fatalf("stored events of the batch %v, want %v", n, want)
	}
	if runs.Load() != 1 {
		t.Fatalf("the queued call ran %d times, want once", runs.Load())
	}
	for _, ev := range evs {
		if ev.Type == bus.TypeCallResult && ev.ToolCallID == "c1" && (ev.ID != parked.ResultID("s1", reply, "c1") || (ev.Source == "toolbus/router/gone") != published) {
			t.Fatalf("c1's call.result: id %s from %s", ev.ID, ev.Source)
		}
		if ev.Type != bus.TypeBatchDone {
			continue
		}
		var bd bus.BatchDone
		if err := ev.DataAs(&bd); err != nil || len(bd.Results) != 2 || textOf(bd.Results[0]) != "answered" || textOf(bd.Results[1]) != "solo ran" {
			t.Fatalf("batch.done %s (%v)", ev.Data, err)
		}
	}
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		if _, err := kv.Get(t.Context(), "s1."+reply); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("continuation still there (%v)", err)
		}
		return nil
	})

	// The agent, having lost it all, sends the batch again asking for
	// every call's event: c1's result comes from its record, under its id.
	live := e.watch(t, "s1")
	again, err := e.client.Call(testCtx(t), "s1", bus.Batch{Calls: calls, Events: bus.EventsCalls}, client.WithReplyID(reply))
	if err != nil || len(again.Results) != 2 || textOf(again.Results[0]) != "answered" {
		t.Fatalf("re-sent: %s %v", jsonOf(again), err)
	}
	var copied *bus.Event
	for _, ev := range collect(t, live, batchDone(reply)) {
		if ev.Type == bus.TypeCallResult && ev.ToolCallID == "c1" {
			copied = ev
		}
	}
	if copied == nil || copied.ID != parked.ResultID("s1", reply, "c1") {
		t.Fatalf("the copy's call.result of c1: %+v, want the id %s", copied, parked.ResultID("s1", reply, "c1"))
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		n, _, err := count()
		if err != nil || n["batch.done"] != 2 || n["call.result:c2"] != 2 {
			return fmt.Errorf("events %v (%v): the copy's not stored yet", n, err)
		}
		if n["call.result:c1"] != 1 {
			t.Fatalf("c1's call.result stored %d times after the re-send, want once", n["call.result:c1"])
		}
		return nil
	})
	if runs.Load() != 1 {
		t.Fatalf("the queued call ran %d times, want once", runs.Load())
	}
}
