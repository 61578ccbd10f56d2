package embedded

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TestOutputPassThrough: what a tool returns (text and data blocks,
// metadata) reaches the agent unchanged, in the reply and in the events.
func TestOutputPassThrough(t *testing.T) {
	e := newEnv(t, 1)
	outputs := map[string]*bus.ExecResult{
		"text_and_image": {Output: []bus.Block{
			{Type: bus.BlockText, Text: "4°C, rain <cold> & \"wet\"\nsecond line"},
			{Type: bus.BlockData, MediaType: "image/png", Data: "iVBORw0KGgo="},
		}, Metadata: json.RawMessage(`{"source":"met.no","took_ms":12}`)},
		"url_data":   {Output: []bus.Block{{Type: bus.BlockData, MediaType: "application/pdf", URL: "https://example.com/r.pdf"}}},
		"empty_text": {Output: []bus.Block{{Type: bus.BlockText, Text: ""}}},
		// The descriptive members of docs/protocol.md 3.3 pass through too.
		"described": {Output: []bus.Block{
			{Type: bus.BlockText, Text: "notes", URI: "file:///n.txt", MediaType: "text/plain", Annotations: &bus.Annotations{Audience: []string{"user"}}},
			{Type: bus.BlockData, MediaType: "application/pdf", URL: "https://example.com/c.pdf", Size: 5, Name: "c.pdf", Title: "C", Description: "The C report.",
				Annotations: &bus.Annotations{LastModified: "2026-01-02T03:04:05Z"}},
		}},
		"no_output": {},
	}
	e.addWorker(func(w *worker.Worker) {
		for name, out := range outputs {
			handle(t, w, bus.ToolDef{Name: name, ConcurrencySafe: true},
				func(context.Context, *worker.Call) (*bus.ExecResult, error) { return out, nil })
		}
	})
	e.waitLive("text_and_image", "url_data", "empty_text", "described", "no_output")
	for name, out := range outputs {
		t.Run(name, func(t *testing.T) {
			ev := e.watch(t, "out-"+name)
			// "events": "calls": the call.result event must carry the reply's result.
			reply := e.batch(t, "out-"+name, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: name}}, Events: bus.EventsCalls})
			r := reply.Results[0]
			want := bus.Result{ID: "c1", Name: name, State: bus.StateSuccess, Output: out.Output, Metadata: out.Metadata}
			if want.Output == nil {
				want.Output = []bus.Block{}
			}
			if diff := cmp.Diff(want, r); diff != "" {
				t.Errorf("result differs (-tool +reply):\n%s", diff)
			}
			var fromEvent bus.Result
			for _, x := range collect(t, ev, func(x *bus.Event) bool { return x.Type == bus.TypeCallResult }) {
				if x.Type == bus.TypeCallResult {
					if err := json.Unmarshal(x.Data, &fromEvent); err != nil {
						t.Fatal(err)
					}
				}
			}
			if diff := cmp.Diff(r, fromEvent); diff != "" {
				t.Errorf("call.result event differs from the reply (-reply +event):\n%s", diff)
			}
		})
	}
}

func TestInvalidWorkerOutputBlocks(t *testing.T) {
	e := newEnv(t, 1)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "bad_blocks", ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: []bus.Block{{Type: bus.BlockData, MediaType: "image/png", Data: "AA==", URL: "https://x"}}}, nil
		})
		handle(t, w, bus.ToolDef{Name: "bad_annotations", ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: []bus.Block{{Type: bus.BlockText, Text: "x", Annotations: &bus.Annotations{Audience: []string{"model"}}}}}, nil
		})
	})
	e.waitLive("bad_blocks", "bad_annotations")
	r := e.call(t, "ob", []bus.Call{{ID: "c1", Name: "bad_blocks"}}).Results[0]
	wantFailure(t, r, bus.StateError, bus.CodeToolError, "Error: the tool returned an invalid output block 0: a data block has exactly one of data and url")
	r = e.call(t, "ob2", []bus.Call{{ID: "c1", Name: "bad_annotations"}}).Results[0]
	wantFailure(t, r, bus.StateError, bus.CodeToolError, `Error: the tool returned an invalid output block 0: annotations.audience: "model" is not user or assistant`)
	var skills struct {
		Skills []any `json:"skills"`
	}
	if err := e.client.Admin(t.Context(), "skills.list", "", nil, &skills); err != nil || skills.Skills == nil {
		t.Fatalf("skills.list: %v %+v", err, skills)
	}
}
