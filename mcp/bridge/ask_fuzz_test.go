package bridge

import (
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/worker"
)

// FuzzElicitAnswer: any answer text either becomes an action (accepted
// content always fits the requested schema) or a reason to ask again;
// never a panic.
func FuzzElicitAnswer(f *testing.F) {
	for _, s := range []string{`{"action":"accept","content":{"name":"Ada"}}`, `{"name":"A"}`, `decline`, `cancel`, `accept`,
		`{"action":"maybe"}`, `[1]`, `null`, `{"action":"accept","content":[1]}`, ``, `{"action":"accept"}`} {
		f.Add(s, true)
		f.Add(s, false)
	}
	schema, err := schemas.Compile(json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","minLength":2}},"required":["name"]}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string, success bool) {
		state := bus.StateSuccess
		if !success {
			state = bus.StateError
		}
		out, why := elicitAnswer(bus.Result{State: state, Output: bus.Text(text)}, schema)
		if (out == nil) == (why == "") {
			t.Fatalf("out %v why %q", out, why)
		}
		if out != nil && out.Action == mcp.ElicitationResponseActionAccept {
			if d := schema.Validate(out.Content); len(d) > 0 {
				t.Fatalf("accepted content %v does not fit: %v", out.Content, d)
			}
		}
	})
}

// TestOrigin: a server's question belongs to the call whose stream it came
// on, else to the calls in flight when they share one session and user;
// calls of two sessions (or users) make it refused.
func TestOrigin(t *testing.T) {
	ctx := t.Context()
	l := &link{s: &Server{Name: "s"}, progress: map[string]*inflight{}}
	if _, err := l.origin(ctx); err == nil {
		t.Fatal("a question with no call in flight was accepted")
	}
	a := &inflight{call: &worker.Call{ID: "a", SessionID: "s1", User: json.RawMessage(`"alice"`)}, ctx: ctx}
	b := &inflight{call: &worker.Call{ID: "b", SessionID: "s1", User: json.RawMessage(`"alice"`)}, ctx: ctx}
	l.progress["1"], l.progress["2"] = a, b
	if o, err := l.origin(ctx); err != nil || o.session != "s1" || len(o.calls) != 2 {
		t.Fatalf("one session: %+v %v", o, err)
	}
	l.progress["3"] = &inflight{call: &worker.Call{ID: "c", SessionID: "s2", User: json.RawMessage(`"alice"`)}, ctx: ctx}
	if _, err := l.origin(ctx); err == nil {
		t.Fatal("calls of two sessions: accepted")
	}
	l.progress["3"] = &inflight{call: &worker.Call{ID: "c", SessionID: "s1", User: json.RawMessage(`"bob"`)}, ctx: ctx}
	if _, err := l.origin(ctx); err == nil {
		t.Fatal("calls of two users: accepted")
	}
	// The stream's call wins over the others.
	rctx, _ := withRequestIDs(ctx, a)
	if o, err := l.origin(rctx); err != nil || len(o.calls) != 1 || o.calls[0] != "a" {
		t.Fatalf("stream's call: %+v %v", o, err)
	}
}
