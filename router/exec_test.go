package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/replies"
	"github.com/toolbus/toolbus/internal/testkit"
)

// The exec subject of a tool is the one bus builds, kept: no allocation
// per call once known, and the cache starts again past its bound.
func TestExecSubjects(t *testing.T) {
	w := bus.NewSubjects("p").Workers
	var x execSubjects
	for _, tool := range []string{"echo", "echo", "other"} {
		if got := x.of(w, tool); got != w.Exec(tool) {
			t.Fatalf("%s: %s, want %s", tool, got, w.Exec(tool))
		}
	}
	if got := (*execSubjects)(nil).of(w, "echo"); got != w.Exec("echo") {
		t.Fatalf("nil cache: %s", got)
	}
	if n := testing.AllocsPerRun(100, func() { x.of(w, "echo") }); n != 0 {
		t.Fatalf("%.1f allocations per known subject", n)
	}
	for i := range maxExecSubjects + 1 {
		x.of(w, fmt.Sprintf("t%d", i))
	}
	if len(x.m) > maxExecSubjects {
		t.Fatalf("%d subjects kept", len(x.m))
	}
}

// The watches in flight are a list: each removal, at the head, in the
// middle or at the end, leaves exactly the others, and a watch may be
// added again once removed (a call's next attempt).
func TestExecWatchesList(t *testing.T) {
	var x execWatches
	var ws [4]execWatch
	list := func() (keys string) {
		for w := x.head; w != nil; w = w.next {
			keys += w.call.id
		}
		return keys
	}
	for i := range ws {
		x.add(&ws[i], "t", callRef{"s", "r", fmt.Sprint(i)}, cancelFunc(func() {}))
	}
	for _, step := range []struct {
		remove int
		want   string
	}{{3, "210"}, {1, "20"}, {0, "2"}, {2, ""}} {
		x.remove(&ws[step.remove])
		if got := list(); got != step.want {
			t.Fatalf("after removing %d: %q, want %q", step.remove, got, step.want)
		}
	}
	x.add(&ws[1], "t", callRef{"s", "r", "1"}, cancelFunc(func() {}))
	x.add(&ws[2], "t", callRef{"s", "r", "2"}, cancelFunc(func() {}))
	x.remove(&ws[2])
	if got := list(); got != "1" {
		t.Fatalf("added again: %q", got)
	}
}

// An exec request's outcomes on a real server, as nats.go's request gave
// them: the reply; ErrNoResponders when no worker subscribes; the
// context's error when the worker is silent, whose late reply then
// reaches no other request; ErrConnectionClosed once the connection
// closes.
func TestExecRequest(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	wc := testkit.Connect(t, s)
	x := requestReply{replies: replies.New(nc, replies.Options{EndOnClose: true, Unguessable: true}), execs: &execSubjects{}, subj: bus.NewSubjects("")}
	event := func(id string) *bus.Event {
		e, err := bus.NewEvent(bus.TypeExec, "toolbus/router/r1", json.RawMessage(`{"n":"`+id+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	call := func(tool string) *job { return &job{call: bus.Call{Name: tool}} }
	if _, err := x.request(t.Context(), call("nobody"), event("1")); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no worker: %v", err)
	}
	late := make(chan *nats.Msg, 1)
	if _, err := wc.Subscribe(x.subj.Workers.Exec("echo"), func(m *nats.Msg) {
		if strings.Contains(string(m.Data), `"n":"slow"`) {
			late <- m // answered after its request ended
			return
		}
		_ = m.Respond(m.Data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := x.request(t.Context(), call("echo"), event("2")); err != nil || !strings.Contains(string(m.Data), `"n":"2"`) {
		t.Fatalf("reply: %v, %v", m, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := x.request(ctx, call("echo"), event("slow")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent worker: %v", err)
	}
	slow := <-late
	if err := slow.Respond([]byte(`{"n":"slow"}`)); err != nil {
		t.Fatal(err)
	}
	for i := range 20 { // the late reply is on its way while these wait
		id := fmt.Sprint("next", i)
		if m, err := x.request(t.Context(), call("echo"), event(id)); err != nil || !strings.Contains(string(m.Data), `"n":"`+id+`"`) {
			t.Fatalf("request %s got %v, %v", id, m, err)
		}
	}
	nc.Close()
	if _, err := x.request(t.Context(), call("echo"), event("3")); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("closed: %v", err)
	}
}

// The watchdog skips the round after one that came more than two
// heartbeats late (the router was held: beats that came meanwhile are not
// read yet), and watches again a heartbeat later.
func TestWatchdogStalled(t *testing.T) {
	const hb = 500 * time.Millisecond
	t0 := time.Unix(1_000_000, 0)
	var x execWatches
	for i, tc := range []struct {
		at      time.Duration // since t0
		stalled bool
	}{
		{0, false},                      // the first round
		{hb, false},                     // on time
		{2 * hb, false},                 // on time
		{4*hb + time.Millisecond, true}, // two heartbeats and more since the last: held
		{5 * hb, false},                 // the round after: beats read, watched again
		{7 * hb, false},                 // exactly two heartbeats: not held
	} {
		if got := x.stalled(t0.Add(tc.at), hb); got != tc.stalled {
			t.Fatalf("round %d at %v: stalled %v, want %v", i, tc.at, got, tc.stalled)
		}
	}
}
