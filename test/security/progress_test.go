package security

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/worker"
)

// TestOnlyRoutersPublishEvents (protocol 1.18): a worker login, of every
// tool or confined to one, and the bridge login cannot publish on a
// session's events, so neither can forge a call.result, a batch.done or
// an asked call.parked of any session, nor take a derived event id first;
// NATS refuses each. A worker's progress still reaches the session,
// through the router that sent the call: published with the router's
// source and the exec's ids, and the worker hits no violation on the way.
func TestOnlyRoutersPublishEvents(t *testing.T) {
	for _, confined := range []bool{false, true} {
		name := "every tool"
		s := spec
		if confined {
			name, s.WorkerTools = "confined to greet and job", []string{"greet", "job"}
		}
		t.Run(name, func(t *testing.T) {
			d := newDeploymentOf(t, s)
			wl := d.conn("worker")
			w, err := worker.New(wl.nc, worker.Config{Heartbeat: testHeartbeat})
			must(t, err)
			must(t, w.Handle(bus.ToolDef{Name: "greet", Description: "Greets.", ReadOnly: true, ConcurrencySafe: true,
				InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
					if err := c.Progress(bus.Text("greeting " + c.SessionID)...); err != nil {
						return nil, err
					}
					return &bus.ExecResult{Output: bus.Text("hello")}, nil
				}))
			// A durable tool: its exec comes from the work queue, with no
			// reply subject; its progress goes to the progress_inbox the
			// router gave it (5.8, 1.18).
			must(t, w.Handle(bus.ToolDef{Name: "job", Description: "A durable job.", Durable: true, Permission: bus.PermissionAllow,
				InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
					if err := c.Progress(bus.Text("working " + c.SessionID)...); err != nil {
						return nil, err
					}
					return &bus.ExecResult{Output: bus.Text("job done")}, nil
				}))
			must(t, w.Start(t.Context()))
			testkit.Stop(t, func(ctx context.Context) error { return w.Drain(ctx) })
			testkit.Recv(t, w.Registered(), bound, "the worker's registration")

			agent := d.conn("session-s1")
			ac := agent.client()
			ev, err := ac.Watch(testCtx(t), "s1")
			must(t, err)
			defer ev.Stop(t.Context())
			reply, err := ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet"}}}, client.WithReplyID("r1"))
			must(t, err)
			if len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess {
				t.Fatalf("greet: %+v", reply)
			}
			p := waitType(t, ev, bus.TypeCallProgress)
			var data bus.Progress
			must(t, p.DataAs(&data))
			if !strings.HasPrefix(p.Source, "toolbus/router/") || p.SessionID != "s1" || p.ReplyID != "r1" || p.ToolCallID != "c1" ||
				data.Seq != 1 || len(data.Output) != 1 || data.Output[0].Text != "greeting s1" {
				t.Fatalf("progress %+v %s", p, p.Data)
			}
			reply, err = ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c9", Name: "job"}}}, client.WithReplyID("r9"))
			must(t, err)
			if len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess {
				t.Fatalf("job: %+v", reply)
			}
			if p := waitType(t, ev, bus.TypeCallProgress); !strings.HasPrefix(p.Source, "toolbus/router/") || p.ReplyID != "r9" || p.ToolCallID != "c9" ||
				!strings.Contains(string(p.Data), "working s1") {
				t.Fatalf("the durable call's progress %+v %s", p, p.Data)
			}
			wl.noViolations()

			// The forgeries: events of s1 and of another session, a
			// derived batch.done id among them (the message's body is not
			// read: NATS refuses the subject).
			for _, who := range []*login{wl, d.conn(security.RoleBridge)} {
				for _, subject := range []string{"toolbus.events.s1", "toolbus.events.s2", "toolbus.events.x"} {
					who.denyPublish(subject)
				}
			}
			// Nothing forged reached s1's watcher: the next events are the
			// router's, of r9's end and of the next batch.
			reply, err = ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c2", Name: "greet"}}}, client.WithReplyID("r2"))
			must(t, err)
			if len(reply.Results) != 1 {
				t.Fatalf("greet: %+v", reply)
			}
			deadline := time.After(bound)
			for {
				select {
				case e := <-ev.C:
					if e.ReplyID != "r9" && e.ReplyID != "r2" || !strings.HasPrefix(e.Source, "toolbus/router/") {
						t.Fatalf("s1's watcher got %s from %s, reply %q", e.Type, e.Source, e.ReplyID)
					}
					if e.Type == bus.TypeBatchDone && e.ReplyID == "r2" {
						return
					}
				case <-deadline:
					t.Fatal("no batch.done of r2")
				}
			}
		})
	}
}
