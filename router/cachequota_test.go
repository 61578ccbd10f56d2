package router_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolbus/toolbus/bus"
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
