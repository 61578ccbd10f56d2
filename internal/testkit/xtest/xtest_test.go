package xtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

type in struct {
	Text string `json:"text"`
}

// TestLiveThenGone: WaitLive returns once both routers list the worker's
// tool live in their status, WaitGone once the worker has left; a router
// that was stopped is no longer waited for.
func TestLiveThenGone(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 2})
	w, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "echo", Description: "Echo.", ReadOnly: true},
			func(_ context.Context, _ *worker.Call, x in) (string, error) { return x.Text, nil })
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), "echo"); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err = d.EveryStatus(t.Context(), func(st bus.Status) error {
		seen[st.Router] = true
		return nil
	})
	if err != nil || len(seen) != 2 {
		t.Fatalf("statuses from %v: %v", seen, err)
	}
	d.Routers[0].Stop(t.Context())
	if err := w.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := d.WaitGone(t.Context(), "echo"); err != nil {
		t.Fatal(err)
	}
}

// TestWaitLiveFailsWithinBound: a tool nobody serves is reported with the
// router that lacks it once the bound has passed.
func TestWaitLiveFailsWithinBound(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1, Bound: 300 * time.Millisecond})
	err := d.WaitLive(t.Context(), "nope")
	if err == nil {
		t.Fatal("WaitLive of a tool nobody serves returned nil")
	}
	if want := d.Routers[0].ID(); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "tool nope not live") {
		t.Fatalf("error %q does not name router %s and the tool", err, want)
	}
}
