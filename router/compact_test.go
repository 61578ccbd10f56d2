package router

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// TestExecReplyNamesOtherCall (docs/security.md): a worker's result, in
// any form, that names another session, reply or call than the request it
// answers is refused: the call gets internal, the worker's output is
// dropped and its state patch is not applied. A compact result (1.16)
// names none and is the call's by its inbox; a result that names the
// call itself is accepted as before.
func TestExecReplyNamesOtherCall(t *testing.T) {
	call, ref := bus.Call{ID: "c1", Name: "echo"}, callRef{"s1", "r1", "c1"}
	data := json.RawMessage(`{"state":"success","output":[{"type":"text","text":"stolen"}],"state_patch":{"owner":"mallory"}}`)
	msgOf := map[string]func(*bus.Event) *nats.Msg{
		"compact":    func(e *bus.Event) *nats.Msg { return bus.CompactMsg("reply", e) },
		"binary":     func(e *bus.Event) *nats.Msg { return bus.BinaryMsg("reply", e) },
		"structured": func(e *bus.Event) *nats.Msg { m, _ := e.Msg("reply"); return m },
	}
	for _, tc := range []struct {
		name                   string
		session, reply, callID string
		ok                     bool
	}{
		{"names nothing", "", "", "", true},
		{"names its own call", "s1", "r1", "c1", true},
		{"another session", "s2", "", "", false},
		{"another reply", "", "r2", "", false},
		{"another call", "", "", "c2", false},
		{"another call of its own session and reply", "s1", "r1", "c2", false},
	} {
		for form, msg := range msgOf {
			t.Run(tc.name+"/"+form, func(t *testing.T) {
				e, err := bus.NewEvent(bus.TypeExecResult, "toolbus/worker/mallory", data)
				if err != nil {
					t.Fatal(err)
				}
				e.SessionID, e.ReplyID, e.ToolCallID = tc.session, tc.reply, tc.callID
				res, patch, _ := execReply(call, ref, msg(e))
				if tc.ok {
					if res.State != bus.StateSuccess || string(patch) != `{"owner":"mallory"}` {
						t.Fatalf("refused: %+v, patch %s", res, patch)
					}
					return
				}
				if res.Error == nil || res.Error.Code != bus.CodeInternal || !strings.Contains(res.Error.Message, "names another call") ||
					patch != nil || strings.Contains(textOf(res.Output), "stolen") || res.ID != "c1" {
					t.Fatalf("accepted: %+v, patch %s", res, patch)
				}
			})
		}
	}
}
