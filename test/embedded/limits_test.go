package embedded

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
)

// TestLimits: each limit refuses clearly and changes nothing else.
func TestLimits(t *testing.T) {
	e := startEnv(t, 1, false, router.Config{Logger: testLogger(), Limits: router.Limits{MaxCalls: 3, MaxInputBytes: 64, MaxParked: 2}})
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	w := e.addWriteTools(t)
	e.setMode(t, "lim", "bypass")

	t.Run("calls per batch", func(t *testing.T) {
		calls := []bus.Call{{ID: "a", Name: "write"}, {ID: "b", Name: "write"}, {ID: "c", Name: "write"}, {ID: "d", Name: "write"}}
		_, err := e.client.Call(testCtx(t), "lim", bus.Batch{Calls: calls})
		wantCode(t, err, bus.CodeBadRequest)
		if !strings.Contains(err.Error(), "at most 3") {
			t.Fatalf("error %v does not say the limit", err)
		}
		if n := w.runs.Load(); n != 0 {
			t.Fatalf("a refused batch ran %d calls", n)
		}
	})
	t.Run("input size", func(t *testing.T) {
		big := json.RawMessage(`{"q":"` + strings.Repeat("x", 100) + `"}`)
		_, err := e.client.Call(testCtx(t), "lim", bus.Batch{Calls: []bus.Call{{ID: "a", Name: "write"}, {ID: "b", Name: "write", Input: big}}})
		wantCode(t, err, bus.CodeBadRequest)
		if !strings.Contains(err.Error(), "call b") || !strings.Contains(err.Error(), "at most 64") {
			t.Fatalf("error %v does not name the call and the limit", err)
		}
		if n := w.runs.Load(); n != 0 {
			t.Fatalf("a refused batch ran %d calls", n)
		}
	})
	t.Run("parked calls per session", func(t *testing.T) {
		reply := e.callParked(t, "lim", "r1", bus.Call{ID: "p1", Name: "ext"}, bus.Call{ID: "p2", Name: "ext"})
		if len(reply.Parked) != 2 {
			t.Fatalf("parked %+v, want 2", reply.Parked)
		}
		// The third would pass the limit: it ends at once, the rest of its
		// batch runs.
		reply = e.callParked(t, "lim", "r2", bus.Call{ID: "p3", Name: "ext"}, bus.Call{ID: "w1", Name: "write", Input: json.RawMessage(`{"q":"y"}`)})
		if len(reply.Parked) != 0 || len(reply.Results) != 2 {
			t.Fatalf("reply %+v, want two results and nothing parked", reply)
		}
		wantText(t, reply.Results[0], bus.StateError, bus.CodeLimitExceeded,
			"LimitExceededError: The session has 2 calls waiting for an answer; at most 2 may wait at once. Answer or cancel some first.")
		if reply.Results[1].State != bus.StateSuccess {
			t.Fatalf("the batch did not go on: %+v", reply.Results[1])
		}
		// Another session is not limited by this one.
		if reply := e.callParked(t, "lim2", "r1", bus.Call{ID: "p1", Name: "ext"}); len(reply.Parked) != 1 {
			t.Fatalf("another session: %+v", reply)
		}
	})
}
