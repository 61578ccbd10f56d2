package tasks_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/tasks"
)

// eventsStream is a session events stream keeping its last max events
// (discard old, as P_EVENTS at its byte bound), and a publish of one
// event on it: the progress of reply/call, or another session's.
func eventsStream(t *testing.T, max int64) (jetstream.JetStream, func(subject, reply, call, text string)) {
	t.Helper()
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"},
		MaxMsgs: max, Discard: jetstream.DiscardOld}); err != nil {
		t.Fatal(err)
	}
	return js, func(subject, reply, call, text string) {
		t.Helper()
		e, err := bus.NewEvent(bus.TypeCallProgress, "test", bus.Progress{Output: bus.Text(text)})
		if err != nil {
			t.Fatal(err)
		}
		e.ReplyID, e.ToolCallID = reply, call
		m, err := e.Msg(subject)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func texts(out []bus.Block) (s []string) {
	for _, b := range out {
		s = append(s, b.Text)
	}
	return s
}

// TestOutputLostToTheBound (session 34, red team on 5.10): another
// session's flood pushes a task's early progress out of the events stream:
// the output says truncated, on a first read and on one that goes on from
// a cursor; a read with nothing lost does not.
func TestOutputLostToTheBound(t *testing.T) {
	js, publish := eventsStream(t, 8)
	r := rec("s1", "t1", "", time.Now().Add(time.Hour))
	r.Started = time.Now().Add(-time.Second) // the clocks' second: the stream's first event is after it
	publish("ev.s1", r.ReplyID, r.CallID, "p1")
	var cur tasks.Cursor
	out, truncated, err := tasks.Output(t.Context(), js, "EV", "ev.s1", r, 1<<20, &cur)
	if err != nil || truncated || fmt.Sprint(texts(out)) != "[p1]" {
		t.Fatalf("nothing lost: %q truncated %v, %v", texts(out), truncated, err)
	}
	publish("ev.s1", r.ReplyID, r.CallID, "p2")
	for i := range 10 { // the flood: p1 and p2 are gone
		publish("ev.s2", "other", "c", fmt.Sprint("flood", i))
	}
	publish("ev.s1", r.ReplyID, r.CallID, "p3")
	out, truncated, err = tasks.Output(t.Context(), js, "EV", "ev.s1", r, 1<<20, nil)
	if err != nil || !truncated || fmt.Sprint(texts(out)) != "[p3]" {
		t.Fatalf("a first read: %q truncated %v, %v", texts(out), truncated, err)
	}
	out, truncated, err = tasks.Output(t.Context(), js, "EV", "ev.s1", r, 1<<20, &cur)
	if err != nil || !truncated || fmt.Sprint(texts(out)) != "[p1 p3]" {
		t.Fatalf("from the cursor: %q truncated %v, %v", texts(out), truncated, err)
	}
}

// TestCursorOfAnotherRecord (session 34, red team): a task made again under
// an id after its record expired is not served the old task's output from
// the cursor of a read of the old one.
func TestCursorOfAnotherRecord(t *testing.T) {
	js, publish := eventsStream(t, 100)
	old := rec("s1", "t1", "", time.Now().Add(time.Hour))
	old.Started = time.Now().Add(-time.Minute)
	publish("ev.s1", old.ReplyID, old.CallID, "old secret")
	var cur tasks.Cursor
	if out, _, err := tasks.Output(t.Context(), js, "EV", "ev.s1", old, 1<<20, &cur); err != nil || len(out) != 1 {
		t.Fatalf("%q, %v", texts(out), err)
	}
	again := rec("s1", "t1", "", time.Now().Add(time.Hour)) // same session and id
	again.ReplyID, again.CallID = "r2", "c2"
	publish("ev.s1", again.ReplyID, again.CallID, "new")
	out, _, err := tasks.Output(t.Context(), js, "EV", "ev.s1", again, 1<<20, &cur)
	if err != nil || fmt.Sprint(texts(out)) != "[new]" {
		t.Fatalf("the new task's output: %q, %v", texts(out), err)
	}
}
