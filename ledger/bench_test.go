package ledger

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// The single waiter's path of wait for a recorded result: over the
// in-memory KV (the ledger's own cost) and over an embedded server (with
// the watch's consumer).
func BenchmarkWaitRecorded(b *testing.B) {
	done := Entry{State: stateDone, Router: "a", Claim: "x", Deadline: time.Now().Add(time.Hour),
		Result: &bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("done")}}
	v, _ := json.Marshal(done)
	c := Call{Key: "s.r.c1", Call: bus.Call{ID: "c1", Name: "t"}, Timeout: time.Hour}
	b.Run("fake", func(b *testing.B) {
		kv := &fakeKV{val: v, rev: 1}
		l := New(kv, Config{Router: "b"})
		b.ReportAllocs()
		for b.Loop() {
			kv.mu.Lock()
			kv.watchers = kv.watchers[:0]
			kv.mu.Unlock()
			if r, _ := l.wait(b.Context(), c); r.State != bus.StateSuccess {
				b.Fatal(r)
			}
		}
	})
	b.Run("server", func(b *testing.B) {
		l := newTestLedger(b, "b")[0]
		ctx := b.Context()
		if _, err := l.kv.Create(ctx, c.Key, v); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if r, _ := l.wait(ctx, c); r.State != bus.StateSuccess {
				b.Fatal(r)
			}
		}
		b.StopTimer()
		if err := l.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	})
}
