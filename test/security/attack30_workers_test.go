package security

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackWorkerAgainstWorker (session 30, red team; docs/security.md
// "Accounts"): every process logged in as the one worker login may read every
// exec of every tool (a plain subscription to P.exec.<t> beside the queue
// group), learn its reply subject and answer it first, and shares one account
// with the others. A login per worker (Spec.Workers: worker-<name>, confined
// to its tools, alone in its account, taking its execs in their queue groups
// only) closes each of those by NATS permissions: worker-b, which serves greet
// as worker-a does, can neither read nor answer worker-a's calls, take its
// work, register or leave its tools, cancel, nor reach worker-a's account
// through a server's answer.
func TestAttackWorkerAgainstWorker(t *testing.T) {
	sp := spec
	sp.Workers = []security.Handler{{Name: "a", Tools: []string{"greet", "slow", "job", "idle"}}, {Name: "b", Tools: []string{"greet", "spy"}}}
	d := newDeploymentOf(t, sp)
	s := bus.NewSubjects("")
	a := d.conn("worker-a")
	w, err := worker.New(a.nc, worker.Config{Heartbeat: testHeartbeat})
	must(t, err)
	in := json.RawMessage(`{"type":"object","properties":{"who":{"type":"string"}}}`)
	for _, def := range []bus.ToolDef{{Name: "slow", Description: "Worker a's.", ReadOnly: true, InputSchema: in},
		{Name: "job", Description: "Worker a's durable job.", Durable: true, Permission: bus.PermissionAllow, InputSchema: in}} {
		must(t, w.Handle(def, func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: bus.Text("a ran " + string(c.Input))}, nil
		}))
	}
	must(t, w.Start(t.Context()))
	testkit.Stop(t, func(ctx context.Context) error { return w.Drain(ctx) })
	testkit.Recv(t, w.Registered(), bound, "worker a's registration")

	// A spy in worker-a's account, where a server's answer to worker-b
	// would land if the two shared one: a cancel, an exec of a tool a
	// serves (in its queue group, as the login may).
	spy := d.conn("worker-a")
	landed := make(chan *nats.Msg, 16)
	_, err = spy.nc.ChanSubscribe(s.All("cancel"), landed)
	must(t, err)
	_, err = spy.nc.ChanQueueSubscribe(s.Workers.Exec("idle"), s.Workers.ExecQueue("idle"), landed)
	must(t, err)
	must(t, spy.nc.Flush())

	b := d.conn("worker-b")
	work := s.Stream(bus.StreamWork) + "." + s.Workers.WorkConsumer("job")
	// Read a's execs: its own tools, greet outside its queue group, a's inbox
	// (the pulls of its durable calls), the shared login's.
	for _, subj := range []string{s.Workers.Exec("slow"), s.Workers.Exec("greet"), "_INBOX.worker-a.>", "_INBOX.worker.>"} {
		b.denySubscribe(subj)
	}
	sub, err := b.nc.QueueSubscribeSync(s.Workers.Exec("greet"), "spy")
	must(t, err)
	b.waitViolation("Subscription", s.Workers.Exec("greet"))
	_ = sub.Unsubscribe()
	// Answer, take, leave or cancel a's calls and tools.
	for _, subj := range []string{s.Workers.Result("slow"), s.Workers.Result("job"), s.Workers.Register("slow"), s.Cancel("s2"),
		"$JS.API.CONSUMER.MSG.NEXT." + work, "$JS.ACK." + work + ".1.1.1.1.1.1", "$JS.API.CONSUMER.INFO." + work} {
		b.denyPublish(subj)
	}
	// Have the router answer into a's account: the answer lands in b's own.
	for _, reply := range []string{s.Cancel("s2"), s.Workers.Exec("idle")} {
		must(t, b.nc.PublishMsg(&nats.Msg{Subject: s.Workers.Register("spy"), Reply: reply, Data: []byte(`{}`)}))
	}
	if _, err := b.nc.Request(s.Workers.Register("spy"), []byte(`{}`), bound); err != nil {
		t.Fatalf("b's own request: %v", err)
	}

	// a's calls are a's: core and durable.
	ac := d.conn("session-s2").client()
	for _, tool := range []string{"slow", "job"} {
		rep, err := ac.Call(testCtx(t), "s2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: tool, Input: json.RawMessage(`{"who":"x"}`)}}})
		must(t, err)
		if len(rep.Results) != 1 || rep.Results[0].State != bus.StateSuccess || rep.Results[0].Output[0].Text != `a ran {"who":"x"}` {
			t.Fatalf("%s: %+v", tool, rep)
		}
	}
	a.noViolations()
	must(t, spy.nc.Flush())
	select {
	case m := <-landed:
		t.Fatalf("worker-a's account received %s (%.100s), an answer worker-b asked for", m.Subject, m.Data)
	default:
	}
}
