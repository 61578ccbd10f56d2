package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/presence"
	"github.com/toolbus/toolbus/router"
)

// A router ends a lone parked call (the batch carried in the call's record,
// docs/protocol.md 6.1, 1.6: nothing of it is left to run) with the
// answer's compare-and-set, which names it, and dies before batch.done:
// killed (its presence key goes stale) after its call.result or before it,
// or stopped (its key deleted, as a drain cut off by its deadline leaves
// it). Both surviving routers see the call end and, once the router is
// gone, publish the call.result and batch.done again by their ids
// (docs/protocol.md 1.13); the events stream stores each once. Without the
// presence the batch never gets batch.done (no test waits that long: the
// survivors' two live batch.done are the signal).
func TestLoneBatchOfAGoneRouter(t *testing.T) {
	for _, tc := range []struct {
		name            string
		published, stop bool
	}{
		{name: "killed after call.result", published: true},
		{name: "killed before call.result"},
		{name: "stopped", published: true, stop: true},
	} {
		t.Run(tc.name, func(t *testing.T) { loneOfAGoneRouter(t, tc.published, tc.stop) })
	}
}

func loneOfAGoneRouter(t *testing.T, published, stop bool) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	live := liveEvents(t, e.nc, "s1")
	js, routers, kv := e.buckets(t)
	const reply, dying = "r1", "dying"
	putPresence(t, routers, dying, "i1")

	e.callParked(t, "s1", reply, bus.Call{ID: "c1", Name: "ext"})
	res := endLone(t, kv, "s1", reply, "c1", dying)
	if published {
		publishAs(t, js, dying, "s1", reply, "c1", bus.TypeCallResult, parked.ResultID("s1", reply, "c1"), res)
	}
	if stop {
		if err := routers.Delete(t.Context(), dying); err != nil {
			t.Fatal(err)
		}
	} // else killed: its key is never renewed again

	// Each survivor publishes batch.done: wait for both, live.
	want := map[string]bool{}
	for _, r := range e.routers {
		want["toolbus/router/"+r.ID()] = true
	}
	live.waitFor(t, func(evs []*bus.Event) error {
		got := map[string]bool{}
		for _, ev := range evs {
			if ev.Type == bus.TypeBatchDone && ev.ReplyID == reply {
				got[ev.Source] = true
			}
		}
		for src := range want {
			if !got[src] {
				return fmt.Errorf("no batch.done from %s yet (live: %v)", src, got)
			}
		}
		return nil
	})
	n, evs := countStored(t, e.nc, "s1", reply)
	if want := map[string]int{"call.result:c1": 1, "batch.done": 1}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Fatalf("stored events of the batch %v, want %v", n, want)
	}
	for _, ev := range evs {
		switch ev.Type {
		case bus.TypeCallResult:
			if ev.ID != parked.ResultID("s1", reply, "c1") || (ev.Source == "toolbus/router/"+dying) != published {
				t.Fatalf("call.result %s from %s", ev.ID, ev.Source)
			}
		case bus.TypeBatchDone:
			var bd bus.BatchDone
			if err := ev.DataAs(&bd); err != nil || len(bd.Results) != 1 || textOf(bd.Results[0]) != "answered" {
				t.Fatalf("batch.done %s (%v)", ev.Data, err)
			}
			if id := (&parked.Batch{Session: "s1", ReplyID: reply}).DoneID(); ev.ID != id {
				t.Fatalf("batch.done id %s, want %s", ev.ID, id)
			}
		}
	}
}

// A batch waits for two parked calls and has nothing else to run; one is
// answered and its result joins the continuation. The router that ends the
// other, last, call publishes its call.result and dies before batch.done.
// Up to 1.12 its Resume had removed the continuation first (the last
// result's compare-and-set delete), so nobody could publish batch.done;
// now the continuation stays until batch.done is out (docs/protocol.md
// 1.13), and the survivors mend it a lease later: batch.done is stored
// once, with both results, and the continuation goes.
func TestLastResultOfAGoneRouter(t *testing.T) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	js, _, kv := e.buckets(t)
	const reply = "r1"
	r := e.callParked(t, "s1", reply, bus.Call{ID: "c1", Name: "ext"}, bus.Call{ID: "c2", Name: "ext"})
	if len(r.Parked) != 2 {
		t.Fatalf("reply %s", jsonOf(r))
	}
	if err := e.answer(t, "ext", "s1", reply, "c2", bus.Answer{State: bus.StateSuccess, Output: bus.Text("second")}); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		entry, err := kv.Get(t.Context(), "s1."+reply)
		if err != nil {
			return err
		}
		var cont parked.Batch
		if err := json.Unmarshal(entry.Value(), &cont); err != nil {
			return err
		}
		if _, ok := cont.Results["c2"]; !ok {
			return fmt.Errorf("c2's result not in the continuation yet: %s", entry.Value())
		}
		return nil
	})
	// The dying router's answer, its call.result, its Resume (no write:
	// nothing is left to run), and no batch.done.
	res := endParked(t, kv, "s1", reply, "c1", "dying", false)
	publishAs(t, js, "dying", "s1", reply, "c1", bus.TypeCallResult, parked.ResultID("s1", reply, "c1"), res)

	testkit.CheckFor(t, 3*bound, 20*time.Millisecond, func() error {
		if n, _ := countStored(t, e.nc, "s1", reply); n["batch.done"] == 0 {
			return fmt.Errorf("events %v: no batch.done yet", n)
		}
		return nil
	})
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		if _, err := kv.Get(t.Context(), "s1."+reply); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("continuation still there (%v)", err)
		}
		return nil
	})
	n, evs := countStored(t, e.nc, "s1", reply)
	if want := map[string]int{"call.result:c1": 1, "call.result:c2": 1, "batch.done": 1}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Fatalf("stored events of the batch %v, want %v", n, want)
	}
	for _, ev := range evs {
		var bd bus.BatchDone
		if ev.Type == bus.TypeBatchDone && (ev.DataAs(&bd) != nil || len(bd.Results) != 2 || textOf(bd.Results[0]) != "answered" || textOf(bd.Results[1]) != "second") {
			t.Fatalf("batch.done %s", ev.Data)
		}
	}
}

// A router that ended a lone parked call and is alive but slow (its
// call.result and batch.done come more than a lease later) keeps renewing
// its presence: the surviving routers judge that it outlived the call's
// end and publish nothing, so the batch is completed once, by that router.
func TestLoneBatchOfASlowRouter(t *testing.T) {
	logs := &captured{}
	e := startEnv(t, 2, onCluster(t), router.Config{Logger: slog.New(logs)})
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	live := liveEvents(t, e.nc, "s1")
	js, routers, kv := e.buckets(t)
	const reply, slow = "r1", "slow"

	// The slow router renews its key until the test ends.
	keepPresence(t, routers, slow, testHeartbeat)
	// Every router knows the slow one before it ends the call (a router
	// first seen after the end counts as another process).
	for _, r := range e.routers {
		logs.wait(t, r.ID(), "presence: router seen", "id", slow)
	}

	e.callParked(t, "s1", reply, bus.Call{ID: "c1", Name: "ext"})
	res := endLone(t, kv, "s1", reply, "c1", slow)
	key := bus.CallKey("s1", reply, "c1")
	for _, r := range e.routers {
		logs.wait(t, r.ID(), "parked: the router of a lone parked call outlived its end", "key", key)
	}
	// Only now, more than a lease after the end, does the slow router
	// publish.
	publishAs(t, js, slow, "s1", reply, "c1", bus.TypeCallResult, parked.ResultID("s1", reply, "c1"), res)
	publishAs(t, js, slow, "s1", reply, "", bus.TypeBatchDone, (&parked.Batch{Session: "s1", ReplyID: reply}).DoneID(), bus.BatchDone{Results: []bus.Result{res}})

	n, evs := countStored(t, e.nc, "s1", reply)
	if want := map[string]int{"call.result:c1": 1, "batch.done": 1}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Fatalf("stored events of the batch %v, want %v", n, want)
	}
	for _, ev := range evs {
		if ev.Source != "toolbus/router/"+slow {
			t.Fatalf("stored %s from %s: a survivor completed the batch of a live router", ev.Type, ev.Source)
		}
	}
	for _, ev := range live.all() {
		if (ev.Type == bus.TypeBatchDone || ev.Type == bus.TypeCallResult) && ev.Source != "toolbus/router/"+slow {
			t.Fatalf("live %s from %s: a survivor completed the batch of a live router", ev.Type, ev.Source)
		}
	}
	if logs.has("", "parked: the router that ended a lone parked call is gone; its call.result and batch.done are published again", "key", key) {
		t.Fatal("a survivor took the slow router for gone")
	}
}

// keepPresence puts the presence key of router id (instance i1, of
// heartbeat hb) and renews it five times a heartbeat, so a loaded machine
// does not make it look gone, until the test ends.
func keepPresence(t *testing.T, routers jetstream.KeyValue, id string, hb time.Duration) {
	t.Helper()
	v, _ := json.Marshal(presence.Value{Router: id, Instance: "i1", HeartbeatMS: hb.Milliseconds()})
	if _, err := routers.Put(t.Context(), id, v); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var beats sync.WaitGroup
	beats.Go(func() {
		tick := time.NewTicker(hb / 5)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_, _ = routers.Put(ctx, id, v)
			}
		}
	})
	t.Cleanup(func() { cancel(); beats.Wait() })
}

// buckets returns a JetStream context and the presence and parked buckets.
func (e *env) buckets(t *testing.T) (jetstream.JetStream, jetstream.KeyValue, jetstream.KeyValue) {
	t.Helper()
	return buckets(t, e.nc)
}

// buckets is env.buckets over nc.
func buckets(t *testing.T, nc *nats.Conn) (jetstream.JetStream, jetstream.KeyValue, jetstream.KeyValue) {
	t.Helper()
	js := testkit.JetStream(t, nc)
	routers, err := js.KeyValue(t.Context(), "toolbus_routers")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "toolbus_parked")
	if err != nil {
		t.Fatal(err)
	}
	return js, routers, kv
}

// putPresence writes the presence key of a router that is not one of the
// deployment's, as that router would.
func putPresence(t *testing.T, routers jetstream.KeyValue, id, instance string) {
	t.Helper()
	v, _ := json.Marshal(presence.Value{Router: id, Instance: instance, HeartbeatMS: testHeartbeat.Milliseconds()})
	if _, err := routers.Put(t.Context(), id, v); err != nil {
		t.Fatal(err)
	}
}

// endLone ends the parked call as router's answer would: one
// compare-and-set, parked → done with the result, naming router. The call
// must carry its batch (a lone wait). It returns the result.
func endLone(t *testing.T, kv jetstream.KeyValue, session, reply, call, router string) bus.Result {
	t.Helper()
	return endParked(t, kv, session, reply, call, router, true)
}

// endParked is endLone for a call that carries its batch or, when carried
// is false, one whose batch has a continuation of its own.
func endParked(t *testing.T, kv jetstream.KeyValue, session, reply, call, router string, carried bool) bus.Result {
	t.Helper()
	key := bus.CallKey(session, reply, call)
	entry, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var rec bus.ParkRecord
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if (len(rec.Batch) > 0) != carried || rec.Status != bus.ParkParked {
		t.Fatalf("the record of %s: carries its batch %v, want %v, or is not parked: %s", key, len(rec.Batch) > 0, carried, entry.Value())
	}
	res := bus.Result{ID: call, Name: rec.Call.Name, State: bus.StateSuccess, Output: bus.Text("answered")}
	rec.Status, rec.Result, rec.Owner = bus.ParkDone, &res, router
	rec.Answer = &bus.Answer{State: res.State, Output: res.Output}
	rec.AnsweredBy, rec.AnsweredAt = "test/handler", time.Now().UTC()
	v, err := json.Marshal(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(t.Context(), key, v, entry.Revision()); err != nil {
		t.Fatal(err)
	}
	return res
}

// publishAs stores an event of the batch as router would, with id (also its
// Nats-Msg-Id).
func publishAs(t *testing.T, js jetstream.JetStream, router, session, reply, call, typ, id string, data any) {
	t.Helper()
	ev, err := bus.NewEvent(typ, "toolbus/router/"+router, data)
	if err != nil {
		t.Fatal(err)
	}
	ev.ID, ev.SessionID, ev.ReplyID = id, session, reply
	if call != "" {
		ev.ToolCallID, ev.Subject = call, call
	}
	m, err := ev.StoredMsg("toolbus.events." + session)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
}

// countStored returns how many events of each kind the events stream holds
// for the batch ("call.result:<id>", "batch.done"), and those events.
func countStored(t *testing.T, nc *nats.Conn, session, reply string) (map[string]int, []*bus.Event) {
	t.Helper()
	all, err := stored(t, nc, session)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	var evs []*bus.Event
	for _, ev := range all {
		if ev.ReplyID != reply {
			continue
		}
		k := ev.Type[len("io.toolbus."):]
		if ev.ToolCallID != "" {
			k += ":" + ev.ToolCallID
		}
		n[k]++
		evs = append(evs, ev)
	}
	return n, evs
}

// liveSub is a core subscription to a session's events: every publish,
// also those the events stream de-duplicates.
type liveSub struct {
	mu   sync.Mutex
	evs  []*bus.Event
	seen chan struct{}
}

func liveEvents(t *testing.T, nc *nats.Conn, session string) *liveSub {
	t.Helper()
	l := &liveSub{seen: make(chan struct{}, 1)}
	sub, err := nc.Subscribe("toolbus.events."+session, func(m *nats.Msg) {
		ev, err := bus.Decode(m)
		if err != nil {
			return
		}
		l.mu.Lock()
		l.evs = append(l.evs, ev)
		l.mu.Unlock()
		select {
		case l.seen <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *liveSub) all() []*bus.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

// waitFor waits until check accepts the events seen so far.
func (l *liveSub) waitFor(t *testing.T, check func([]*bus.Event) error) {
	t.Helper()
	deadline := time.After(3 * bound)
	for {
		err := check(l.all())
		if err == nil {
			return
		}
		select {
		case <-l.seen:
		case <-deadline:
			t.Fatal(err)
		}
	}
}

// captured is a slog handler that keeps every record with its attributes
// (those of Logger.With too), for a test to wait for one.
type captured struct {
	mu      sync.Mutex
	records []map[string]string
	attrs   []slog.Attr
	parent  *captured
}

func (c *captured) root() *captured {
	if c.parent != nil {
		return c.parent.root()
	}
	return c
}

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }

func (c *captured) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	for _, a := range c.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	root := c.root()
	root.mu.Lock()
	root.records = append(root.records, m)
	root.mu.Unlock()
	return nil
}

func (c *captured) WithAttrs(as []slog.Attr) slog.Handler {
	return &captured{attrs: append(slices.Clone(c.attrs), as...), parent: c.root()}
}

func (c *captured) WithGroup(string) slog.Handler { return c }

// has reports whether router ("" for any) logged msg with the attribute
// key=value.
func (c *captured) has(router, msg, key, value string) bool {
	root := c.root()
	root.mu.Lock()
	defer root.mu.Unlock()
	return slices.ContainsFunc(root.records, func(m map[string]string) bool {
		return m["msg"] == msg && m[key] == value && (router == "" || m["router"] == router)
	})
}

// wait waits until router logs msg with key=value.
func (c *captured) wait(t *testing.T, router, msg, key, value string) {
	t.Helper()
	testkit.CheckFor(t, 3*bound, 10*time.Millisecond, func() error {
		if !c.has(router, msg, key, value) {
			return fmt.Errorf("router %s has not logged %q with %s=%s", router, msg, key, value)
		}
		return nil
	})
}
