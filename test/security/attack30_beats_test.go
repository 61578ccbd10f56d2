package security

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
// that other workers run. Closed in session 30 (protocol 1.20): a worker id is
// bound to the NATS account that registered it first, which the server names
// in Nats-Request-Info across the worker account's service import; b's
// beats and leaves are refused denied.
func TestAttackWorkerBeatsForAnother(t *testing.T) {
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
		// A forged Nats-Request-Info naming a's account: the server replaces it.
		m, err := ev.Msg(s.Workers.Register("greet"))
		must(t, err)
		m.Header.Set(bus.HeaderRequestInfo, `{"acc":"toolbus-worker-a"}`)
		reply, err := b.nc.RequestMsgWithContext(testCtx(t), m)
		must(t, err)
		var e bus.Error
		if got, _ := bus.Decode(reply); got == nil || got.Type != bus.TypeError || got.DataAs(&e) != nil || e.Code != bus.CodeDenied {
			t.Fatalf("b's registration under a's id with a's account claimed: %s, want denied", reply.Data)
		}
		// Without a reply the server's header has no _R_. reply to vouch for it: refused too.
		must(t, b.nc.PublishMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}))
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
