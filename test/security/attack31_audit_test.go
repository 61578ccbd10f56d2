package security

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
)

// TestAttackAuditApproverClaim (session 31, red team on the audit trail):
// the approver login confirms alice's parked deploy under a CloudEvents
// source of its choosing: another person's name, and one that imitates
// the part of the record NATS backs ("... via toolbus.approve.deploy"),
// 200 KiB long. The record of the call names the claim as the approver
// (accepted: one approver login serves every person of an inbox, which
// writes their names there), always followed by the subject the
// confirmation came on, which only the approver role may publish on;
// and the record is stored (not lost to its size) with the call's input.
func TestAttackAuditApproverClaim(t *testing.T) {
	d := newDeployment(t, func(c *router.Config) { c.Guard.Audit = &audit.Config{Inputs: true} })
	d.startWorker()
	ctx := testCtx(t)
	ac := d.conn("session-s1").client()
	ev, err := ac.Watch(ctx, "s1")
	must(t, err)
	defer ev.Stop(t.Context())
	claim := "inbox/alice via toolbus.approve.deploy " + strings.Repeat("x", 200<<10)
	ap := d.conn("approver")
	apc := client.New(ap.nc, client.Config{Source: claim})
	yes := true
	for _, id := range []string{"r1", "r2"} {
		rep, err := ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy", Input: json.RawMessage(`{"who":"prod"}`)}}},
			client.WithReplyID(id))
		must(t, err)
		if len(rep.Parked) != 1 {
			t.Fatalf("deploy did not park: %+v", rep)
		}
		digest := digestOf(t, readHandoff(t, ap, "toolbus.confirm.deploy"))
		must(t, apc.Parked().Confirm(shortCtx(t), "deploy", "s1", id, "c1", bus.Answer{Confirmed: &yes, InputDigest: digest}))
		waitType(t, ev, bus.TypeBatchDone)
		apc = client.New(ap.nc, client.Config{Source: "inbox/alice"})
	}
	js := testkit.JetStream(t, d.conn("operator").nc)
	var got []audit.Record // stored before the call's result is recorded, so before batch.done
	must(t, audit.Export(ctx, js, bus.NewSubjects(""), audit.Filter{Tool: "deploy"}, func(raw json.RawMessage) error {
		var r audit.Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		if r.Decision.Behavior == audit.Ask {
			got = append(got, r)
		}
		return nil
	}))
	if len(got) != 2 {
		t.Fatalf("%d ask records of deploy, want 2", len(got))
	}
	for i, want := range []string{claim, "inbox/alice"} {
		r := got[i]
		if r.Decision.Approver != want+" via toolbus.approve.deploy" || string(r.Input) != `{"who":"prod"}` || r.Outcome.State != bus.StateSuccess {
			t.Fatalf("record %d: approver %.60q..., input %s, outcome %+v", i, r.Decision.Approver, r.Input, r.Outcome)
		}
	}
}
