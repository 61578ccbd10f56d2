package embedded

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// nodes is the deployment's servers: the one node, or every node of the
// cluster that runs.
func (e *env) nodes() []*server.Server {
	if e.cluster == nil {
		return []*server.Server{e.srv}
	}
	var out []*server.Server
	for i := range e.cluster.Nodes() {
		if s := e.cluster.Node(i); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// routerInMsgs is the messages the servers have delivered to the routers'
// connections so far (Connz's out_msgs: out of a server, into a router;
// each router's connection is a client of one node).
func routerInMsgs(t *testing.T, e *env) int64 {
	t.Helper()
	var n int64
	for _, s := range e.nodes() {
		cz, err := s.Connz(&server.ConnzOptions{Limit: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cz.Conns {
			if strings.HasPrefix(c.Name, "toolbus-xtest-router") {
				n += c.OutMsgs
			}
		}
	}
	return n
}

// streamSeqs is each stream's last sequence (Jsz; on a cluster the
// highest any node holds, its leader's): the writes it has taken. The
// workers and routers buckets are left out: their writes are the workers'
// beats and the routers' presence (one per router and heartbeat, none per
// call).
func streamSeqs(t *testing.T, e *env) map[string]uint64 {
	t.Helper()
	seqs := map[string]uint64{}
	for _, srv := range e.nodes() {
		jz, err := srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range jz.AccountDetails {
			for _, s := range a.Streams {
				if !strings.Contains(s.Name, "workers") && !strings.Contains(s.Name, "routers") {
					seqs[s.Name] = max(seqs[s.Name], s.State.LastSeq)
				}
			}
		}
	}
	return seqs
}

// writesSince is the writes each stream took since before, and their sum.
func writesSince(t *testing.T, e *env, before map[string]uint64) (map[string]uint64, uint64) {
	t.Helper()
	d, sum := map[string]uint64{}, uint64(0)
	for name, seq := range streamSeqs(t, e) {
		if n := seq - before[name]; n > 0 {
			d[name] = n
			sum += n
		}
	}
	return d, sum
}

// A read-only batch awaits no JetStream write (docs/protocol.md 3.4): the
// router gets the batch and the exec result, and no acknowledgement of
// batch.done, which the events stream still stores.
func TestReadOnlyBatchAwaitsNoWrite(t *testing.T) {
	// Heartbeats a minute apart: none of the workers' or the router's beats
	// (each a few messages to the router) falls among the counted batches,
	// however long they take under load (at 500 ms they did: 111 > 110).
	e := startEnvBeat(t, 1, onCluster(t), router.Config{}, time.Minute)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "quick", ReadOnly: true, ConcurrencySafe: true, InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("done"), nil })
	})
	e.setMode(t, "ro", "default") // the session is stored: its batches echo sessionrev
	e.call(t, "ro", []bus.Call{{ID: "w", Name: "quick"}})
	const n = 50
	in, seqs := routerInMsgs(t, e), streamSeqs(t, e)
	for i := range n {
		reply := e.call(t, "ro", []bus.Call{{ID: "c", Name: "quick"}}, client.WithReplyID(client.NewReplyID()))
		wantSuccess(t, reply.Results[0], "done")
		_ = i
	}
	got := routerInMsgs(t, e) - in
	t.Logf("router in-messages for %d read-only batches: %d (%.2f per batch)", n, got, float64(got)/n)
	// 2 per batch (the batch, the exec result), plus slack for beats; an
	// awaited batch.done would add its acknowledgement: 3 per batch.
	if got > 2*n+10 {
		t.Errorf("router took %d messages for %d read-only batches, want at most %d: an acknowledgement awaited?", got, n, 2*n+10)
	}
	waitWrites(t, e, seqs, "TOOLBUS_EVENTS", n) // batch.done is stored all the same

	// A session never written: the reply echoes the revision of the miss,
	// and the batches that send it back are not read again.
	first := e.call(t, "fresh", []bus.Call{{ID: "w", Name: "quick"}})
	if first.SessionRev == 0 {
		t.Fatal("the reply for a session never written carries no sessionrev")
	}
	in = routerInMsgs(t, e)
	for range n {
		wantSuccess(t, e.call(t, "fresh", []bus.Call{{ID: "c", Name: "quick"}}).Results[0], "done")
	}
	got = routerInMsgs(t, e) - in
	t.Logf("router in-messages for %d read-only batches of a session never written: %d (%.2f per batch)", n, got, float64(got)/n)
	if got > 2*n+10 { // a session read would add its reply: 3 per batch
		t.Errorf("router took %d messages for %d batches of a session never written, want at most %d", got, n, 2*n+10)
	}
}

// waitWrites waits until stream has taken want writes since before.
func waitWrites(t *testing.T, e *env, before map[string]uint64, stream string, want uint64) {
	t.Helper()
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if d, _ := writesSince(t, e, before); d[stream] < want {
			return fmt.Errorf("%s took %d writes, want %d", stream, d[stream], want)
		}
		return nil
	})
}

// A parked call answered costs at most 4 JetStream writes from park to
// batch.done (issue 27, docs/protocol.md 6.1, 1.6): counted with the
// streams' sequences.
func TestParkedCallWrites(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	ev := e.watch(t, "pk")
	before := streamSeqs(t, e)
	reply := client.NewReplyID()
	r := e.callParked(t, "pk", reply, bus.Call{ID: "p1", Name: "ext"})
	if len(r.Parked) != 1 {
		t.Fatalf("parked %v, want p1", r.Parked)
	}
	if err := e.answer(t, "ext", "pk", reply, "p1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("ok")}); err != nil {
		t.Fatal(err)
	}
	collect(t, ev, batchDone(reply))
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error { // live before stored
		got, err := newestStored(t, e.nc, "pk")
		if err == nil && got.Type != bus.TypeBatchDone {
			err = fmt.Errorf("newest stored event %s", got.Type)
		}
		return err
	})
	d, sum := writesSince(t, e, before)
	names := slices.Sorted(maps.Keys(d))
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %d", name, d[name]))
	}
	t.Logf("JetStream writes from park to batch.done: %d (%s)", sum, strings.Join(parts, ", "))
	// The record create (it carries the batch and is the handoff), the
	// answer's compare-and-set (it records the result), call.result and
	// batch.done (docs/performance.md, "Writes per parked call"; 12 before
	// package parked, 9 before protocol 1.6).
	if want := map[string]uint64{"KV_toolbus_parked": 2, "TOOLBUS_EVENTS": 2}; sum > 4 || !maps.Equal(d, want) {
		t.Errorf("a parked call answered cost %d JetStream writes (%v), want at most 4 (%v)", sum, d, want)
	}
}

// A writing batch whose ledger record lands before the reply awaits two
// JetStream writes, the ledger's claim and record, and not its batch.done
// (docs/protocol.md 3.4, 1.15): the router takes 4 messages per batch (the
// batch, the claim's acknowledgement, the exec result, the record's), where
// 1.14's awaited batch.done added its acknowledgement (5). The events
// stream stores batch.done all the same. A writing batch that asks
// "events": "calls" keeps its events awaited: call.result's and
// batch.done's acknowledgements come before its reply (6 per batch).
func TestWritingBatchAwaits(t *testing.T) {
	// Heartbeats a minute apart, as TestReadOnlyBatchAwaitsNoWrite: no beat
	// (or a claim's lease renewal) falls among the counted batches.
	e := startEnvBeat(t, 1, onCluster(t), router.Config{}, time.Minute)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "put", InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("put"), nil })
	})
	e.setMode(t, "wr", "default")
	warm := client.NewReplyID()
	e.call(t, "wr", []bus.Call{{ID: "w", Name: "put"}}, client.WithReplyID(warm))
	storedDone(t, e, "wr", warm, "") // stored before the count starts
	const n = 50
	in, seqs := routerInMsgs(t, e), streamSeqs(t, e)
	for range n {
		reply := e.call(t, "wr", []bus.Call{{ID: "c", Name: "put"}}, client.WithReplyID(client.NewReplyID()))
		wantSuccess(t, reply.Results[0], "put")
	}
	got := routerInMsgs(t, e) - in
	t.Logf("router in-messages for %d writing batches: %d (%.2f per batch)", n, got, float64(got)/n)
	if got > 4*n+10 {
		t.Errorf("router took %d messages for %d writing batches, want at most %d: batch.done's acknowledgement awaited?", got, n, 4*n+10)
	}
	waitWrites(t, e, seqs, "TOOLBUS_EVENTS", n) // batch.done is stored all the same
	d, _ := writesSince(t, e, seqs)
	t.Logf("JetStream writes for %d writing batches: %v", n, d)
	if d["TOOLBUS_EVENTS"] != n || d["KV_toolbus_ledger"] < 2*n || d["KV_toolbus_ledger"] > 2*n+2 {
		t.Errorf("writes %v for %d writing batches, want %d events and %d ledger writes (a claim and a record each)", d, n, n, 2*n)
	}

	in = routerInMsgs(t, e)
	const m = 10
	for range m {
		reply := e.batch(t, "wr", bus.Batch{Calls: []bus.Call{{ID: "c", Name: "put"}}, Events: bus.EventsCalls}, client.WithReplyID(client.NewReplyID()))
		wantSuccess(t, reply.Results[0], "put")
	}
	got = routerInMsgs(t, e) - in
	t.Logf(`router in-messages for %d writing batches with "events": "calls": %d (%.2f per batch)`, m, got, float64(got)/m)
	if got < 6*m {
		t.Errorf(`router took %d messages for %d writing batches with "events": "calls", want at least %d: call.result's and batch.done's acknowledgements not awaited?`, got, m, 6*m)
	}
}

// A writing batch whose batch.done is lost is safe to send again under its
// reply id (docs/protocol.md 3.4, 1.15): here the events stream takes no
// event of the session while the router publishes it (its subjects no
// longer hold the session's), and the reply comes all the same, the
// write's result in P_ledger by then; replay has no batch.done of it. The
// copy re-sent once the stream takes events again gets that result from
// the ledger, the tool not run again, and its own batch.done is stored
// before its reply (a result from the ledger keeps it awaited).
func TestWritingBatchDoneLost(t *testing.T) {
	e := newEnv(t, 1)
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "put", InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				return textResult(fmt.Sprintf("put %d", runs.Add(1))), nil
			})
	})
	js := testkit.JetStream(t, e.nc)
	ctx := testCtx(t)
	s, err := js.Stream(ctx, e.client.Subjects().Stream(bus.StreamEvents))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	narrowed := cfg
	narrowed.Subjects = []string{e.client.Subjects().Events("elsewhere")}
	if _, err := js.UpdateStream(ctx, narrowed); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if _, err := js.UpdateStream(context.WithoutCancel(ctx), cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()

	ev := e.watch(t, "lost")
	reply := client.NewReplyID()
	wantSuccess(t, e.call(t, "lost", []bus.Call{{ID: "c1", Name: "put"}}, client.WithReplyID(reply)).Results[0], "put 1")
	if res := ledgerRecord(t, e, "lost", reply, "c1"); textOf(res) != "put 1" { // in P_ledger by the reply
		t.Fatalf("ledger holds %s", jsonOf(res))
	}
	collect(t, ev, batchDone(reply)) // live subscribers got it
	restore()
	if got, err := newestStored(t, e.nc, "lost"); err == nil {
		t.Fatalf("the events stream stored %s %s, want nothing of the session", got.Type, got.ID)
	}

	again := e.call(t, "lost", []bus.Call{{ID: "c1", Name: "put"}}, client.WithReplyID(reply))
	wantSuccess(t, again.Results[0], "put 1")
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want once: the re-sent copy ran it again", n)
	}
	if got := lastStored(t, e.nc, "lost"); got.Type != bus.TypeBatchDone || got.ReplyID != reply {
		t.Fatalf("newest stored event %s of %s, want the re-sent copy's batch.done of %s", got.Type, got.ReplyID, reply)
	}
}

// The events stream dedupes an event by its Nats-Msg-Id (docs/protocol.md
// 3.4): an awaited batch.done carries it, the event's id, for its retries;
// an unawaited one (a read-only batch's) is published once and carries
// none since 1.21, so the stream keeps no id of it. Both are stored.
func TestBatchDoneMsgID(t *testing.T) {
	e := newEnv(t, 1)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "quick", ReadOnly: true, ConcurrencySafe: true, InputSchema: objectSchema(`{}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("done"), nil })
	})
	sub, err := e.nc.SubscribeSync("toolbus.events.ids")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	seqs := streamSeqs(t, e)
	for _, tc := range []struct {
		b      bus.Batch
		awaits bool
	}{
		{bus.Batch{Calls: []bus.Call{{ID: "c", Name: "quick"}}}, false},
		{bus.Batch{Calls: []bus.Call{{ID: "c", Name: "quick"}}, Events: bus.EventsCalls}, true},
	} {
		wantSuccess(t, e.batch(t, "ids", tc.b, client.WithReplyID(client.NewReplyID())).Results[0], "done")
		for {
			m, err := sub.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := bus.Decode(m)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type != bus.TypeBatchDone {
				continue
			}
			if got := m.Header.Get(jetstream.MsgIDHeader); (got == ev.ID) != tc.awaits || (got != "") != tc.awaits {
				t.Errorf("batch.done (events %q) carries Nats-Msg-Id %q, event id %s; want it only when awaited (%v)", tc.b.Events, got, ev.ID, tc.awaits)
			}
			break
		}
	}
	waitWrites(t, e, seqs, "TOOLBUS_EVENTS", 3) // both batch.done and the call.result
}
