package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/worker"
)

// TestDrainDeadlineEveryComponent: each long-running component drained
// with a short context returns by its deadline (plus the short cleanup of
// internal/life), whatever it holds: the router and the worker a call that
// ignores its context, the bridge a server that never answers, the facade
// and the skills catalogue their watches.
func TestDrainDeadlineEveryComponent(t *testing.T) {
	const deadline = 500 * time.Millisecond
	e := newEnv(t, 1)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	w := e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "stubborn", TimeoutMS: 120_000}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			entered <- struct{}{}
			<-release // ignores its context
			return textResult("late"), nil
		})
	})
	e.waitLive("stubborn")
	go func() {
		_, _ = e.client.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "stubborn"}}})
	}()
	testkit.Recv(t, entered, bound, "the stubborn call running")

	js := testkit.JetStream(t, e.nc)
	objects, err := js.ObjectStore(t.Context(), e.d.Subjects().ObjectStore(bus.ObjectSkills))
	if err != nil {
		t.Fatal(err)
	}
	cat := skills.NewCatalogue(skills.Config{Objects: objects})
	if err := cat.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	br, err := bridge.New(e.connect(t), &bridge.File{Servers: []bridge.Server{{Name: "hang", Command: "sleep", Args: []string{"3600"}}}}, bridge.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	fc := facade.New(client.New(e.connect(t), client.Config{Source: "toolbus/mcp"}), facade.Config{})

	for _, c := range []struct {
		name   string
		drain  func(context.Context) error
		closed <-chan struct{}
	}{
		{"router", e.routers[0].Drain, e.routers[0].Closed()},
		{"worker", w.Drain, w.Closed()},
		{"bridge", br.Drain, br.Closed()},
		{"facade", fc.Drain, fc.Closed()},
		{"skills catalogue", cat.Drain, cat.Closed()},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- c.drain(ctx) }()
			testkit.Recv(t, done, deadline+drainSlack+bound, c.name+" drained")
			if took := time.Since(start); took > deadline+drainSlack {
				t.Errorf("%s drained in %v, past its %v deadline by more than %v", c.name, took, deadline, drainSlack)
			}
			select {
			case <-c.closed:
			default:
				t.Errorf("%s: Closed not closed once Drain returned", c.name)
			}
		})
	}
}
