package security

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
)

// TestAttackProgressFlood (session 30, red team on protocol 1.19): a worker
// login sends 5,000 progress events for the one call it was sent, faster
// than the router reads them (past the progress subscription's 1,024
// pending), some naming the batch's other call, served by another worker;
// then its result. The router publishes at most the burst and the pace of
// the call's own progress, none under the other call, counts every other
// as dropped (published and dropped make the 5,000, with the other call's
// one progress event when the flood had it dropped too: the progress
// subscription is the router's, not the call's), and both calls' results
// are right.
func TestAttackProgressFlood(t *testing.T) {
	const flood = 5000
	reg := prometheus.NewRegistry()
	sp := spec
	sp.Workers = []security.Handler{{Name: "flood", Tools: []string{"flood"}}}
	// The router judges a worker gone after three of its beats: 6 s here,
	// as the flood's beats may be read behind it (session 37: at a load
	// of a third of a core they were, and the call ended unknown_outcome).
	d := newDeploymentOf(t, sp, func(c *router.Config) { c.Metrics = reg; c.Store.Heartbeat = 2 * time.Second })
	d.startWorker()
	s := bus.NewSubjects("")
	f := d.conn("worker-flood")
	ev, err := bus.NewEvent(bus.TypeRegister, "attacker", bus.Register{Worker: "flooder", Tools: []bus.ToolDef{
		{Name: "flood", Description: "Floods.", ReadOnly: true, ConcurrencySafe: true, InputSchema: json.RawMessage(`{"type":"object"}`)}}})
	must(t, err)
	_, err = bus.SendRequest(testCtx(t), f.nc, s.Workers.Register("flood"), ev)
	must(t, err)
	go func() { // its heartbeat, so the flood may take longer than three beats
		tick := time.NewTicker(testHeartbeat / 2)
		defer tick.Stop()
		for {
			select {
			case <-t.Context().Done():
				return
			case <-tick.C:
				_ = bus.SendWith(s.Workers.Register("flood"), ev, "", f.nc.PublishMsg)
			}
		}
	}()
	_, err = f.nc.QueueSubscribe(s.Workers.Exec("flood"), s.Workers.ExecQueue("flood"), func(m *nats.Msg) {
		x, err := bus.Decode(m)
		if err != nil {
			t.Errorf("exec: %v", err)
			return
		}
		for i := 1; i <= flood; i++ {
			p, _ := bus.NewEvent(bus.TypeCallProgress, "attacker", bus.Progress{Seq: i, Output: bus.Text("flood")})
			p.SessionID, p.ReplyID, p.ToolCallID = x.SessionID, x.ReplyID, x.ToolCallID
			if i%2 == 0 {
				p.ToolCallID = "c2" // the batch's other call
			}
			pm, _ := p.Msg(m.Reply + bus.ProgressSuffix)
			_ = f.nc.PublishMsg(pm)
		}
		r, _ := bus.NewEvent(bus.TypeExecResult, "attacker", bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("flooded")})
		rm, _ := r.Msg(m.Reply)
		_ = f.nc.PublishMsg(rm)
	})
	must(t, err)
	must(t, f.nc.Flush())

	ac := d.conn("session-s1").client()
	events, err := ac.Watch(testCtx(t), "s1")
	must(t, err)
	defer events.Stop(t.Context())
	start := time.Now()
	rep, err := ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "flood"}, {ID: "c2", Name: "greet"}}}, client.WithReplyID("r1"))
	must(t, err)
	if len(rep.Results) != 2 || rep.Results[0].Output[0].Text != "flooded" || rep.Results[1].Output[0].Text != "hello" {
		t.Fatalf("reply %+v", rep)
	}
	published, greetings := 0, 0
	for e := waitType(t, events, bus.TypeCallProgress); e.Type != bus.TypeBatchDone; e = <-events.C {
		if e.Type != bus.TypeCallProgress {
			continue
		}
		var p bus.Progress
		must(t, e.DataAs(&p))
		switch {
		case e.ToolCallID == "c1" && p.Output[0].Text == "flood":
			published++
		case e.ToolCallID == "c2" && p.Output[0].Text == "greeting":
			greetings++
		default:
			t.Fatalf("progress of %s: %s", e.ToolCallID, e.Data)
		}
	}
	// A burst of 8, then one each 250 ms (router TestProgressGate).
	if published == 0 || published > 8+int(time.Since(start)/(250*time.Millisecond))+1 {
		t.Fatalf("%d of the flood's progress published", published)
	}
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		// c2's greeting, sent before its result, was published before
		// batch.done or dropped (session 37: CI saw 4,997 dropped, 4 published).
		if n := int(counter(t, reg, "toolbus_router_rejected_total", "progress_dropped")); n != flood-published+1-greetings {
			return fmt.Errorf("%d of %d and the greeting counted dropped, %d and %d published", n, flood, published, greetings)
		}
		return nil
	})
}

// counter is the value of counter vector name's series with label value v.
func counter(t *testing.T, reg *prometheus.Registry, name, v string) float64 {
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == v {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
