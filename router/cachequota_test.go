package router_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestCacheHitsSpendNoQuota: calls the result cache answers spend neither
// a budget nor a rate: within a budget of 2 and a rate of 2 an hour, a
// miss spends one, any number of hits all succeed without running, the
// next miss spends the second, and the miss after is refused with
// retry_after_ms. A rule with cache_hits counts hits too.
func TestCacheHitsSpendNoQuota(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1, Router: router.Config{Guard: router.Guard{Cache: true, Limits: limits.Policy{Rules: []limits.Rule{
		{Name: "daily", Tools: []string{"lookup"}, Per: []string{limits.PerUser}, Budget: &limits.Budget{Units: 2}},
		{Name: "backend", Tools: []string{"lookup"}, Rate: &limits.Rate{Calls: 2, IntervalMS: 3600_000}},
		{Name: "every-answer", Tools: []string{"counted"}, CacheHits: true, Budget: &limits.Budget{Units: 2}},
	}}}}})
	var runs atomic.Int64
	type in struct {
		City string `json:"city"`
	}
	_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		for _, name := range []string{"lookup", "counted"} {
			err := worker.Register(w, bus.ToolDef{Name: name, Description: "Look up a city.", ReadOnly: true, CacheTTLMS: 3600_000, CacheScope: "user"},
				func(_ context.Context, _ *worker.Call, i in) (string, error) {
					runs.Add(1)
					return "weather in " + i.City, nil
				})
			if err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), "lookup", "counted"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, d)
	n := 0
	call := func(tool, city string) bus.Result {
		t.Helper()
		n++
		reply, err := c.Call(t.Context(), "s1", bus.Batch{User: json.RawMessage(`"alice"`),
			Calls: []bus.Call{{ID: "c1", Name: tool, Input: json.RawMessage(`{"city":"` + city + `"}`)}}})
		if err != nil || len(reply.Results) != 1 {
			t.Fatalf("call %d: %+v %v", n, reply, err)
		}
		return reply.Results[0]
	}
	hit := func(res bus.Result) bool { return strings.Contains(string(res.Metadata), `"hit":true`) }
	if res := call("lookup", "Oslo"); res.State != bus.StateSuccess || hit(res) {
		t.Fatalf("first miss: %+v", res)
	}
	for i := range 10 {
		if res := call("lookup", "Oslo"); res.State != bus.StateSuccess || !hit(res) {
			t.Fatalf("hit %d: %+v", i, res)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times, want 1", runs.Load())
	}
	if res := call("lookup", "Rome"); res.State != bus.StateSuccess || hit(res) {
		t.Fatalf("second miss (within the budget): %+v", res)
	}
	res := call("lookup", "Paris")
	if res.Error == nil || res.Error.Code != bus.CodeLimitExceeded || res.Error.RetryAfterMS <= 0 || runs.Load() != 2 {
		t.Fatalf("third miss: %+v (runs %d), want limit_exceeded with retry_after_ms", res, runs.Load())
	}
	if res := call("lookup", "Rome"); res.State != bus.StateSuccess || !hit(res) {
		t.Fatalf("a hit once the budget is spent: %+v", res)
	}
	// cache_hits: a hit spends the budget like a miss.
	call("counted", "Oslo")
	if res := call("counted", "Oslo"); !hit(res) {
		t.Fatalf("counted hit: %+v", res)
	}
	if res := call("counted", "Oslo"); res.Error == nil || res.Error.Code != bus.CodeLimitExceeded || !strings.Contains(res.Error.Message, "every-answer") {
		t.Fatalf("third counted call: %+v, want refused by every-answer", res)
	}
}

// BenchmarkCachedReply is a cacheable call's round trip on one node: a
// miss (a new input each call: the tool runs and its result is stored,
// since session 37 after the reply) and a hit:
//
//	go test -run - -bench CachedReply -benchtime 2000x ./router/
func BenchmarkCachedReply(b *testing.B) {
	d := xtest.Run(b, xtest.Config{Routers: 1, Router: router.Config{Guard: router.Guard{Cache: true}}})
	_, err := d.AddWorker(b.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "lookup", Description: "A lookup.", ReadOnly: true, CacheTTLMS: 3600_000},
			func(_ context.Context, _ *worker.Call, i struct{ N int }) (string, error) { return "ok", nil })
	}})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.WaitLive(b.Context(), "lookup"); err != nil {
		b.Fatal(err)
	}
	nc, err := d.Connect(b.Context(), xtest.RoleClient)
	if err != nil {
		b.Fatal(err)
	}
	c := client.New(nc, client.Config{Source: "bench/agent", Timeout: time.Minute})
	for _, name := range []string{"miss", "hit"} {
		b.Run(name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				if name == "miss" {
					n++
				}
				in := json.RawMessage(`{"N":` + strconv.Itoa(n) + `}`)
				if r, err := c.Call(b.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "lookup", Input: in}}}); err != nil || r.Results[0].State != bus.StateSuccess {
					b.Fatal(r, err)
				}
			}
		})
	}
}
