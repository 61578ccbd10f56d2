package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestMeasureDuplicateWait measures, on a 3-node cluster with replicated
// buckets, how long a duplicate's wait for a result already recorded
// takes, and how long the watch's parts take: its creation (an ordered
// consumer), its first entry and its stop (the consumer's delete). Then it
// stops the JetStream meta leader just before a wait's watch stops, as a
// meta leader moving would, and measures the wait and the stop again.
// TOOLBUS_MEASURE=1 runs it.
func TestMeasureDuplicateWait(t *testing.T) {
	if os.Getenv("TOOLBUS_MEASURE") != "1" {
		t.Skip("TOOLBUS_MEASURE=1 runs the measurement")
	}
	c := testkit.RunCluster(t)
	meta := func() int {
		for i := range c.Nodes() {
			if s := c.Node(i); s != nil && s.JetStreamIsLeader() {
				return i
			}
		}
		return -1
	}
	ledgerOn := func(node int, id string) *Ledger {
		js := testkit.JetStream(t, testkit.ConnectURL(t, c.URL(node)))
		st, err := store.Setup(t.Context(), js, bus.NewSubjects("toolbus"), store.Config{Replicas: 3, Memory: true})
		if err != nil {
			t.Fatal(err)
		}
		return New(st.Ledger, Config{Router: id, Logger: slog.New(slog.DiscardHandler)})
	}
	m := meta()
	bNode := (m + 2) % c.Nodes()
	a, b := ledgerOn((m+1)%c.Nodes(), "a"), ledgerOn(bNode, "b")
	ctx := t.Context()
	record := func(key string) {
		how, claim := a.claim(ctx, key, time.Minute, time.Time{}, digests{})
		if how != claimed {
			t.Fatalf("claim %s: %v", key, how)
		}
		a.Record(ctx, key, claim, bus.Result{ID: "c", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")})
	}
	const n = 200
	var create, first, stop, wait []time.Duration
	for i := range n {
		key := fmt.Sprintf("s.r.m%d", i)
		record(key)
		t0 := time.Now()
		w, err := b.kv.Watch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		for e := range w.Updates() {
			if e != nil {
				break
			}
		}
		t2 := time.Now()
		_ = w.Stop()
		t3 := time.Now()
		create, first, stop = append(create, t1.Sub(t0)), append(first, t2.Sub(t1)), append(stop, t3.Sub(t2))
		t4 := time.Now()
		if r := waitRes(b.wait(ctx, Call{Key: key, Call: bus.Call{ID: "c", Name: "t"}, Timeout: time.Minute})); textOf(r.Output) != "done" {
			t.Fatalf("waited for %+v", r)
		}
		wait = append(wait, time.Since(t4))
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("steady, %d keys: watch create %s; first entry %s; stop %s; whole wait %s", n, quantiles(create), quantiles(first), quantiles(stop), quantiles(wait))

	// A node stops while a wait's watch is open, just before its stop:
	// the meta leader (when it is not b's node), or b's own node (its
	// connection moves to another; the delete's reply is lost).
	for round := range 6 {
		m, kill, what := meta(), bNode, "b's node"
		if round%2 == 0 {
			if m < 0 || m == bNode {
				t.Logf("round %d: the meta leader is node %d, b's: skipped", round, m)
				continue
			}
			kill, what = m, "the meta leader"
		}
		key := fmt.Sprintf("s.r.f%d", round)
		record(key)
		var killTook, stopTook time.Duration
		slow := &stopHookKV{KeyValue: b.kv,
			before: func() { t0 := time.Now(); c.StopNode(kill); killTook = time.Since(t0) },
			after:  func(d time.Duration) { stopTook = d }}
		kv := b.kv
		b.kv = slow
		t0 := time.Now()
		r := waitRes(b.wait(ctx, Call{Key: key, Call: bus.Call{ID: "c", Name: "t"}, Timeout: time.Minute}))
		took := time.Since(t0)
		if err := b.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		all := time.Since(t0)
		b.kv = kv
		t.Logf("%s (node %d, meta leader node %d) stopped before the watch's stop: wait returned %q after %v (the node's shutdown, in the stop's hook, took %v of it when the stop is on the wait's path); the watch's stop took %v; Ledger.Stop returned %v after the wait began",
			what, kill, m, textOf(r.Output), took.Round(time.Millisecond), killTook.Round(time.Millisecond), stopTook.Round(time.Millisecond), all.Round(time.Millisecond))
		if err := c.Start(kill); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitHealthy(testkit.Within(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
}

// stopHookKV runs before ahead of every watch's stop, and after with how
// long the stop took.
type stopHookKV struct {
	jetstream.KeyValue
	before func()
	after  func(time.Duration)
}

func (k *stopHookKV) Watch(ctx context.Context, key string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.Watch(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	return hookedWatch{w, k}, nil
}

type hookedWatch struct {
	jetstream.KeyWatcher
	k *stopHookKV
}

func (w hookedWatch) Stop() error {
	w.k.before()
	t0 := time.Now()
	err := w.KeyWatcher.Stop()
	w.k.after(time.Since(t0))
	return err
}

func quantiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		return s[min(len(s)-1, int(p*float64(len(s))))].Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("p50 %v p90 %v p99 %v max %v", q(0.5), q(0.9), q(0.99), s[len(s)-1].Round(10*time.Microsecond))
}
