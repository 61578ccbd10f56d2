package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// TestConfirmationReason: a confirmation's reason goes with a denial only
// (docs/protocol.md 6.3); with "confirmed": true it is a bad_request and
// the call stays parked; the record says who answered and when.
func TestConfirmationReason(t *testing.T) {
	x := xtest.Run(t, xtest.Config{Routers: 1})
	nc, err := x.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(nc, client.Config{Source: "test/approver"})
	if _, err := x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "deploy", Description: "Deploy."},
			func(context.Context, *worker.Call, deployIn) (string, error) { return "ok", nil })
	}}); err != nil {
		t.Fatal(err)
	}
	if err := x.WaitLive(t.Context(), "deploy"); err != nil {
		t.Fatal(err)
	}
	in := client.Input(deployIn{Env: "prod"})
	reply, err := cl.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy", Input: in}}}, client.WithReplyID("r1"))
	if err != nil || len(reply.Parked) != 1 {
		t.Fatalf("%+v %v", reply, err)
	}
	yes, no := true, false
	err = cl.Parked().Confirm(t.Context(), "deploy", "s1", "r1", "c1", bus.Answer{Confirmed: &yes, InputDigest: bus.InputDigest(in), Reason: "because"})
	if !errors.Is(err, bus.ErrBadRequest) || !strings.Contains(err.Error(), "reason goes with \"confirmed\": false only") {
		t.Fatalf("allow with a reason: %v", err)
	}
	if err := cl.Parked().Confirm(t.Context(), "deploy", "s1", "r1", "c1", bus.Answer{Confirmed: &no, InputDigest: bus.InputDigest(in), Reason: "not now"}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstreamKV(t, x)
	if err != nil {
		t.Fatal(err)
	}
	e, err := js.Get(t.Context(), bus.CallKey("s1", "r1", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if v := string(e.Value()); !strings.Contains(v, `"answered_by":"test/approver via toolbus.approve.deploy"`) || !strings.Contains(v, `"answered_at":"`) {
		t.Fatalf("record %s", v)
	}
}

func jetstreamKV(t *testing.T, x *xtest.Deployment) (jetstream.KeyValue, error) {
	t.Helper()
	nc, err := x.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		return nil, err
	}
	js := testkit.JetStream(t, nc)
	return js.KeyValue(t.Context(), x.Subjects().Bucket(bus.BucketParked))
}
