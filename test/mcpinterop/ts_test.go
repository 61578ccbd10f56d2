package mcpinterop

import (
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestTypeScriptSDK: a host written with the TypeScript SDK (1.32.2,
// js/interop.mjs) connects with StreamableHTTPClientTransport to the URL
// the README gives (2025-11-25, the newest revision it speaks), lists,
// calls, aborts a call (AbortSignal: notifications/cancelled, the bus
// call interrupted) and calls again, answers a confirmation through
// elicitation (allow, then deny), gets tools/list_changed after an
// operator's session.activate, and runs a task-augmented call.
func TestTypeScriptSDK(t *testing.T) {
	path := script(t, "interop.mjs")
	e := newEnv(t)
	s := "ts1"
	e.askMode(t, s)
	p := runNode(t, path, e.url(s), token)

	if st := p.next(t, "connect"); st.Version != "2025-11-25" {
		t.Fatalf("connected at %q", st.Version)
	}
	if st := p.next(t, "list"); !slices.Equal(st.Names, opsTools) {
		l, err := e.bus.Tools(t.Context(), s, "mcp", nil)
		t.Fatalf("tools/list: %v; the bus lists %d (%v)", st.Names, len(l.Tools), err)
	}
	if st := p.next(t, "call"); st.Text != "hello ts" {
		t.Fatalf("hello: %+v", st)
	}
	if st := p.next(t, "structured"); string(st.Structured) != `{"n":3}` || st.Text != `{"n":3}` {
		t.Fatalf("stats: %+v", st)
	}
	p.next(t, "waiting")
	testkit.Recv(t, e.started, bound, "the wait call at the worker")
	p.say(t, "abort")
	if st := p.next(t, "cancel"); !st.Aborted {
		t.Fatalf("abort: %+v", st)
	}
	if why := testkit.Recv(t, e.ended, bound, "the bus call's cancellation at the worker"); why != "context canceled" {
		t.Fatalf("the worker's call ended with %q", why)
	}
	if st := p.next(t, "again"); st.Text != "hello again" {
		t.Fatalf("hello after the abort: %+v", st)
	}
	if st := p.next(t, "allow"); st.IsError || st.Text != "deployed" || len(st.Asked) != 1 || !strings.Contains(st.Asked[0], "deploy") {
		t.Fatalf("deploy allowed by the host's user: %+v", st)
	}
	if st := p.next(t, "deny"); !st.IsError || !strings.Contains(st.Text, "denied") || len(st.Asked) != 1 {
		t.Fatalf("deploy denied by the host's user: %+v", st)
	}
	p.next(t, "listening")
	e.activate(t, s, "site")
	p.say(t, "changed")
	if st := p.next(t, "changed"); !slices.Contains(st.Names, "siteops") {
		t.Fatalf("after session.activate: %v", st.Names)
	}
	if st := p.next(t, "task"); st.Text != "hello task" || !slices.Contains(st.Kinds, "taskCreated") {
		t.Fatalf("task-augmented call: %+v", st)
	}

	// Parked calls: answered on the bus while the host waits with a
	// progress token; without one, answered "still parked" by the facade
	// (QuietHold) and still answerable on the bus afterwards.
	ev, err := e.bus.Watch(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	p.next(t, "parking")
	replyID, parked := parkedEvent(t, ev, "ask_human")
	if err := e.bus.Parked().Answer(t.Context(), "ask_human", s, replyID, parked.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("forty-two")}); err != nil {
		t.Fatal(err)
	}
	if st := p.next(t, "parked"); st.IsError || st.Text != "forty-two" || st.Notices == 0 {
		t.Fatalf("parked call with progress: %+v", st)
	}
	replyID, parked = parkedEvent(t, ev, "ask_human")
	st := p.next(t, "quiet")
	if !st.IsError || !strings.Contains(st.Text, "stays parked") || !strings.Contains(st.Text, parked.ID) {
		t.Fatalf("parked call without progress: %+v", st)
	}
	if err := e.bus.Parked().Answer(t.Context(), "ask_human", s, replyID, parked.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("later")}); err != nil {
		t.Fatalf("the quiet host's call is no longer parked: %v", err)
	}
	p.next(t, "done")
}
