package security

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackWorkerBeatsForAnother (session 30, red team): worker-b, which
// serves greet as worker-a does, sends greet's leave and beats listing no
// call under worker-a's id while worker-a runs a greet call (a worker id is a
// claim: the subject P.register.greet is all NATS can confine). worker-a's
// call should end with worker-a's result; it ends unknown_outcome (either
// forgery alone does it), so a worker of a tool can end the tool's calls
// that other workers run. Known: the fix binds a worker id to its login
// (docs/security.md, registry or protocol 7, not the accounts' rendering).
func TestAttackWorkerBeatsForAnother(t *testing.T) {
	if os.Getenv("TOOLBUS_RUN_BUGS") == "" {
		t.Skip("BUG: a worker's forged beats and leaves under another worker's id end that worker's calls unknown_outcome")
	}
	sp := spec
	sp.Workers = []security.Handler{{Name: "a", Tools: []string{"greet"}}, {Name: "b", Tools: []string{"greet"}}}
	d := newDeploymentOf(t, sp)
	s := bus.NewSubjects("")
	def := bus.ToolDef{Name: "greet", Description: "Greets.", ReadOnly: true, ConcurrencySafe: true, InputSchema: json.RawMessage(`{"type":"object"}`)}
	w, err := worker.New(d.conn("worker-a").nc, worker.Config{Heartbeat: testHeartbeat})
	must(t, err)
	started, release := make(chan struct{}, 1), make(chan struct{})
	must(t, w.Handle(def, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
		started <- struct{}{}
		<-release
		return &bus.ExecResult{Output: bus.Text("a's")}, nil
	}))
	must(t, w.Start(t.Context()))
	testkit.Stop(t, func(ctx context.Context) error { return w.Drain(ctx) })
	testkit.Recv(t, w.Registered(), bound, "worker a's registration")

	done := make(chan *bus.Reply, 1)
	go func() {
		r, err := d.conn("session-s2").client().Call(testCtx(t), "s2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet"}}}, client.WithReplyID("r1"))
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	testkit.Recv(t, started, bound, "worker a's call")
	b := d.conn("worker-b")
	forge := func(r bus.Register) {
		ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/"+w.ID(), r)
		must(t, err)
		_, err = bus.SendRequest(testCtx(t), b.nc, s.Workers.Register("greet"), ev)
		must(t, err)
	}
	// Six heartbeats' worth (past the router's patience for a call its
	// worker does not list), beats listing nothing and leaves in turn.
	for end := time.Now().Add(6 * testHeartbeat); time.Now().Before(end); {
		forge(bus.Register{Worker: w.ID(), Tools: []bus.ToolDef{def}, InFlight: map[string][]string{"greet": {}}})
		forge(bus.Register{Worker: w.ID(), Tools: []bus.ToolDef{def}, Leaving: true})
	}
	close(release)
	r := testkit.Recv(t, done, bound, "the call's reply")
	if r == nil || len(r.Results) != 1 || r.Results[0].State != bus.StateSuccess || r.Results[0].Output[0].Text != "a's" {
		t.Fatalf("worker a's call after b's beats: %+v", r)
	}
}
