package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestAuditDurableOnCluster: on the 3-node cluster (replicas 3) a reply
// follows every audit record of its batch. While P_AUDIT's leader steps
// down during batches, every call is recorded once — none lost, none
// doubled — and the records are there as soon as each reply is (read
// without waiting). Then the router is killed the moment a reply arrives,
// and every record of that batch is stored.
func TestAuditDurableOnCluster(t *testing.T) {
	d, _ := guardDeployment(t, true, 1, router.Guard{Audit: &audit.Config{}})
	c := newClient(t, d)
	nc, js := clientJS(t, d)
	// stored reads the trail once: what the stream holds now. A read
	// refused while the stream elects a leader is read again (the writes
	// are all over: the router wrote before its reply).
	stored := func() (calls map[string]int) {
		t.Helper()
		testkit.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
			calls = map[string]int{}
			return audit.Export(t.Context(), js, d.Subjects(), audit.Filter{}, func(raw json.RawMessage) error {
				var rec audit.Record
				if err := json.Unmarshal(raw, &rec); err != nil {
					return err
				}
				calls[rec.ReplyID+"/"+rec.CallID]++
				return nil
			})
		})
		return calls
	}
	const perBatch = 8
	batch := func(reply string) {
		t.Helper()
		calls := make([]bus.Call, perBatch)
		for i := range calls {
			calls[i] = bus.Call{ID: fmt.Sprintf("c%d", i), Name: "paid"}
		}
		r, err := c.Call(t.Context(), "s1", bus.Batch{Calls: calls}, client.WithReplyID(reply))
		if err != nil || len(r.Results) != perBatch {
			t.Fatalf("batch %s: %+v %v", reply, r, err)
		}
	}
	check := func(got map[string]int, replies ...string) {
		t.Helper()
		for _, reply := range replies {
			for i := range perBatch {
				if k := fmt.Sprintf("%s/c%d", reply, i); got[k] != 1 {
					t.Errorf("%s: %d records, want 1", k, got[k])
				}
			}
		}
	}
	stepdown := "$JS.API.STREAM.LEADER.STEPDOWN." + d.Subjects().Stream(audit.Stream)
	var replies []string
	for i := range 6 {
		reply := fmt.Sprintf("r%d", i)
		if i%2 == 1 {
			// The leader steps down as the batch is sent: its calls'
			// records are published during the election.
			if err := nc.Publish(stepdown, nil); err != nil {
				t.Fatal(err)
			}
		}
		batch(reply)
		replies = append(replies, reply)
		check(stored(), replies...)
	}
	if got := stored(); len(got) != len(replies)*perBatch {
		t.Fatalf("%d calls recorded, want %d", len(got), len(replies)*perBatch)
	}
	// The router dies the moment the reply is in: its connection is cut,
	// nothing is drained.
	batch("last")
	d.RouterConns[0].Close()
	check(stored(), "last")
}

// BenchmarkAuditedReply is a one-call batch's round trip with the audit
// trail off and on (its record stored before the reply, beside
// batch.done), on one node:
//
//	go test -run - -bench AuditedReply -benchtime 300x ./router/
func BenchmarkAuditedReply(b *testing.B) {
	for _, tc := range []struct {
		name  string
		audit *audit.Config
	}{{"off", nil}, {"on", &audit.Config{}}} {
		b.Run(tc.name, func(b *testing.B) {
			d := xtest.Run(b, xtest.Config{Routers: 1, Router: router.Config{Guard: router.Guard{Audit: tc.audit}}})
			_, err := d.AddWorker(b.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
				return worker.Register(w, bus.ToolDef{Name: "paid", Description: "A lookup.", ReadOnly: true},
					func(context.Context, *worker.Call, noInput) (string, error) { return "ok", nil })
			}})
			if err != nil {
				b.Fatal(err)
			}
			if err := d.WaitLive(b.Context(), "paid"); err != nil {
				b.Fatal(err)
			}
			nc, err := d.Connect(b.Context(), xtest.RoleClient)
			if err != nil {
				b.Fatal(err)
			}
			c := client.New(nc, client.Config{Source: "bench/agent", Timeout: time.Minute})
			calls := []bus.Call{{ID: "c1", Name: "paid"}}
			b.ResetTimer()
			for b.Loop() {
				if r, err := c.Call(b.Context(), "s1", bus.Batch{Calls: calls}); err != nil || r.Results[0].State != bus.StateSuccess {
					b.Fatal(r, err)
				}
			}
		})
	}
}

// TestAuditRecordLostIsCounted: a record the trail cannot store (its
// stream is gone) does not fail the call: the reply comes after the
// trail's max_wait, the record is counted in
// toolbus_audit_records_lost_total and logged in full (redacted).
func TestAuditRecordLostIsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs testkit.Buffer
	d, _ := guardDeployment(t, false, 1, router.Guard{Audit: &audit.Config{MaxWait: time.Second, Inputs: true, Redact: []string{"token"}}},
		func(c *router.Config) {
			c.Metrics = reg
			c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		})
	_, js := clientJS(t, d)
	if err := js.DeleteStream(t.Context(), d.Subjects().Stream(audit.Stream)); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, d)
	r, err := c.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "paid"},
		{ID: "c2", Name: "paid", Input: json.RawMessage(`{"token":"hunter2"}`)}}}) // invalid: still recorded
	if err != nil || len(r.Results) != 2 || r.Results[0].State != bus.StateSuccess || r.Results[1].Error == nil {
		t.Fatalf("reply %+v %v", r, err)
	}
	if n := testutil.ToFloat64(lostCounter(t, reg)); n != 2 {
		t.Fatalf("toolbus_audit_records_lost_total = %v, want 2", n)
	}
	out := logs.String()
	if !strings.Contains(out, "audit record not stored") || !strings.Contains(out, `"call_id":"c1"`) || !strings.Contains(out, `[redacted]`) || strings.Contains(out, "hunter2") {
		t.Fatalf("log:\n%s", out)
	}
}

// lostCounter is the router's toolbus_audit_records_lost_total in reg.
func lostCounter(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "toolbus_audit_records_lost_total" {
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: "lost"})
			c.Add(mf.GetMetric()[0].GetCounter().GetValue())
			return c
		}
	}
	t.Fatal("toolbus_audit_records_lost_total is not registered")
	return nil
}
