package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/worker"
)

// seen is what a worker tool observed of one call.
type seen struct {
	ID, Name, SessionID, ReplyID string
	Input, User, Context         json.RawMessage
	Attempt                      int
}

// recorder keeps what a tool saw, by call id.
type recorder struct {
	mu    sync.Mutex
	calls map[string]seen
	runs  atomic.Int64
}

func (r *recorder) record(c *worker.Call) {
	r.runs.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]seen{}
	}
	r.calls[c.SessionID+"/"+c.ID] = seen{ID: c.ID, Name: c.Name, SessionID: c.SessionID, ReplyID: c.ReplyID,
		Input: c.Input, User: c.User, Context: c.Context, Attempt: c.Attempt}
}

func (r *recorder) get(session, id string) (seen, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.calls[session+"/"+id]
	return s, ok
}

// weatherSchema requires a string city.
var weatherSchema = objectSchema(`{"city":{"type":"string"}}`, "city")

// addWeather starts a worker serving get_weather, which records its calls and
// answers "weather in <city>".
func addWeather(e *env, rec *recorder) {
	e.addWorker(func(w *worker.Worker) {
		handle(e.t, w, bus.ToolDef{Name: "get_weather", InputSchema: weatherSchema, ConcurrencySafe: true},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				rec.record(c)
				var in struct{ City string }
				if err := json.Unmarshal(c.Input, &in); err != nil {
					return nil, err
				}
				return textResult("weather in " + in.City), nil
			})
	})
	e.waitLive("get_weather")
}

func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestCallRuntimeContext: user and context reach the worker unchanged, with
// the session, reply and call ids of the batch.
func TestCallRuntimeContext(t *testing.T) {
	e := newEnv(t, 1)
	var rec recorder
	addWeather(e, &rec)

	tests := []struct {
		name          string
		user, context string // JSON; "" means absent
	}{
		{"string user and object context", `"alice"`, `{"tenant": "acme", "z": 1, "a": [true, null, 2.50]}`},
		{"object user", `{"id": "u-1", "roles": ["admin", "ops"]}`, `{"tenant": "acme"}`},
		{"absent", "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			session := fmt.Sprintf("ctx-%d", i)
			b := bus.Batch{Calls: []bus.Call{
				{ID: "call_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Oslo"}`)},
				{ID: "call_2", Name: "get_weather", Input: json.RawMessage(`{"city":"Bergen"}`)},
			}}
			if tt.user != "" {
				b.User = json.RawMessage(tt.user)
			}
			if tt.context != "" {
				b.Context = json.RawMessage(tt.context)
			}
			replyID := client.NewReplyID()
			reply := e.batch(t, session, b, client.WithReplyID(replyID))
			wantSuccess(t, reply.Results[0], "weather in Oslo")
			wantSuccess(t, reply.Results[1], "weather in Bergen")
			if len(reply.Parked) != 0 {
				t.Fatalf("parked: %s", jsonOf(reply.Parked))
			}
			for _, c := range b.Calls {
				got, ok := rec.get(session, c.ID)
				if !ok {
					t.Fatalf("worker never saw %s", c.ID)
				}
				if got.ID != c.ID || got.Name != c.Name || got.SessionID != session || got.ReplyID != replyID || got.Attempt != 1 {
					t.Errorf("worker saw %+v, want call %s/%s of session %s reply %s attempt 1", got, c.ID, c.Name, session, replyID)
				}
				for _, f := range []struct{ what, sent, got string }{
					{"user", tt.user, string(got.User)},
					{"context", tt.context, string(got.Context)},
				} {
					want := ""
					if f.sent != "" {
						want = compactJSON(t, f.sent)
					}
					if f.got != want {
						t.Errorf("%s: worker saw %s, want %s", f.what, f.got, want)
					}
				}
			}
		})
	}
}

// TestCallInputForms: input is an object or a string holding one; anything
// else is an invalid_input result and the tool never runs.
func TestCallInputForms(t *testing.T) {
	e := newEnv(t, 1)
	var rec recorder
	// city is optional, so that an input read as {} would reach the tool.
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "lenient", InputSchema: objectSchema(`{"city":{"type":"string"}}`), ConcurrencySafe: true},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				rec.record(c)
				return textResult("ran with " + string(c.Input)), nil
			})
	})
	e.waitLive("lenient")

	tests := []struct {
		name   string
		input  string
		bug    string // non-empty: known deviation, the case is skipped
		wantOK bool
	}{
		{name: "object", input: `{"city": "Oslo"}`, wantOK: true},
		{name: "string holding an object", input: `"{\"city\": \"Oslo\"}"`, wantOK: true},
		{name: "string holding an array", input: `"[1, 2]"`},
		{name: "string holding a string", input: `"\"Oslo\""`},
		{name: "string holding invalid JSON", input: `"{city: Oslo"`},
		{name: "array", input: `[{"city": "Oslo"}]`},
		{name: "number", input: `42`},
		{name: "boolean", input: `true`},
		{name: "null", input: `null`},
		{name: "empty string", input: `""`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bug != "" {
				knownBug(t, tt.bug)
			}
			session := fmt.Sprintf("input-%d", i)
			runs := rec.runs.Load()
			reply := e.call(t, session, []bus.Call{{ID: "c1", Name: "lenient", Input: json.RawMessage(tt.input)}})
			r := reply.Results[0]
			if tt.wantOK {
				wantSuccess(t, r, `ran with {"city":"Oslo"}`)
				got, _ := rec.get(session, "c1")
				if string(got.Input) != `{"city":"Oslo"}` {
					t.Fatalf("worker saw input %s, want the object {\"city\":\"Oslo\"}", got.Input)
				}
				return
			}
			wantFailure(t, r, bus.StateError, bus.CodeInvalidInput, "")
			wantInvalidInputText(t, r, "lenient")
			if n := rec.runs.Load() - runs; n != 0 {
				t.Fatalf("the tool ran %d times on invalid input", n)
			}
		})
	}
}
