package embedded

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// checkBatchEvents checks the events of one batch on the session's subject:
// an io.toolbus.call.result, carrying the call's result, for each call in
// perCall (docs/protocol.md 3.4: those that asked with "events": "calls",
// finished after the reply or were cancelled) and none for the others, and
// one io.toolbus.batch.done with every result in call order. want is the
// reply's results when there was a reply, or nil.
func checkBatchEvents(t *testing.T, events []*bus.Event, session, replyID string, calls []bus.Call, want []bus.Result, perCallIDs ...string) {
	t.Helper()
	perCall := map[string]int{}
	var done []*bus.Event
	for _, ev := range events {
		if ev.ReplyID != replyID {
			continue
		}
		if ev.SessionID != session {
			t.Errorf("event %s has sessionid %q, want %q", ev.Type, ev.SessionID, session)
		}
		if !strings.HasPrefix(ev.Source, "toolbus/router/") || ev.SpecVersion != bus.SpecVersion || ev.Time == "" ||
			ev.DataContentType != bus.ContentTypeJSON {
			t.Errorf("event %s envelope: source %q specversion %q time %q datacontenttype %q",
				ev.Type, ev.Source, ev.SpecVersion, ev.Time, ev.DataContentType)
		}
		switch ev.Type {
		case bus.TypeCallResult:
			if ev.Subject == "" || ev.Subject != ev.ToolCallID {
				t.Errorf("call.result subject %q toolcallid %q: both must be the call id", ev.Subject, ev.ToolCallID)
			}
			perCall[ev.ToolCallID]++
			var r bus.Result
			if err := json.Unmarshal(ev.Data, &r); err != nil {
				t.Fatalf("call.result data: %v", err)
			}
			if r.ID != ev.ToolCallID {
				t.Errorf("call.result for %s carries the result of %s", ev.ToolCallID, r.ID)
			}
			if want != nil {
				if diff := cmp.Diff(resultOf(t, want, r.ID), r); diff != "" {
					t.Errorf("call.result of %s differs from the reply (-reply +event):\n%s", r.ID, diff)
				}
			}
		case bus.TypeBatchDone:
			done = append(done, ev)
		default:
			t.Errorf("unexpected event %s", ev.Type)
		}
	}
	for _, c := range calls {
		want := 0
		if slices.Contains(perCallIDs, c.ID) {
			want = 1
		}
		if n := perCall[c.ID]; n != want {
			t.Errorf("%d call.result events for %s, want %d", n, c.ID, want)
		}
	}
	if len(done) != 1 {
		t.Fatalf("%d batch.done events, want 1", len(done))
	}
	var bd bus.BatchDone
	if err := json.Unmarshal(done[0].Data, &bd); err != nil {
		t.Fatal(err)
	}
	checkCallOrder(t, calls, bd.Results)
	if want != nil {
		if diff := cmp.Diff(want, bd.Results); diff != "" {
			t.Errorf("batch.done results differ from the reply (-reply +event):\n%s", diff)
		}
	}
	after := false
	for _, ev := range events {
		if ev.ReplyID != replyID {
			continue
		}
		if after {
			t.Errorf("event %s for %s came after the batch.done", ev.Type, ev.ToolCallID)
		}
		after = after || ev.Type == bus.TypeBatchDone
	}
}

// TestEvents: a batch's results are published on the session's events
// subject, whether it was sent as a request or published without a reply
// subject, and kept by the events stream.
func TestEvents(t *testing.T) {
	e := newEnv(t, 1)
	var rec recorder
	addWeather(e, &rec)
	calls := []bus.Call{
		{ID: "c_ok", Name: "get_weather", Input: json.RawMessage(`{"city":"Oslo"}`)},
		{ID: "c_unknown", Name: "nope"},
		{ID: "c_bad", Name: "get_weather", Input: json.RawMessage(`{"city":1}`)},
		{ID: "c_ok2", Name: "get_weather", Input: json.RawMessage(`{"city":"Bergen"}`)},
	}
	// fence sends another batch in the session and waits for its batch.done:
	// everything of the earlier batch has been delivered by then.
	fence := func(t *testing.T, session string, ev *client.Events) []*bus.Event {
		t.Helper()
		fenceID := client.NewReplyID()
		e.call(t, session, []bus.Call{{ID: "f1", Name: "nope"}}, client.WithReplyID(fenceID))
		return collect(t, ev, batchDone(fenceID))
	}

	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.ID
	}
	t.Run("request", func(t *testing.T) {
		const session = "events-1"
		ev := e.watch(t, session)
		replyID := client.NewReplyID()
		const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		reply := e.call(t, session, calls, client.WithReplyID(replyID), client.WithTraceParent(tp))
		events := collect(t, ev, batchDone(replyID))
		events = append(events, fence(t, session, ev)...)
		checkBatchEvents(t, events, session, replyID, calls, reply.Results)
		for _, x := range events {
			if x.ReplyID == replyID && x.TraceParent != tp {
				t.Errorf("%s carries traceparent %q, want the batch's %q", x.Type, x.TraceParent, tp)
			}
		}
	})

	t.Run("events calls", func(t *testing.T) {
		const session = "events-4"
		ev := e.watch(t, session)
		replyID := client.NewReplyID()
		reply := e.batch(t, session, bus.Batch{Calls: calls, Events: bus.EventsCalls}, client.WithReplyID(replyID))
		events := collect(t, ev, batchDone(replyID))
		events = append(events, fence(t, session, ev)...)
		checkBatchEvents(t, events, session, replyID, calls, reply.Results, ids...)
	})

	t.Run("publish without reply", func(t *testing.T) {
		const session = "events-2"
		ev := e.watch(t, session)
		replyID, err := e.client.Publish(session, bus.Batch{Calls: calls})
		if err != nil {
			t.Fatal(err)
		}
		events := collect(t, ev, batchDone(replyID))
		events = append(events, fence(t, session, ev)...)
		checkBatchEvents(t, events, session, replyID, calls, nil)
		var bd bus.BatchDone
		for _, x := range events {
			if x.Type == bus.TypeBatchDone && x.ReplyID == replyID {
				_ = json.Unmarshal(x.Data, &bd)
			}
		}
		wantSuccess(t, bd.Results[0], "weather in Oslo")
		wantFailure(t, bd.Results[1], bus.StateError, bus.CodeUnknownTool, "")
		wantFailure(t, bd.Results[2], bus.StateError, bus.CodeInvalidInput, "")
		wantSuccess(t, bd.Results[3], "weather in Bergen")
	})

	t.Run("kept by the events stream", func(t *testing.T) {
		const session = "events-3"
		replyID := client.NewReplyID()
		reply := e.call(t, session, calls, client.WithReplyID(replyID))
		// Nobody watched while it ran; a late agent replays the stream.
		ctx := testCtx(t)
		rp, err := e.client.Replay(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Stop(t, rp.Stop)
		events := collect(t, rp, batchDone(replyID))
		checkBatchEvents(t, events, session, replyID, calls, reply.Results)
	})
}
