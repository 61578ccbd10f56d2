package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TestMalformedBatch: every malformed io.toolbus.call.batch with a reply
// subject is answered with an io.toolbus.error of the code docs/protocol.md
// section 1 gives, runs nothing, and leaves the router serving.
func TestMalformedBatch(t *testing.T) {
	e := newEnv(t, 1)
	var runs atomic.Int64
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "count"},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				runs.Add(1)
				return textResult("counted"), nil
			})
		pingTool(t, w, "ping")
	})
	e.waitLive("count", "ping")

	const session = "bad"
	subject := e.client.Subjects().Call(session)
	calls := func(ids ...string) []bus.Call {
		out := make([]bus.Call, len(ids))
		for i, id := range ids {
			out[i] = bus.Call{ID: id, Name: "count", Input: json.RawMessage(`{}`)}
		}
		return out
	}
	many := func(n int) []bus.Call {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("c%d", i)
		}
		return calls(ids...)
	}
	// batchMsg builds a well-formed batch event, then lets edit break it.
	batchMsg := func(t *testing.T, b bus.Batch, edit func(*bus.Event)) *nats.Msg {
		ev := newEvent(t, bus.TypeCallBatch, b)
		ev.SessionID = session
		if edit != nil {
			edit(ev)
		}
		return eventMsg(t, subject, ev)
	}
	// jsonMsg sends an event written by hand.
	jsonMsg := func(s string) func(*testing.T) *nats.Msg {
		return func(*testing.T) *nats.Msg { return rawMsg(subject, []byte(s)) }
	}
	good := bus.Batch{Calls: calls("c1")}

	tests := []struct {
		name string
		msg  func(t *testing.T) *nats.Msg
		code string
	}{
		{"not JSON", jsonMsg(`this is not json`), bus.CodeBadEvent},
		{"truncated JSON", jsonMsg(`{"specversion":"1.0","id":"r1"`), bus.CodeBadEvent},
		{"JSON array", jsonMsg(`[1,2,3]`), bus.CodeBadEvent},
		{"JSON but not a CloudEvent", jsonMsg(`{"calls":[{"id":"c1","name":"count"}]}`), bus.CodeBadEvent},
		{"empty body", jsonMsg(``), bus.CodeBadEvent},
		{"specversion 0.3", func(t *testing.T) *nats.Msg {
			return batchMsg(t, good, func(ev *bus.Event) { ev.SpecVersion = "0.3" })
		}, bus.CodeBadEvent},
		{"no source", func(t *testing.T) *nats.Msg {
			return batchMsg(t, good, func(ev *bus.Event) { ev.Source = "" })
		}, bus.CodeBadEvent},
		{"wrong type for the subject", func(t *testing.T) *nats.Msg {
			return batchMsg(t, good, func(ev *bus.Event) { ev.Type = bus.TypeToolsQuery })
		}, bus.CodeBadEvent},
		{"sessionid differs from the subject", func(t *testing.T) *nats.Msg {
			return batchMsg(t, good, func(ev *bus.Event) { ev.SessionID = "other" })
		}, bus.CodeBadEvent},
		{"sessionid not an identifier", func(t *testing.T) *nats.Msg {
			return batchMsg(t, good, func(ev *bus.Event) { ev.SessionID = "bad session" })
		}, bus.CodeBadEvent},
		{"subject session token has two tokens", func(t *testing.T) *nats.Msg {
			m := batchMsg(t, good, func(ev *bus.Event) { ev.SessionID = "" })
			m.Subject = subject + ".extra"
			return m
		}, bus.CodeBadEvent},
		{"reply id with a dot", func(t *testing.T) *nats.Msg {
			return batchMsg(t, good, func(ev *bus.Event) { ev.ID = "r.1" })
		}, bus.CodeBadEvent},
		{"reply id of 129 characters", func(t *testing.T) *nats.Msg {
			return batchMsg(t, good, func(ev *bus.Event) { ev.ID = strings.Repeat("r", 129) })
		}, bus.CodeBadEvent},
		{"expirytime not RFC 3339", func(t *testing.T) *nats.Msg {
			return batchMsg(t, good, func(ev *bus.Event) { ev.ExpiryTime = "tomorrow" })
		}, bus.CodeBadEvent},
		{"call id with a dot", func(t *testing.T) *nats.Msg {
			return batchMsg(t, bus.Batch{Calls: calls("c1", "c.2")}, nil)
		}, bus.CodeBadEvent},
		{"empty call id", func(t *testing.T) *nats.Msg {
			return batchMsg(t, bus.Batch{Calls: calls("c1", "")}, nil)
		}, bus.CodeBadEvent},
		{"call id with a space", func(t *testing.T) *nats.Msg {
			return batchMsg(t, bus.Batch{Calls: calls("c 1")}, nil)
		}, bus.CodeBadEvent},
		{"no calls", func(t *testing.T) *nats.Msg {
			return batchMsg(t, bus.Batch{Calls: []bus.Call{}}, nil)
		}, bus.CodeBadRequest},
		{"calls absent", func(t *testing.T) *nats.Msg {
			return batchMsg(t, bus.Batch{}, nil)
		}, bus.CodeBadRequest},
		{"65 calls", func(t *testing.T) *nats.Msg {
			return batchMsg(t, bus.Batch{Calls: many(65)}, nil)
		}, bus.CodeBadRequest},
		{"duplicate call ids", func(t *testing.T) *nats.Msg {
			return batchMsg(t, bus.Batch{Calls: calls("c1", "c2", "c1")}, nil)
		}, bus.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErrorEvent(t, e.request(t, tt.msg(t)), tt.code)
		})
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("rejected batches ran the tool %d times", n)
	}

	t.Run("64 calls are accepted", func(t *testing.T) {
		reply := e.call(t, "bad-64", many(64))
		for _, r := range reply.Results {
			wantSuccess(t, r, "counted")
		}
	})
	t.Run("router still serves", func(t *testing.T) {
		wantSuccess(t, e.call(t, session, []bus.Call{{ID: "c1", Name: "ping"}}).Results[0], "pong")
	})
}

// TestBinaryModeBatch: a batch whose attributes are ce- headers (names in any
// case, values percent-encoded) and whose body is the data is accepted.
func TestBinaryModeBatch(t *testing.T) {
	e := newEnv(t, 1)
	var rec recorder
	addWeather(e, &rec)

	tests := []struct {
		name   string
		header func(id string) nats.Header
	}{
		{"lower-case headers", func(id string) nats.Header {
			return nats.Header{
				"ce-specversion": {"1.0"}, "ce-id": {id}, "ce-source": {"test%2Fbinary%20agent"},
				"ce-type": {bus.TypeCallBatch}, "ce-time": {time.Now().UTC().Format(time.RFC3339Nano)},
				"ce-sessionid": {"bin-0"}, "content-type": {bus.ContentTypeJSON},
			}
		}},
		{"mixed-case headers", func(id string) nats.Header {
			return nats.Header{
				"Ce-Specversion": {"1.0"}, "CE-ID": {id}, "Ce-Source": {"test/binary"},
				"ce-Type": {bus.TypeCallBatch}, "Ce-SessionId": {"bin-1"}, "Content-Type": {bus.ContentTypeJSON},
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			session := fmt.Sprintf("bin-%d", i)
			id := fmt.Sprintf("reply-bin-%d", i)
			data, _ := json.Marshal(bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "get_weather", Input: json.RawMessage(`{"city":"Oslo"}`)}},
				User: json.RawMessage(`"bob"`)})
			m := &nats.Msg{Subject: e.client.Subjects().Call(session), Header: tt.header(id), Data: data}
			ev := e.request(t, m)
			if ev.Type != bus.TypeCallReply {
				t.Fatalf("reply type %s: %s", ev.Type, ev.Data)
			}
			var reply bus.Reply
			if err := json.Unmarshal(ev.Data, &reply); err != nil {
				t.Fatal(err)
			}
			checkCallOrder(t, []bus.Call{{ID: "c1", Name: "get_weather"}}, reply.Results)
			wantSuccess(t, reply.Results[0], "weather in Oslo")
			got, ok := rec.get(session, "c1")
			if !ok || got.ReplyID != id || string(got.User) != `"bob"` {
				t.Fatalf("worker saw %+v, want reply id %s and user \"bob\"", got, id)
			}
		})
	}
}

// TestMalformedOtherSubjects: the other router subjects answer malformed
// requests with io.toolbus.error too, and garbage published where nobody
// replies (cancel) changes nothing.
func TestMalformedOtherSubjects(t *testing.T) {
	e := newEnv(t, 1)
	e.addWorker(func(w *worker.Worker) { pingTool(t, w, "ping") })
	e.waitLive("ping")
	subj := e.client.Subjects()
	event := func(typ, subject, session string, data any) func(t *testing.T) *nats.Msg {
		return func(t *testing.T) *nats.Msg {
			ev := newEvent(t, typ, data)
			ev.SessionID = session
			return eventMsg(t, subject, ev)
		}
	}
	tests := []struct {
		name string
		msg  func(t *testing.T) *nats.Msg
		code string
	}{
		{"tools: not JSON", func(*testing.T) *nats.Msg { return rawMsg(subj.Tools("q1"), []byte("nope")) }, bus.CodeBadEvent},
		{"tools: wrong type", event(bus.TypeCallBatch, subj.Tools("q1"), "q1", bus.ToolsQuery{}), bus.CodeBadEvent},
		{"tools: sessionid differs", event(bus.TypeToolsQuery, subj.Tools("q1"), "q2", bus.ToolsQuery{}), bus.CodeBadEvent},
		{"tools: unknown format", event(bus.TypeToolsQuery, subj.Tools("q1"), "q1", bus.ToolsQuery{Format: "xml"}), bus.CodeBadRequest},
		{"register: not JSON", func(*testing.T) *nats.Msg { return rawMsg(subj.Workers.SharedRegister(), []byte("{{")) }, bus.CodeBadEvent},
		{"register: wrong type", event(bus.TypeToolsQuery, subj.Workers.SharedRegister(), "", bus.Register{Worker: "w1"}), bus.CodeBadEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErrorEvent(t, e.request(t, tt.msg(t)), tt.code)
		})
	}
	t.Run("cancel: garbage is ignored", func(t *testing.T) {
		for _, data := range []string{"garbage", `{"specversion":"1.0"}`, `[]`} {
			if err := e.nc.PublishMsg(rawMsg(subj.Cancel("q1"), []byte(data))); err != nil {
				t.Fatal(err)
			}
		}
		ev := newEvent(t, bus.TypeCallCancel, json.RawMessage(`{"calls":"not a list"}`))
		ev.SessionID, ev.ReplyID = "q1", "r1"
		if err := e.nc.PublishMsg(eventMsg(t, subj.Cancel("q1"), ev)); err != nil {
			t.Fatal(err)
		}
		wantSuccess(t, e.call(t, "q1", []bus.Call{{ID: "c1", Name: "ping"}}).Results[0], "pong")
	})
}
