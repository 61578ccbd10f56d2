package bridge

import (
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
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
