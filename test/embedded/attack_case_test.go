package embedded

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackKeyCase (session 26, red team): a Go tool registered with a
// schema of its own (not schemas.For) that leaves additional properties
// open, whose typed handler decodes the input with the SDK's decoder: the
// router checks "mode" against its enum, and a key differing only in case
// ("MODE") is an additional property it does not check, which the
// decoder (case-insensitive, as encoding/json) put in the same field: the
// tool ran in mode "rm". Register refuses such a key (worker/keycase.go).
func TestAttackKeyCase(t *testing.T) {
	e := startEnv(t, 1, false, router.Config{})
	type modeIn struct {
		Mode string `json:"mode"`
	}
	seen := make(chan string, 8)
	e.startWorker(worker.Config{}, func(w *worker.Worker) {
		if err := worker.Register(w, bus.ToolDef{Name: "cased", Description: "Runs in a mode.", ReadOnly: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"mode":{"type":"string","enum":["safe"]}},"required":["mode"]}`)},
			func(_ context.Context, _ *worker.Call, in modeIn) (string, error) {
				seen <- in.Mode
				return in.Mode, nil
			}); err != nil {
			t.Fatal(err)
		}
	}, "cased")
	for _, in := range []string{`{"mode":"safe","MODE":"rm"}`, `{"mode":"safe","Mode":"rm"}`, `{"mode":"safe","mODE":"rm"}`, `{"mode":"safe"}`} {
		r, err := e.client.Call(t.Context(), "case-s", bus.Batch{Calls: []bus.Call{{ID: "c", Name: "cased", Input: json.RawMessage(in)}}})
		if err != nil {
			t.Fatal(err)
		}
		res := r.Results[0]
		if in == `{"mode":"safe"}` {
			if res.State != bus.StateSuccess || textOf(res) != "safe" {
				t.Fatalf("%s: %+v, want success in mode safe", in, res)
			}
			continue
		}
		if res.State == bus.StateSuccess {
			t.Fatalf("%s: the tool ran in mode %q, outside its schema's enum", in, <-seen)
		}
		if !strings.Contains(textOf(res), "another case") {
			t.Fatalf("%s: refused without saying why: %+v", in, res)
		}
	}
}
