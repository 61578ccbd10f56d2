package security

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/worker"
)

// TestDial: client.Dial and worker.Dial log in from a natsconn.Config
// (here the environment variables of the generated .env files) and close
// the connection they made.
func TestDial(t *testing.T) {
	d := newDeployment(t)
	t.Setenv("NATS_URL", d.srv.ClientURL())
	t.Setenv("NATS_NKEY", security.SeedFile(d.dir, "worker"))
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX.worker")
	w, err := worker.Dial(natsconn.FromEnv(), worker.Config{Heartbeat: testHeartbeat})
	must(t, err)
	must(t, worker.Register(w, bus.ToolDef{Name: "shout", ReadOnly: true}, func(_ context.Context, _ *worker.Call, _ struct{}) (string, error) {
		return "HEY", nil
	}))
	must(t, w.Start(t.Context()))
	testkit.Recv(t, w.Registered(), bound, "the worker's registration")

	t.Setenv("NATS_NKEY", security.SeedFile(d.dir, "session-s1"))
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX.session-s1")
	cl, err := client.Dial(natsconn.FromEnv(), client.Config{Source: "test/dial"})
	must(t, err)
	reply, err := cl.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "shout"}}})
	must(t, err)
	if reply.Results[0].State != bus.StateSuccess || reply.Results[0].Output[0].Text != "HEY" {
		t.Fatalf("%+v", reply.Results[0])
	}
	cl.Close(t.Context())
	if !cl.Conn().IsClosed() {
		t.Fatal("Close left the dialed connection open")
	}
	w.Stop(t.Context())
	t.Setenv("NATS_NKEY", security.SeedFile(d.dir, "nobody"))
	if _, err := client.Dial(natsconn.FromEnv(), client.Config{}); err == nil {
		t.Fatal("a missing seed file dialed")
	}
}
