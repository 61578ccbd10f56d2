package security

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestAllowedPaths: on the shipped configuration, every role does its
// work end to end. An agent of session s1 calls a tool through the router
// and watches (live and replayed) its own events; the worker registers
// and answers; the approver confirms a call it read from the handoff
// stream; the handler answers its own parked call; the operator runs
// admin verbs. Nobody hits a permissions violation on the way.
func TestAllowedPaths(t *testing.T) {
	d := newDeployment(t)
	wl := d.startWorker()
	agent := d.conn("session-s1")
	ac := agent.client()
	ctx := testCtx(t)

	ev, err := ac.Watch(ctx, "s1")
	must(t, err)
	defer ev.Stop(t.Context())
	reply, err := ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet", Input: client.Input(map[string]string{"who": "x"})}}}, client.WithReplyID("r1"))
	must(t, err)
	if len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess {
		t.Fatalf("greet: %+v", reply)
	}
	waitType(t, ev, bus.TypeCallProgress)
	waitType(t, ev, bus.TypeBatchDone)
	rp, err := ac.Replay(ctx, "s1")
	must(t, err)
	if e := waitType(t, rp, bus.TypeBatchDone); e.SessionID != "s1" {
		t.Fatalf("replayed %+v", e)
	}
	rp.Stop(t.Context())
	tl, err := ac.Tools(ctx, "s1", "", nil)
	must(t, err)
	if len(tl.Tools) == 0 {
		t.Fatal("no tools listed")
	}

	// A write asks for a confirmation; the approver reads the request from
	// the handoff stream and confirms; the worker runs it.
	reply, err = ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c2", Name: "deploy"}}}, client.WithReplyID("r2"))
	must(t, err)
	if len(reply.Parked) != 1 || reply.Parked[0].Kind != bus.KindConfirm {
		t.Fatalf("deploy did not park for a confirmation: %+v", reply)
	}
	ap := d.conn("approver")
	req := readHandoff(t, ap, "toolbus.confirm.deploy")
	yes := true
	must(t, ap.client().Parked().Confirm(ctx, "deploy", req.SessionID, req.ReplyID, req.ToolCallID, bus.Answer{Confirmed: &yes, InputDigest: digestOf(t, req)}))
	done := waitType(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	must(t, done.DataAs(&bd))
	if done.ReplyID != "r2" || len(bd.Results) != 1 || bd.Results[0].State != bus.StateSuccess {
		t.Fatalf("deploy after the confirmation: %s", done.Data)
	}
	// The approver may list what is parked.
	must(t, ap.client().Admin(ctx, "parked.list", "", struct{}{}, nil))

	// An external call; its handler answers it from its handoff consumer.
	reply, err = ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c3", Name: "pick"}}}, client.WithReplyID("r3"))
	must(t, err)
	if len(reply.Parked) != 1 || reply.Parked[0].Kind != bus.KindExternal {
		t.Fatalf("pick did not park: %+v", reply)
	}
	hl := d.conn("handler-picker")
	req = readHandoff(t, hl, "toolbus.external.pick")
	must(t, hl.client().Parked().Answer(ctx, "pick", req.SessionID, req.ReplyID, req.ToolCallID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("a.txt")}))
	done = waitType(t, ev, bus.TypeBatchDone)
	must(t, done.DataAs(&bd))
	if done.ReplyID != "r3" || len(bd.Results) != 1 || bd.Results[0].State != bus.StateSuccess {
		t.Fatalf("pick after the answer: %s", done.Data)
	}

	// A durable call: the worker takes it from its work consumer and sends
	// the result to the routers on P.result.batchjob.
	reply, err = ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c4", Name: "batchjob"}}}, client.WithReplyID("r4"))
	must(t, err)
	if len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess {
		t.Fatalf("batchjob: %+v", reply)
	}

	// A large output: the worker stores it, the agent fetches it by its
	// reference.
	reply, err = ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c5", Name: "bigread"}}}, client.WithReplyID("r5"))
	must(t, err)
	if len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess {
		t.Fatalf("bigread: %+v", reply)
	}
	var ref string
	for _, bl := range reply.Results[0].Output {
		if bl.URL != "" {
			ref = bl.URL
		}
	}
	if ref == "" {
		t.Fatalf("a 2 MiB output was not stored: %.300v", reply.Results[0])
	}
	big, err := ac.Outputs().FetchBytes(ctx, ref)
	must(t, err)
	if len(big) != 2<<20 {
		t.Fatalf("fetched %d bytes, want %d", len(big), 2<<20)
	}

	// The agent of every session that has no agent user of its own, and
	// the operator.
	all := d.conn("agent")
	if _, err := all.client().Call(ctx, "s9", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet"}}}); err != nil {
		t.Fatal(err)
	}
	op := d.conn("operator")
	var st json.RawMessage
	must(t, op.client().Admin(ctx, "status", "", struct{}{}, &st))
	must(t, op.client().Admin(ctx, "session.mode", "s2", map[string]string{"mode": "explore"}, nil))

	for _, l := range []*login{wl, agent, ap, hl, all, op} {
		l.noViolations()
	}
}

// readHandoff reads the first request on subject (toolbus.<kind>.<tool>)
// from the handoff stream through a router-made consumer, as `toolbus
// watch-handoff` does.
func readHandoff(t *testing.T, l *login, subject string) *bus.Event {
	t.Helper()
	parts := strings.Split(subject, ".")
	if len(parts) != 3 {
		t.Fatalf("handoff subject %q", subject)
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	ev, err := l.client().Parked().Follow(ctx, parts[1], parts[2])
	must(t, err)
	defer ev.Stop(t.Context())
	select {
	case e, ok := <-ev.C:
		if !ok {
			t.Fatalf("no request on %s", subject)
		}
		return e
	case <-ctx.Done():
		t.Fatalf("no request on %s", subject)
	}
	return nil
}

// digestOf is the input_digest of a handoff request.
func digestOf(t *testing.T, req *bus.Event) string {
	t.Helper()
	var d struct {
		InputDigest string `json:"input_digest"`
	}
	must(t, req.DataAs(&d))
	if d.InputDigest == "" {
		t.Fatalf("handoff request without input_digest: %s", req.Data)
	}
	return d.InputDigest
}
