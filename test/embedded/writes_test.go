package embedded

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// routerInMsgs is the messages the server has delivered to the routers'
// connections so far (Connz's out_msgs: out of the server, into a router).
func routerInMsgs(t *testing.T, e *env) int64 {
	t.Helper()
	cz, err := e.srv.Connz(&server.ConnzOptions{Limit: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range cz.Conns {
		if strings.HasPrefix(c.Name, "toolbus-xtest-router") {
			n += c.OutMsgs
		}
	}
	return n
}

// streamSeqs is each stream's last sequence (Jsz): the writes it has taken.
// The workers and routers buckets are left out: their writes are the
// workers' beats and the routers' presence (one per router and heartbeat,
// none per call).
func streamSeqs(t *testing.T, e *env) map[string]uint64 {
	t.Helper()
	jz, err := e.srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string]uint64{}
	for _, a := range jz.AccountDetails {
		for _, s := range a.Streams {
			if !strings.Contains(s.Name, "workers") && !strings.Contains(s.Name, "routers") {
				seqs[s.Name] = s.State.LastSeq
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
