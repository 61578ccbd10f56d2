package security

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestApproverNarrow: the approver confirms or denies exactly the parked
// input, on P.approve.<tool>, and nothing more. NATS denies it every
// P.answer.<tool> (no forged external results, no confirmation on the old
// subject); the router refuses, with bad_request and nothing changed, a
// confirmation without the input's digest, with another digest ("input
// changed"), with an edited input, or remembering a rule that is not among
// the call's suggested_rules, and a confirmation of an external call. On a
// secured router a confirmation on P.answer.<tool> (the operator's) is
// refused with the new subject named. Then the right confirmation runs the
// call and its suggested rule is remembered.
func TestApproverNarrow(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	ctx := testCtx(t)
	agent := d.conn("session-s1")
	ac := agent.client()
	ev, err := ac.Watch(ctx, "s1")
	must(t, err)
	defer ev.Stop(t.Context())
	reply, err := ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy", Input: client.Input(map[string]string{"who": "staging"})}}}, client.WithReplyID("r1"))
	must(t, err)
	if len(reply.Parked) != 1 || reply.Parked[0].Kind != bus.KindConfirm {
		t.Fatalf("deploy parked %+v, want a confirmation", reply.Parked)
	}
	ap := d.conn("approver")
	req := readHandoff(t, ap, "toolbus.confirm.deploy")
	digest := digestOf(t, req)
	if want := bus.InputDigest(json.RawMessage(`{"who":"staging"}`)); digest != want {
		t.Fatalf("input_digest %s, want %s", digest, want)
	}
	var listed struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	must(t, ap.client().Admin(ctx, "parked.list", "s1", nil, &listed))
	if len(listed.Parked) != 1 || listed.Parked[0].InputDigest != digest {
		t.Fatalf("parked.list %+v, want input_digest %s", listed.Parked, digest)
	}

	// NATS: no answer subject at all, so no forged external result and no
	// confirmation the old way; an agent cannot confirm its own call.
	for _, s := range []string{"toolbus.answer.deploy", "toolbus.answer.pick"} {
		ap.denyPublish(s)
	}
	agent.denyPublish("toolbus.approve.deploy")

	yes := true
	confirm := func(a bus.Answer) error {
		return ap.client().Parked().Confirm(shortCtx(t), "deploy", "s1", "r1", "c1", a)
	}
	for _, c := range []struct {
		name string
		a    bus.Answer
		want string
	}{
		{"no digest", bus.Answer{Confirmed: &yes}, "needs input_digest"},
		{"another digest", bus.Answer{Confirmed: &yes, InputDigest: bus.InputDigest(json.RawMessage(`{"who":"prod"}`))}, "input changed"},
		{"edited input", bus.Answer{Confirmed: &yes, InputDigest: digest, Input: json.RawMessage(`{"who":"prod"}`)}, "edited input is refused"},
		{"unsuggested rule", bus.Answer{Confirmed: &yes, InputDigest: digest, Rules: []bus.Rule{{Tool: "greet"}}}, "not among"},
		{"unsuggested rule for the tool", bus.Answer{Confirmed: &yes, InputDigest: digest, Rules: []bus.Rule{{Tool: "deploy", Behavior: "deny"}}}, "not among"},
	} {
		err := confirm(c.a)
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, c.want) {
			t.Fatalf("%s: %v, want bad_request %q", c.name, err, c.want)
		}
	}
	// The operator's confirmation on P.answer.<tool>: refused on a
	// secured router, naming the approver's subject.
	err = d.conn("operator").client().Parked().Answer(shortCtx(t), "deploy", "s1", "r1", "c1", bus.Answer{Confirmed: &yes, InputDigest: digest})
	if err == nil || !strings.Contains(err.Error(), "toolbus.approve.deploy") {
		t.Fatalf("a confirmation on toolbus.answer.deploy: %v", err)
	}
	// Nothing changed: still parked, same input.
	must(t, ap.client().Admin(ctx, "parked.list", "s1", nil, &listed))
	if len(listed.Parked) != 1 || listed.Parked[0].InputDigest != digest || string(listed.Parked[0].Input) != `{"who":"staging"}` {
		t.Fatalf("after the refusals: %+v", listed.Parked)
	}

	// The exact input, with its suggested rules: runs, and is remembered.
	var data struct {
		SuggestedRules []bus.Rule `json:"suggested_rules"`
	}
	must(t, req.DataAs(&data))
	must(t, confirm(bus.Answer{Confirmed: &yes, InputDigest: digest, Rules: data.SuggestedRules}))
	done := waitType(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	must(t, done.DataAs(&bd))
	if len(bd.Results) != 1 || bd.Results[0].State != bus.StateSuccess {
		t.Fatalf("after the confirmation: %s", done.Data)
	}
	reply, err = ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy"}}}, client.WithReplyID("r2"))
	must(t, err)
	if len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess {
		t.Fatalf("deploy after remembering %+v: %+v", data.SuggestedRules, reply)
	}

	// An external call is not the approver's to answer, even on its own
	// subject.
	reply, err = ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "pick"}}}, client.WithReplyID("r3"))
	must(t, err)
	if len(reply.Parked) != 1 || reply.Parked[0].Kind != bus.KindExternal {
		t.Fatalf("pick: %+v", reply)
	}
	err = ap.client().Parked().Confirm(shortCtx(t), "pick", "s1", "r3", "c1", bus.Answer{Confirmed: &yes, InputDigest: bus.InputDigest(json.RawMessage(`{}`))})
	if err == nil || !strings.Contains(err.Error(), "toolbus.answer.pick") {
		t.Fatalf("the approver confirmed an external call: %v", err)
	}
	ap.noViolationsBut("toolbus.answer.")
}
