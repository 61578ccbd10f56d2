package router

import (
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/parked"
)

// TestContinuationListsAsked (docs/protocol.md 3.4, 12; 1.18; session 27's
// closing note): a batch rebuilt from its continuation (resumed after an
// answer, taken over from a dead router) no longer knows the subject it
// came on, yet lists the parks of its later runs as its first run did: "asked" exactly when its reply id is a question's
// (bus.AskPrefix). Before 1.18 a continuation listed every park unasked.
func TestContinuationListsAsked(t *testing.T) {
	const name = "mcp__x__elicit"
	req := &bus.Request{MergeMode: bus.MergeExternalOnly, ExternalTools: []bus.ExternalTool{{Name: name, Description: "x",
		InputSchema: json.RawMessage(`{"type":"object"}`)}}}
	s := parkStep{subj: bus.NewSubjects("")}
	for _, replyID := range []string{bus.AskPrefix + "r1", "r1"} {
		asked := replyID != "r1"
		calls := []bus.Call{{ID: "q1", Name: name, Input: json.RawMessage(`{}`)}, {ID: "q2", Name: name, Input: json.RawMessage(`{}`)}}
		cont := &parked.Batch{Session: "s1", ReplyID: replyID, Data: bus.Batch{Calls: calls, Request: req}, Next: 1,
			Results: map[string]bus.Result{"q1": {ID: "q1", Name: name, State: bus.StateSuccess}}}
		b, err := (&pipeline{}).fromContinuation(cont)
		if err != nil {
			t.Fatal(err)
		}
		later := &parked.Record{Session: "s1", ReplyID: replyID, Call: calls[1], Kind: bus.KindExternal, RequestScoped: true}
		list := s.listed(b, []*parked.Record{later}, 2)
		if len(list) != 1 || list[0].ID != "q2" || list[0].Kind != bus.KindExternal || list[0].Asked != asked {
			t.Errorf("%s: the continuation lists %+v, want q2 parked, asked %v", replyID, list, asked)
		}
	}
}
