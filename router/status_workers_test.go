package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// TestStatusListsWorkers: the status verb names each tool's live workers
// (protocol 1.29), sorted, from the beats it counts: two Go workers of one
// tool and a worker of another that only sends its registration beats, as the Python
// and Java SDKs do (no micro discovery); past bus.StatusWorkers ids the
// list stops and live_workers still counts them all.
func TestStatusListsWorkers(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: time.Minute}) // the raw registrations beat once: live for three heartbeats
	for _, id := range []string{"go-b", "go-a"} {
		if _, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Config: worker.Config{ID: id}, Setup: func(w *worker.Worker) error {
			return worker.Register(w, bus.ToolDef{Name: "greet", Description: "Greets."},
				func(context.Context, *worker.Call, noInput) (string, error) { return "hi", nil })
		}}); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := d.Connect(t.Context(), xtest.RoleWorker)
	if err != nil {
		t.Fatal(err)
	}
	registerRaw(t, nc, d.Subjects(), "py-1", "py_add")
	var many []string
	for i := range bus.StatusWorkers + 1 {
		many = append(many, fmt.Sprintf("m%03d", i))
		registerRaw(t, nc, d.Subjects(), many[i], "many")
	}
	err = d.EveryStatus(t.Context(), func(st bus.Status) error {
		for _, want := range []bus.ToolStatus{
			{Name: "greet", LiveWorkers: 2, Workers: []string{"go-a", "go-b"}},
			{Name: "py_add", LiveWorkers: 1, Workers: []string{"py-1"}},
			{Name: "many", LiveWorkers: len(many), Workers: many[:bus.StatusWorkers]},
		} {
			i := slices.IndexFunc(st.Tools, func(t bus.ToolStatus) bool { return t.Name == want.Name })
			if i < 0 || st.Tools[i].LiveWorkers != want.LiveWorkers || !slices.Equal(st.Tools[i].Workers, want.Workers) {
				return fmt.Errorf("status of %s: %+v, want %d live, workers %v", want.Name, st.Tools, want.LiveWorkers, want.Workers)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// registerRaw registers worker id for tool as the Python and Java SDKs
// do, with no micro discovery: its registration is its first beat.
func registerRaw(t *testing.T, nc *nats.Conn, s bus.Subjects, id, tool string) {
	t.Helper()
	def := bus.ToolDef{Name: tool, Description: "A tool.", InputSchema: json.RawMessage(`{"type":"object"}`)}
	ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/"+id, bus.Register{Worker: id, Tools: []bus.ToolDef{def}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ev.Msg(s.Workers.Register(tool))
	if err != nil {
		t.Fatal(err)
	}
	reply, err := nc.RequestMsgWithContext(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	var ack bus.RegisterAck
	if e, err := bus.Decode(reply); err != nil || e.DataAs(&ack) != nil || len(ack.Accepted) != 1 {
		t.Fatalf("registration of %s: %+v %v", id, e, err)
	}
}

// TestAttackStatusWorkerIDs (session 39): a worker login may beat under any
// number of ids, each up to 128 characters, for each name it may register;
// the status verb's ids must not push its reply past the server's max
// payload, which would leave every status request unanswered (toolbus
// status, the readiness waits). The ids are as many as fit; live_workers
// still counts them all.
func TestAttackStatusWorkerIDs(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), MaxPayload: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	d := xtest.Run(t, xtest.Config{Server: s, Routers: 1, Heartbeat: time.Minute})
	nc, err := d.Connect(t.Context(), xtest.RoleWorker)
	if err != nil {
		t.Fatal(err)
	}
	tools := []string{"t1", "t2", "t3"}
	for _, tool := range tools {
		for i := range bus.StatusWorkers {
			registerRaw(t, nc, d.Subjects(), fmt.Sprintf("%s-%0125d", tool, i), tool)
		}
	}
	err = d.EveryStatus(t.Context(), func(st bus.Status) error {
		named := 0
		for _, ts := range st.Tools {
			if slices.Contains(tools, ts.Name) && ts.LiveWorkers != bus.StatusWorkers {
				return fmt.Errorf("%s: %d live workers", ts.Name, ts.LiveWorkers)
			}
			named += len(ts.Workers)
		}
		if named == 0 || named >= len(tools)*bus.StatusWorkers {
			return fmt.Errorf("%d ids named in a reply of at most 16 KiB", named)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
