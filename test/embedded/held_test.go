package embedded

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// TestRouterHeldCallRuns: a router held past three heartbeats (SIGSTOP, as
// a starved process or a suspended VM) reads no beat meanwhile; a call that
// comes as it resumes still runs on the worker whose beat it read before
// the hold (registry's heldClock: session 29's CI at load 18 saw such calls
// end unavailable), and that worker, which sends no beat since, is gone
// three heartbeats of the router's own time later.
func TestRouterHeldCallRuns(t *testing.T) {
	const hb = time.Second
	bin := buildRouter(t)
	s := testkit.RunServer(t)
	c := client.New(testkit.Connect(t, s), client.Config{Source: "test/agent"})
	a := startRouterArgs(t, bin, "--nats", s.ClientURL(), "--builtin=false", "--id", "A", "--heartbeat", hb.String())
	w, err := worker.New(testkit.Connect(t, s), worker.Config{Heartbeat: time.Hour}) // one beat: its registration
	if err != nil {
		t.Fatal(err)
	}
	handle(t, w, bus.ToolDef{Name: "steady", ReadOnly: true, ConcurrencySafe: true},
		func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("ran"), nil })
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Drain(context.Background()) })
	n := 0
	call := func() bus.Result {
		n++
		r, err := c.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "steady"}}}, client.WithReplyID(fmt.Sprintf("r%d", n)))
		if err != nil {
			t.Fatal(err)
		}
		return r.Results[0]
	}
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		if r := call(); r.State != bus.StateSuccess {
			return fmt.Errorf("before the hold: %s", jsonOf(r))
		}
		return nil
	})

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	hold := time.NewTimer(3*hb + hb/2) // the fault itself: the router is held this long
	<-hold.C
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	if r := call(); r.State != bus.StateSuccess {
		t.Fatalf("the call as the router resumed: %s", jsonOf(r))
	}

	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if r := call(); r.Error == nil || r.Error.Code != bus.CodeUnavailable {
			return fmt.Errorf("a worker silent since before the hold: %s", jsonOf(r))
		}
		return nil
	})
	gone := time.Since(resumed)
	if gone > 3*hb+bound/2 {
		t.Fatalf("the silent worker was gone %v after the router resumed", gone)
	}
	t.Logf("the silent worker was gone %v after the router resumed", gone)
}
