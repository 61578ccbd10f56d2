package embedded

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestPrefixIsolation: two deployments with different prefixes share one
// NATS server without seeing each other's tools, calls or events, and name
// their buckets and streams after their prefix (docs/protocol.md 2 and 8).
func TestPrefixIsolation(t *testing.T) {
	s := testkit.RunServer(t)
	type deployment struct {
		r      *router.Router
		client *client.Client
	}
	deploy := func(prefix, tool string) deployment {
		d := xtest.Run(t, xtest.Config{Server: s, Routers: 1, Router: router.Config{Prefix: prefix}, Heartbeat: testHeartbeat, Bound: readyBound})
		_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
			handle(t, w, bus.ToolDef{Name: tool, ConcurrencySafe: true},
				func(context.Context, *worker.Call) (*bus.ExecResult, error) {
					return textResult(prefix + " " + tool), nil
				})
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.WaitLive(t.Context(), tool); err != nil {
			t.Fatal(err)
		}
		return deployment{d.Routers[0], client.New(testkit.Connect(t, s), client.Config{Prefix: prefix, Source: "test/" + prefix})}
	}
	alpha := deploy("alpha", "alpha_tool")
	beta := deploy("beta", "beta_tool")

	ev, err := beta.client.Watch(t.Context(), "shared-session")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, ev.Stop)
	for _, d := range []struct {
		name       string
		c          *client.Client
		own, other string
	}{{"alpha", alpha.client, "alpha_tool", "beta_tool"}, {"beta", beta.client, "beta_tool", "alpha_tool"}} {
		t.Run(d.name, func(t *testing.T) {
			list, err := d.c.Tools(testCtx(t), "shared-session", bus.FormatAnthropic, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, raw := range list.Tools {
				var x struct{ Name string }
				_ = json.Unmarshal(raw, &x)
				names = append(names, x.Name)
			}
			if !slices.Equal(names, []string{d.own}) {
				t.Fatalf("listed %q, want only %s", names, d.own)
			}
			reply, err := d.c.Call(testCtx(t), "shared-session", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: d.own}, {ID: "c2", Name: d.other}}})
			if err != nil {
				t.Fatal(err)
			}
			wantSuccess(t, reply.Results[0], d.name+" "+d.own)
			wantFailure(t, reply.Results[1], bus.StateError, bus.CodeUnknownTool, "")
		})
	}
	// beta's watcher sees beta's batch only.
	events := collect(t, ev, func(x *bus.Event) bool { return x.Type == bus.TypeBatchDone })
	for _, x := range events {
		if x.Source != "toolbus/router/"+beta.r.ID() {
			t.Errorf("beta's watcher got %s from %s", x.Type, x.Source)
		}
	}

	js := testkit.JetStream(t, testkit.Connect(t, s))
	for _, p := range []string{"alpha", "beta"} {
		for _, b := range []string{bus.BucketTools, bus.BucketWorkers, bus.BucketLedger} {
			if _, err := js.KeyValue(t.Context(), p+"_"+b); err != nil {
				t.Errorf("bucket %s_%s: %v", p, b, err)
			}
		}
		for _, st := range []string{bus.StreamEvents} { // no handoff stream (docs/protocol.md 8, 1.6)
			name := strings.ToUpper(p) + "_" + st
			if _, err := js.Stream(t.Context(), name); err != nil {
				t.Errorf("stream %s: %v", name, err)
			}
		}
	}
}
