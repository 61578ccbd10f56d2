package embedded

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestExecWireContract plays a worker with plain NATS (docs/protocol.md 5.1 and
// 7): it registers and beats with raw io.toolbus.register events, serves
// P.exec.<tool> in the tool's queue group, and checks the io.toolbus.exec
// the router sends; the router turns its io.toolbus.exec.result into the
// call's result.
func TestExecWireContract(t *testing.T) {
	e := newEnv(t, 1)
	subj := e.client.Subjects()
	type got struct {
		msg *nats.Msg
		ev  *bus.Event
	}
	execs := make(chan got, 4)
	answers := map[string]bus.ExecResult{
		"ok":   {State: bus.StateSuccess, Output: bus.Text("fake ok"), Metadata: json.RawMessage(`{"x":1}`)},
		"fail": {State: bus.StateError, Output: bus.Text("fake failure")},
	}
	sub, err := e.nc.QueueSubscribe(subj.Workers.Exec("fake"), subj.Workers.ExecQueue("fake"), func(m *nats.Msg) {
		ev, err := bus.Decode(m)
		if err != nil {
			_ = bus.RespondError(e.nc, m, "test/fake-worker", bus.Errorf(bus.CodeBadEvent, "%v", err))
			return
		}
		execs <- got{m, ev}
		var req bus.ExecRequest
		_ = json.Unmarshal(ev.Data, &req)
		var in struct{ Answer string }
		_ = json.Unmarshal(req.Call.Input, &in)
		out, err := bus.NewEvent(bus.TypeExecResult, "test/fake-worker", answers[in.Answer])
		if err != nil {
			return
		}
		out.SessionID, out.ReplyID, out.ToolCallID = ev.SessionID, ev.ReplyID, req.Call.ID
		_ = bus.Publish(e.nc, m.Reply, out)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	reg := `{"worker":"fake-worker","tools":[{"name":"fake","description":"A tool served by plain NATS.",` +
		`"input_schema":{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]},` +
		`"permission":"allow","timeout_ms":5000}]}`
	checkAck(t, e.register(t, reg), map[string]bool{"fake": true})
	// Beat like a worker until the test ends.
	stop := make(chan struct{})
	var beats sync.WaitGroup
	beats.Add(1)
	go func() {
		defer beats.Done()
		tick := time.NewTicker(testHeartbeat / 2)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				ev, err := bus.NewEvent(bus.TypeRegister, "test/fake-worker", json.RawMessage(reg))
				if err == nil {
					if m, err := ev.Msg(subj.Workers.Register("fake")); err == nil {
						_, _ = e.nc.RequestMsg(m, bound)
					}
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); beats.Wait() })
	e.waitLive("fake")

	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	replyID := client.NewReplyID()
	before := time.Now()
	reply := e.batch(t, "wire", bus.Batch{
		Calls:   []bus.Call{{ID: "call_ok", Name: "fake", Input: json.RawMessage(`"{\"answer\": \"ok\"}"`)}},
		User:    json.RawMessage(`{"name":"dora"}`),
		Context: json.RawMessage(`{"tenant":"acme","flags":[1,2]}`),
	}, client.WithReplyID(replyID), client.WithTraceParent(tp))
	r := reply.Results[0]
	if diff := cmp.Diff(bus.Result{ID: "call_ok", Name: "fake", State: bus.StateSuccess, Output: bus.Text("fake ok"),
		Metadata: json.RawMessage(`{"x":1}`)}, r); diff != "" {
		t.Errorf("result differs (-want +got):\n%s", diff)
	}

	var x got
	select {
	case x = <-execs:
	default:
		t.Fatal("the fake worker never got the exec")
	}
	if ct := x.msg.Header.Get(bus.HeaderContentType); ct != bus.ContentTypeEvent {
		t.Errorf("content-type header %q", ct)
	}
	if h := x.msg.Header.Get(bus.HeaderTraceParent); h != tp {
		t.Errorf("traceparent header %q, want %q", h, tp)
	}
	ev := x.ev
	if ev.Type != bus.TypeExec || ev.SessionID != "wire" || ev.ReplyID != replyID || ev.ToolCallID != "call_ok" || ev.TraceParent != tp {
		t.Errorf("exec attributes: type %s session %q reply %q toolcallid %q traceparent %q", ev.Type, ev.SessionID, ev.ReplyID, ev.ToolCallID, ev.TraceParent)
	}
	exp, err := ev.Expiry()
	if err != nil || exp.Before(before) || exp.After(time.Now().Add(5*time.Second)) {
		t.Errorf("expirytime %q: want a deadline within the tool's 5 s timeout", ev.ExpiryTime)
	}
	var data map[string]json.RawMessage
	if err := json.Unmarshal(ev.Data, &data); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"call":    `{"id":"call_ok","name":"fake","input":{"answer":"ok"}}`,
		"user":    `{"name":"dora"}`,
		"context": `{"tenant":"acme","flags":[1,2]}`,
		"attempt": `1`,
		// 1.18: the router takes the call's progress on the reply subject (5.3).
		"progress_reply": `true`,
	}
	for k, v := range want {
		if string(data[k]) != v {
			t.Errorf("exec data %s = %s, want %s", k, data[k], v)
		}
	}
	for k := range data {
		if _, ok := want[k]; !ok {
			t.Errorf("exec data has %q (state is only for state_injected tools): %s", k, ev.Data)
		}
	}

	t.Run("error result", func(t *testing.T) {
		r := e.call(t, "wire", []bus.Call{{ID: "call_fail", Name: "fake", Input: json.RawMessage(`{"answer":"fail"}`)}}).Results[0]
		wantFailure(t, r, bus.StateError, bus.CodeToolError, "fake failure")
	})
}
