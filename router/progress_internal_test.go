package router

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/replies"
	"github.com/toolbus/toolbus/internal/testkit"
)

// A worker's progress reaches the session's events through the router
// only as the progress of the exec it was sent (protocol 1.18): published
// under the exec's session, reply and call ids and the router's source,
// with the batch's trace; a progress naming another call, out of order, of
// another type or with an invalid block is dropped, as is a flood past the
// burst (the clock stands still), one over bus.MaxProgress bytes (1.19) and
// anything after the call's wait ended; the result still completes the
// call, once the progress sent before it was published. The worker here
// is a script on a real server.
func TestProgressRelay(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	progress := func(seq int, text string, mods ...func(*bus.Event)) *bus.Event {
		e, err := bus.NewEvent(bus.TypeCallProgress, "toolbus/worker/evil", bus.Progress{Seq: seq, Output: bus.Text(text)})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mods {
			m(e)
		}
		return e
	}
	named := func(session, reply, call string) func(*bus.Event) {
		return func(e *bus.Event) { e.SessionID, e.ReplyID, e.ToolCallID = session, reply, call }
	}
	// sized is progress seq whose message body is size bytes: its text,
	// shown in the table as x*<length>, is x's.
	empty, err := progress(1, "").Msg("x")
	if err != nil {
		t.Fatal(err)
	}
	sized := func(seq, size int) *bus.Event { return progress(seq, strings.Repeat("x", size-len(empty.Data))) }
	shown := func(text string) string {
		if len(text) > 16 {
			return fmt.Sprintf("%c*%d", text[0], len(text))
		}
		return text
	}
	atCap := fmt.Sprintf("x*%d", bus.MaxProgress-len(empty.Data))
	for _, tc := range []struct {
		name  string
		sent  []*bus.Event // the worker's progress, in order, before its result
		after []*bus.Event // and after its wait ended
		want  string       // the texts published on P.events.s1, by seq
	}{
		{"in order", []*bus.Event{progress(1, "a"), progress(2, "b", named("s1", "r1", "c1"))}, nil, "1:a 2:b"},
		{"another call named", []*bus.Event{progress(1, "a", named("s2", "", "")), progress(2, "b", named("", "r2", "")),
			progress(3, "c", named("", "", "c2")), progress(4, "d")}, nil, "4:d"},
		{"seq not past the last", []*bus.Event{progress(2, "a"), progress(2, "b"), progress(1, "c"), progress(0, "d"), progress(5, "e")}, nil, "2:a 5:e"},
		{"not progress", []*bus.Event{func() *bus.Event { e := progress(1, "a"); e.Type = bus.TypeExecResult; return e }(), progress(2, "b")}, nil, "2:b"},
		{"invalid block", []*bus.Event{func() *bus.Event {
			e := progress(1, "")
			e.Data = json.RawMessage(`{"seq":1,"output":[{"type":"image","data":"x"}]}`)
			return e
		}(), progress(2, "b")}, nil, "2:b"},
		{"flood", func() (evs []*bus.Event) {
			for i := 1; i <= 100; i++ {
				evs = append(evs, progress(i, fmt.Sprint(i)))
			}
			return evs
		}(), nil, "1:1 2:2 3:3 4:4 5:5 6:6 7:7 8:8"},
		{"after the call", []*bus.Event{progress(1, "a")}, []*bus.Event{progress(2, "late")}, "1:a"},
		{"over the cap", []*bus.Event{sized(1, bus.MaxProgress+1), progress(2, "b")}, nil, "2:b"},
		{"at the cap", []*bus.Event{sized(1, bus.MaxProgress), progress(2, "b")}, nil, "1:" + atCap + " 2:b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testkit.RunServer(t)
			nc, wc, watch := testkit.Connect(t, s), testkit.Connect(t, s), testkit.Connect(t, s)
			subj := bus.NewSubjects("")
			w := &wire{nc: nc, subj: subj, source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler)}
			now := time.Now()
			relay := &progressRelay{wire: w, now: func() time.Time { return now }}
			x := requestReply{replies: replies.New(nc, replies.Options{EndOnClose: true, Unguessable: true, Progress: relay.relay}), execs: &execSubjects{}, subj: subj}
			events, err := watch.SubscribeSync(subj.All("events"))
			if err != nil {
				t.Fatal(err)
			}
			if err := watch.Flush(); err != nil {
				t.Fatal(err)
			}
			send := func(subject string, e *bus.Event) {
				m, err := e.Msg(subject)
				if err != nil {
					t.Fatal(err)
				}
				if err := wc.PublishMsg(m); err != nil {
					t.Fatal(err)
				}
			}
			inbox := make(chan string, 1)
			if _, err := wc.Subscribe(subj.Workers.Exec("t"), func(m *nats.Msg) {
				var req bus.ExecRequest
				if e, err := bus.Decode(m); err != nil || req.FromEvent(e) != nil || !req.ProgressReply {
					t.Errorf("the exec does not say progress_reply: %s", m.Data)
				}
				for _, e := range tc.sent {
					send(m.Reply+bus.ProgressSuffix, e)
				}
				res, _ := bus.NewEvent(bus.TypeExecResult, "toolbus/worker/evil", bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("done")})
				send(m.Reply, res)
				inbox <- m.Reply
			}); err != nil {
				t.Fatal(err)
			}
			if err := wc.Flush(); err != nil {
				t.Fatal(err)
			}
			j := &job{session: "s1", replyID: "r1", trace: [2]string{tp, ""}, call: bus.Call{ID: "c1", Name: "t"}}
			exec := bus.Head(bus.TypeExec, w.source)
			exec.Data = (&bus.ExecRequest{Call: j.call, Attempt: 1, ProgressReply: true}).AppendJSON(nil)
			exec.SessionID, exec.ReplyID, exec.ToolCallID = j.session, j.replyID, j.call.ID
			resp, err := x.request(context.Background(), j, &exec)
			if err != nil {
				t.Fatal(err)
			}
			if res, _, _ := execReply(j.call, callRef{"s1", "r1", "c1"}, resp); res.State != bus.StateSuccess || textOf(res.Output) != "done" {
				t.Fatalf("the result: %+v", res)
			}
			// The progress sent once the call's wait ended, then another
			// exec's, handled after it (one goroutine, in order): that
			// exec's Done returns once its progress was published, before
			// the end marker.
			reply := <-inbox
			for _, e := range tc.after {
				send(reply+bus.ProgressSuffix, e)
			}
			other, err := x.replies.AwaitTagged(&job{session: "s2", replyID: "r2", call: bus.Call{ID: "c2", Name: "t"}})
			if err != nil {
				t.Fatal(err)
			}
			send(other.Inbox()+bus.ProgressSuffix, progress(1, "other's"))
			if err := wc.Publish(other.Inbox(), []byte("other's reply")); err != nil {
				t.Fatal(err)
			}
			if other.Wait(context.Background(), 10*time.Second) == nil {
				t.Fatal("no reply to the other exec")
			}
			x.replies.Done(other, true)
			var got []string
			others := 0
			for _, m := range relayed(t, nc, events, subj) {
				if m.Subject == subj.Events("s2") {
					others++
					continue
				}
				e, err := bus.Decode(m)
				if err != nil {
					t.Fatal(err)
				}
				var p bus.Progress
				if err := e.DataAs(&p); err != nil {
					t.Fatal(err)
				}
				if m.Subject != subj.Events("s1") || e.Type != bus.TypeCallProgress || e.Source != w.source || e.SessionID != "s1" ||
					e.ReplyID != "r1" || e.ToolCallID != "c1" || e.Subject != "c1" || e.TraceParent != tp {
					t.Errorf("published on %s: %+v", m.Subject, e)
				}
				got = append(got, fmt.Sprintf("%d:%s", p.Seq, shown(textOf(p.Output))))
			}
			if others != 1 {
				t.Errorf("the other exec's progress published %d times", others)
			}
			if strings.Join(got, " ") != tc.want {
				t.Fatalf("published %q, want %q", strings.Join(got, " "), tc.want)
			}
		})
	}
}

// relayed publishes an end marker on nc, after what nc published before,
// and returns the events read before it.
func relayed(t *testing.T, nc *nats.Conn, events *nats.Subscription, subj bus.Subjects) (got []*nats.Msg) {
	t.Helper()
	if err := nc.Publish(subj.Events("end"), nil); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := events.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == subj.Events("end") {
			return got
		}
		got = append(got, m)
	}
}

// The progress gate: a burst, then one event every progressEvery, never
// more than the burst saved up.
func TestProgressGate(t *testing.T) {
	var g progressGate
	at := time.Unix(0, 0)
	admitted := func(n int) (k int) {
		for range n {
			if g.admit(at) {
				k++
			}
		}
		return k
	}
	for _, step := range []struct {
		wait time.Duration
		try  int
		want int
	}{
		{0, 20, progressBurst},
		{progressEvery / 2, 5, 0},
		{progressEvery / 2, 5, 1},
		{3 * progressEvery, 5, 3},
		{time.Hour, 20, progressBurst},
	} {
		at = at.Add(step.wait)
		if got := admitted(step.try); got != step.want {
			t.Fatalf("after %v: %d admitted, want %d", step.wait, got, step.want)
		}
	}
}

// The gate of an exec is reset before each attempt while the progress of
// the attempt before may still come (relayed outside the Mux's lock,
// 1.19): the wait's Done waits for the progress in hand, so the reset
// races with nothing (-race), and each attempt publishes the progress its
// worker sent before the result, from seq 1, whatever came after.
func TestProgressGateAcrossAttempts(t *testing.T) {
	s := testkit.RunServer(t)
	nc, wc, watch := testkit.Connect(t, s), testkit.Connect(t, s), testkit.Connect(t, s)
	subj := bus.NewSubjects("")
	w := &wire{nc: nc, subj: subj, source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler)}
	relay := &progressRelay{wire: w, now: time.Now}
	x := requestReply{replies: replies.New(nc, replies.Options{Unguessable: true, Progress: relay.relay}), execs: &execSubjects{}, subj: subj}
	events, err := watch.SubscribeSync(subj.All("events"))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	msg := func(seq int) *nats.Msg {
		e, err := bus.NewEvent(bus.TypeCallProgress, "toolbus/worker/w", bus.Progress{Seq: seq, Output: bus.Text(fmt.Sprint(seq))})
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Msg("")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	res, _ := bus.NewEvent(bus.TypeExecResult, "toolbus/worker/w", bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("done")})
	result, _ := res.Msg("")
	if _, err := wc.Subscribe(subj.Workers.Exec("t"), func(m *nats.Msg) {
		for seq := 1; seq <= 6; seq++ { // 1-3 before the result, 4-6 after
			if seq == 4 {
				_ = wc.Publish(m.Reply, result.Data)
			}
			p := msg(seq)
			p.Subject = m.Reply + bus.ProgressSuffix
			_ = wc.PublishMsg(p)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	j := &job{session: "s1", replyID: "r1", call: bus.Call{ID: "c1", Name: "t"}}
	const attempts = 30
	for range attempts {
		j.progress = progressGate{} // as attempt does
		exec := bus.Head(bus.TypeExec, w.source)
		exec.Data = (&bus.ExecRequest{Call: j.call, Attempt: 1, ProgressReply: true}).AppendJSON(nil)
		if _, err := x.request(context.Background(), j, &exec); err != nil {
			t.Fatal(err)
		}
	}
	firsts := 0
	for _, m := range relayed(t, nc, events, subj) {
		var p bus.Progress
		if e, err := bus.Decode(m); err != nil || e.DataAs(&p) != nil {
			t.Fatalf("published %s", m.Data)
		}
		if p.Seq == 1 {
			firsts++
		}
	}
	if firsts != attempts {
		t.Fatalf("seq 1 published %d times in %d attempts", firsts, attempts)
	}
}
