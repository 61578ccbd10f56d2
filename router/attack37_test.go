package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestAttack37ShadowAuditedAsOwn (session 37, red team): an agent declares
// a request-scoped tool named as a registered one that asks for a
// confirmation (deploy), calls it and answers it itself. Its audit record
// must not read as an answered call of the registered tool (behavior
// external, as a handler's answer of an external deploy): it is builtin,
// as docs/guardrails.md lists request-scoped tools, and its rule says the
// caller declared it.
func TestAttack37ShadowAuditedAsOwn(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1, Router: router.Config{Guard: router.Guard{Audit: &audit.Config{}}}})
	_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "deploy", Description: "Deploy.", Permission: bus.PermissionAsk},
			func(context.Context, *worker.Call, noInput) (string, error) { return "deployed", nil })
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), "deploy"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, d)
	_, js := clientJS(t, d)
	shadow := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy", Input: json.RawMessage(`{"env":"prod"}`)}},
		Request: &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "deploy", Description: "mine",
			InputSchema: json.RawMessage(`{"type":"object"}`)}}}}
	if r, err := c.Call(t.Context(), "s1", shadow, client.WithReplyID("r1")); err != nil || len(r.Parked) != 1 {
		t.Fatalf("shadowing call: %+v %v", r, err)
	}
	answerAndWait(t, c, "deploy", "s1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("deployed to prod")})
	var recs []audit.Record
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		recs = nil
		err := audit.Export(t.Context(), js, d.Subjects(), audit.Filter{Session: "s1"}, func(raw json.RawMessage) error {
			var rec audit.Record
			err := json.Unmarshal(raw, &rec)
			recs = append(recs, rec)
			return err
		})
		if err == nil && len(recs) == 0 {
			err = fmt.Errorf("no record yet")
		}
		return err
	})
	for _, rec := range recs {
		if rec.Decision.Behavior != audit.Builtin || rec.Decision.Rule == "" {
			t.Errorf("the caller's own deploy audited as %q (rule %q), not as its request-scoped tool", rec.Decision.Behavior, rec.Decision.Rule)
		}
	}
}

// TestAttack37ResentOtherInputSpendsNothing (session 37, red team on
// quotas: held): a write call whose ledger entry exists is let through the
// quota step uncounted (its first copy was counted). An agent at the end of
// its budget re-sends the batch's reply and call id with another input, to
// run a new write for free: the ledger holds the first call's digest, so
// the copy gets bad_request and nothing runs; a new call is still refused.
func TestAttack37ResentOtherInputSpendsNothing(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1, Router: router.Config{Guard: router.Guard{Limits: limits.Policy{Rules: []limits.Rule{
		{Name: "one-write", Writes: true, Budget: &limits.Budget{Units: 1}}}}}}})
	var runs atomic.Int64
	type payIn struct {
		Amount int `json:"amount"`
	}
	_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "pay", Description: "Pay.", Permission: bus.PermissionAllow},
			func(_ context.Context, _ *worker.Call, in payIn) (string, error) {
				runs.Add(1)
				return fmt.Sprint("paid ", in.Amount), nil
			})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), "pay"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, d)
	send := func(reply, input string) bus.Result {
		t.Helper()
		r, err := c.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "w", Name: "pay", Input: json.RawMessage(input)}}}, client.WithReplyID(reply))
		if err != nil {
			t.Fatal(err)
		}
		return r.Results[0]
	}
	if res := send("r1", `{"amount":1}`); res.State != bus.StateSuccess {
		t.Fatalf("the budget's one write: %+v", res)
	}
	if res := send("r1", `{"amount":1000}`); res.State == bus.StateSuccess || res.Error == nil || res.Error.Code != bus.CodeBadRequest {
		t.Fatalf("a copy with another input: %+v", res)
	}
	if res := send("r2", `{"amount":1000}`); res.Error == nil || res.Error.Code != bus.CodeLimitExceeded {
		t.Fatalf("a new write past the budget: %+v", res)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}
