package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/worker"
)

// gauge reads a gauge of reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// gate is a tool body that records how many calls run at once and holds
// each call until it is released (or its context ends).
type gate struct {
	cur, max atomic.Int32
	entered  chan string
	release  chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan string, 64), release: make(chan struct{})} }

func (g *gate) handler(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
	n := g.cur.Add(1)
	defer g.cur.Add(-1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			break
		}
	}
	g.entered <- c.ID
	select {
	case <-g.release:
		return textOut("done " + c.ID), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestMaxConcurrentSerialises(t *testing.T) {
	f := newFixture(t, true)
	reg := prometheus.NewRegistry()
	g := newGate()
	f.startWorker(worker.Config{MaxConcurrent: 1, Observer: metrics.NewWorker(reg, 1)}, func(w *worker.Worker) {
		raw(t, w, "a", g.handler)
		raw(t, w, "b", g.handler)
	})
	// The limit is across tools: a call of b waits for the call of a, and a
	// second call of a waits too.
	a1 := f.send(t, execEvent(t, "a", "a1", `{}`), "a")
	if id := testkit.Recv(t, g.entered, bound, "a1 running"); id != "a1" {
		t.Fatalf("entered %s", id)
	}
	b1 := f.send(t, execEvent(t, "b", "b1", `{}`), "b")
	a2 := f.send(t, execEvent(t, "a", "a2", `{}`), "a")
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if n := gauge(t, reg, "toolbus_worker_waiting"); n != 2 {
			return fmt.Errorf("%v requests waiting for a slot, want 2", n)
		}
		return nil
	})
	select {
	case id := <-g.entered:
		t.Fatalf("%s started while a1 held the only slot", id)
	default:
	}
	if g.cur.Load() != 1 {
		t.Fatalf("%d calls running", g.cur.Load())
	}
	for i := range 3 {
		g.release <- struct{}{}
		if i < 2 {
			testkit.Recv(t, g.entered, bound, "next call running")
		}
	}
	for _, p := range []*pending{a1, b1, a2} {
		if res := p.wait(); res.State != bus.StateSuccess {
			t.Fatalf("result %s", jsonOf(res))
		}
	}
	if g.max.Load() != 1 {
		t.Fatalf("max concurrency %d, want 1", g.max.Load())
	}
}

func TestMaxConcurrentAllowsParallel(t *testing.T) {
	f := newFixture(t, true)
	g := newGate()
	f.startWorker(worker.Config{MaxConcurrent: 3}, func(w *worker.Worker) { raw(t, w, "a", g.handler) })
	var ps []*pending
	for i := range 3 {
		ps = append(ps, f.send(t, execEvent(t, "a", fmt.Sprint("c", i), `{}`), "a"))
	}
	for range 3 {
		testkit.Recv(t, g.entered, bound, "call running")
	}
	if g.cur.Load() != 3 {
		t.Fatalf("%d calls running, want 3", g.cur.Load())
	}
	close(g.release)
	for _, p := range ps {
		if res := p.wait(); res.State != bus.StateSuccess {
			t.Fatalf("result %s", jsonOf(res))
		}
	}
}

// cancel publishes io.toolbus.call.cancel for reply in session and
// returns its event id.
func (f *fixture) cancel(t *testing.T, session, reply string, calls ...string) string {
	t.Helper()
	ev, err := bus.NewEvent(bus.TypeCallCancel, "test/agent", bus.Cancel{Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	ev.SessionID, ev.ReplyID = session, reply
	if err := bus.Publish(f.nc, f.subj.Cancel(session), ev); err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ev.ID
}

func TestCancel(t *testing.T) {
	type inflight struct{ session, reply, call string }
	all := []inflight{{"s1", "r1", "c1"}, {"s1", "r1", "c2"}, {"s1", "r2", "c1"}, {"s2", "r1", "c1"}}
	for _, tc := range []struct {
		name      string
		calls     []string // data of the cancel; nil means every call of the reply
		cancelled []int    // indexes into all
	}{
		{"named call only", []string{"c1"}, []int{0}},
		{"every call of the reply", nil, []int{0, 1}},
		{"unknown call", []string{"c9"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			var mu sync.Mutex
			ctxs := map[string]context.Context{}
			entered := make(chan string, len(all))
			release := make(chan struct{})
			f.startWorker(worker.Config{}, func(w *worker.Worker) {
				raw(t, w, "slow", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
					key := c.SessionID + "/" + c.ReplyID + "/" + c.ID
					mu.Lock()
					ctxs[key] = ctx
					mu.Unlock()
					entered <- key
					select {
					case <-ctx.Done():
						// What the tool returns does not matter: the call was interrupted.
						return textOut("stopped early"), nil
					case <-release:
						return textOut("finished"), nil
					}
				})
			})
			var ps []*pending
			for _, c := range all {
				ps = append(ps, f.send(t, execEvent(t, "slow", c.call, `{}`, inSession(c.session, c.reply)), "slow"))
			}
			for range all {
				testkit.Recv(t, entered, bound, "calls running")
			}
			id := f.cancel(t, "s1", "r1", tc.calls...)
			for _, i := range tc.cancelled {
				res := ps[i].wait()
				wantText(t, res, bus.StateInterrupted, bus.InterruptedText)
				// The result names the cancel, for the router to hold the
				// batch's next run until it has handled it too (1.30).
				if res.Cancel != id {
					t.Errorf("call %v's result names cancel %q, want %q", all[i], res.Cancel, id)
				}
			}
			// Every cancelled call has answered, so the cancel was handled:
			// the other calls still run with a live context.
			mu.Lock()
			for i, c := range all {
				ctx := ctxs[c.session+"/"+c.reply+"/"+c.call]
				want := slicesContains(tc.cancelled, i)
				if (ctx.Err() != nil) != want {
					t.Errorf("call %v: ctx.Err() = %v, cancelled want %v", c, ctx.Err(), want)
				}
			}
			mu.Unlock()
			close(release)
			for i, p := range ps {
				if slicesContains(tc.cancelled, i) {
					continue
				}
				wantText(t, p.wait(), bus.StateSuccess, "finished")
			}
		})
	}
}

// TestCancelRememberedNamed: a call whose cancel came before its exec
// request never starts, and its interrupted result names that cancel
// (1.30), for the router to hold the batch's next run until it has handled
// it too; a cancel of the whole reply counts the same. Before, it named
// none.
func TestCancelRememberedNamed(t *testing.T) {
	f := newFixture(t, true)
	g := newGate()
	f.startWorker(worker.Config{}, func(w *worker.Worker) { raw(t, w, "slow", g.handler) })
	running := f.send(t, execEvent(t, "slow", "c0", `{}`, inSession("s1", "r0")), "slow")
	testkit.Recv(t, g.entered, bound, "call running")
	named := f.cancel(t, "s1", "r1", "c1")
	whole := f.cancel(t, "s1", "r2")
	// The worker reads cancels in order: once the running call is
	// interrupted, it has remembered the two before.
	f.cancel(t, "s1", "r0", "c0")
	wantText(t, running.wait(), bus.StateInterrupted, bus.InterruptedText)
	for reply, id := range map[string]string{"r1": named, "r2": whole} {
		res := f.send(t, execEvent(t, "slow", "c1", `{}`, inSession("s1", reply)), "slow").wait()
		wantText(t, res, bus.StateInterrupted, bus.InterruptedText)
		if res.Cancel != id {
			t.Errorf("reply %s: the result names cancel %q, want %q", reply, res.Cancel, id)
		}
	}
	select {
	case c := <-g.entered:
		t.Fatalf("call %s started after its cancel", c)
	default:
	}
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestCancelIgnoresMalformed(t *testing.T) {
	f := newFixture(t, true)
	g := newGate()
	f.startWorker(worker.Config{}, func(w *worker.Worker) { raw(t, w, "slow", g.handler) })
	p := f.send(t, execEvent(t, "slow", "c1", `{}`), "slow")
	testkit.Recv(t, g.entered, bound, "call running")
	// Not a cancel, no reply id, not JSON, session id from another subject:
	// none of them cancels anything.
	wrongType, _ := bus.NewEvent(bus.TypeCallBatch, "test/agent", nil)
	wrongType.SessionID, wrongType.ReplyID = "s1", "r1"
	noReply, _ := bus.NewEvent(bus.TypeCallCancel, "test/agent", nil)
	noReply.SessionID = "s1"
	for _, m := range []*nats.Msg{
		eventMsg(t, f.subj.Cancel("s1"), wrongType),
		eventMsg(t, f.subj.Cancel("s1"), noReply),
		{Subject: f.subj.Cancel("s1"), Data: []byte("cancel everything")},
		{Subject: f.subj.Cancel("s1") + ".extra", Data: []byte("{}")},
	} {
		if err := f.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// A valid cancel sent after them proves they were all handled first.
	f.cancel(t, "s1", "r1", "c1")
	wantText(t, p.wait(), bus.StateInterrupted, bus.InterruptedText)
}

func TestExpiryTimeSetsDeadline(t *testing.T) {
	f := newFixture(t, true)
	type seen struct {
		deadline time.Time
		ok       bool
		err      error
	}
	got := make(chan seen, 1)
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "deadline", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			d, ok := ctx.Deadline()
			got <- seen{d, ok, ctx.Err()}
			return nil, ctx.Err()
		})
	})
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	for _, tc := range []struct {
		name   string
		expiry string
		want   time.Time
		state  string
	}{
		{"none", "", time.Time{}, bus.StateSuccess},
		{"future", future.Format(time.RFC3339Nano), future, bus.StateSuccess},
		{"past", "2001-01-01T00:00:00Z", time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), bus.StateError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := f.exec(t, execEvent(t, "deadline", "c-"+tc.name, `{}`, func(e *bus.Event, _ *bus.ExecRequest) { e.ExpiryTime = tc.expiry }), "deadline")
			s := testkit.Recv(t, got, bound, "call")
			if s.ok != !tc.want.IsZero() || !s.deadline.Equal(tc.want) {
				t.Fatalf("deadline %v (set %v), want %v", s.deadline, s.ok, tc.want)
			}
			if res.State != tc.state {
				t.Fatalf("result %s, want state %s", jsonOf(res), tc.state)
			}
			if tc.state == bus.StateError {
				if !errors.Is(s.err, context.DeadlineExceeded) {
					t.Errorf("ctx.Err() = %v for a past expiry", s.err)
				}
				wantText(t, res, bus.StateError, "Error: "+context.DeadlineExceeded.Error())
			}
		})
	}
}

func TestProgress(t *testing.T) {
	f := newFixture(t, true)
	events, err := f.nc.SubscribeSync(f.subj.Events("s1"))
	if err != nil {
		t.Fatal(err)
	}
	others, err := f.nc.SubscribeSync(f.subj.All("events"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "steps", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			if err := c.Progress(bus.Text("step one")...); err != nil {
				return nil, err
			}
			if err := c.Progress(bus.Block{Type: bus.BlockText, Text: "step two"}, bus.Block{Type: bus.BlockData, MediaType: "image/png", Data: "aGk="}); err != nil {
				return nil, err
			}
			return textOut("final"), nil
		})
	})
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	res := f.exec(t, execEvent(t, "steps", "toolu_1", `{}`, func(e *bus.Event, _ *bus.ExecRequest) { e.TraceParent = tp }), "steps")
	// Progress never becomes part of the result.
	wantText(t, res, bus.StateSuccess, "final")
	want := [][]bus.Block{bus.Text("step one"), {{Type: bus.BlockText, Text: "step two"}, {Type: bus.BlockData, MediaType: "image/png", Data: "aGk="}}}
	for i, out := range want {
		m, err := events.NextMsg(bound)
		if err != nil {
			t.Fatalf("progress %d: %v", i+1, err)
		}
		ev := decodeReply(t, m)
		if ev.Type != bus.TypeCallProgress || ev.SessionID != "s1" || ev.ReplyID != "r1" || ev.ToolCallID != "toolu_1" ||
			ev.Subject != "toolu_1" || ev.Source != "toolbus/worker/w1" || ev.Time == "" || ev.ID == "" {
			t.Fatalf("progress %d attributes %+v", i+1, ev)
		}
		if ev.TraceParent != tp || m.Header.Get(bus.HeaderTraceParent) != tp {
			t.Errorf("progress %d traceparent %q / header %q, want %q", i+1, ev.TraceParent, m.Header.Get(bus.HeaderTraceParent), tp)
		}
		var p bus.Progress
		if err := ev.DataAs(&p); err != nil {
			t.Fatal(err)
		}
		if p.Seq != i+1 || jsonOf(p.Output) != jsonOf(out) {
			t.Fatalf("progress %d data %s", i+1, ev.Data)
		}
	}
	// Nothing else was published on any session's events subject (the
	// reply arrived after both progress events on the same connection).
	if n, _, _ := others.Pending(); n != 2 {
		t.Fatalf("%d events on %s, want the 2 progress events of s1", n, f.subj.All("events"))
	}
	if n, _, _ := events.Pending(); n != 0 {
		t.Fatalf("%d more events on s1", n)
	}
}

func TestProgressSeqPerCall(t *testing.T) {
	f := newFixture(t, true)
	events, err := f.nc.SubscribeSync(f.subj.All("events"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "one", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			return textOut("ok"), c.Progress(bus.Text(c.ID)...)
		})
	})
	f.exec(t, execEvent(t, "one", "c1", `{}`), "one")
	f.exec(t, execEvent(t, "one", "c2", `{}`, inSession("s2", "r1")), "one")
	for _, want := range []struct{ subject, call string }{{f.subj.Events("s1"), "c1"}, {f.subj.Events("s2"), "c2"}} {
		m, err := events.NextMsg(bound)
		if err != nil {
			t.Fatal(err)
		}
		ev := decodeReply(t, m)
		var p bus.Progress
		_ = ev.DataAs(&p)
		if m.Subject != want.subject || ev.ToolCallID != want.call || p.Seq != 1 {
			t.Fatalf("progress on %s: %+v %s, want call %s seq 1 on %s", m.Subject, ev, ev.Data, want.call, want.subject)
		}
	}
}

// An exec that says progress_reply (protocol 1.18) has the call's progress
// sent to its reply subject + ".progress", in order before the result on
// the reply subject, and nothing on any session's events: the router
// publishes it. A durable call's exec never says it (durable.go).
func TestProgressToTheRouter(t *testing.T) {
	f := newFixture(t, true)
	events, err := f.nc.SubscribeSync(f.subj.All("events"))
	if err != nil {
		t.Fatal(err)
	}
	inbox, replies, result := replyInbox(t, f)
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "steps", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			for _, s := range []string{"one", "two"} {
				if err := c.Progress(bus.Text(s)...); err != nil {
					return nil, err
				}
			}
			return textOut("final"), nil
		})
	})
	m := eventMsg(t, f.subj.Workers.Exec("steps"), execEvent(t, "steps", "toolu_1", `{}`, func(_ *bus.Event, r *bus.ExecRequest) { r.ProgressReply = true }))
	m.Reply = inbox
	if err := f.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"one", "two"} {
		m, err := replies.NextMsg(bound)
		if err != nil {
			t.Fatalf("progress %d: %v", i+1, err)
		}
		ev := decodeReply(t, m)
		var p bus.Progress
		if err := ev.DataAs(&p); err != nil {
			t.Fatal(err)
		}
		if m.Subject != inbox+bus.ProgressSuffix || ev.Type != bus.TypeCallProgress || ev.ToolCallID != "toolu_1" || p.Seq != i+1 || jsonOf(p.Output) != jsonOf(bus.Text(want)) {
			t.Fatalf("progress %d on %s: %+v %s", i+1, m.Subject, ev, ev.Data)
		}
	}
	r, err := result.NextMsg(bound)
	if err != nil {
		t.Fatal(err)
	}
	wantText(t, execResult(t, decodeReply(t, r)), bus.StateSuccess, "final")
	if n, _, _ := events.Pending(); n != 0 {
		t.Fatalf("%d events published by the worker", n)
	}
}

// A progress whose message would pass bus.MaxProgress (1.19), here by the
// exec's tracestate of 70 KiB that it carries, is the tool's error,
// nothing sent: a router would drop it unread. (Its output alone never
// passes: blocks past the cap are stored, as a large result's.)
func TestProgressOverTheCap(t *testing.T) {
	f := newFixture(t, true)
	inbox, sent, result := replyInbox(t, f)
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "steps", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			err := c.Progress(bus.Text("step")...)
			return textOut(fmt.Sprint(err)), nil
		})
	})
	m := eventMsg(t, f.subj.Workers.Exec("steps"), execEvent(t, "steps", "toolu_1", `{}`, func(e *bus.Event, r *bus.ExecRequest) {
		e.TraceState, r.ProgressReply = "k="+strings.Repeat("v", 70<<10), true
	}))
	m.Reply = inbox
	if err := f.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	r, err := result.NextMsg(bound)
	if err != nil {
		t.Fatal(err)
	}
	res := execResult(t, decodeReply(t, r))
	if len(res.Output) != 1 || !strings.Contains(res.Output[0].Text, fmt.Sprintf("more than the %d a router takes", bus.MaxProgress)) {
		t.Fatalf("the tool's progress error: %s", jsonOf(res.Output))
	}
	if n, _, _ := sent.Pending(); n != 0 {
		t.Fatalf("%d progress sent over the cap", n)
	}
}

// replyInbox is an exec's reply inbox, read: what comes under it (its
// progress), and on it (the result).
func replyInbox(t *testing.T, f *fixture) (inbox string, under, on *nats.Subscription) {
	inbox = f.nc.NewRespInbox()
	under, err := f.nc.SubscribeSync(inbox + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if on, err = f.nc.SubscribeSync(inbox); err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return inbox, under, on
}

func TestPatchState(t *testing.T) {
	for _, tc := range []struct {
		name     string
		injected bool
		state    string
		patch    string
		text     string
	}{
		{"state_injected", true, bus.StateSuccess, `{"count":2,"old":null}`, "patched"},
		{"not state_injected", false, bus.StateError, "", "Error: tool patcher set a state patch but is not state_injected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			got := make(chan string, 1)
			f.startWorker(worker.Config{}, func(w *worker.Worker) {
				err := w.Handle(bus.ToolDef{Name: "patcher", Description: "Patches.", InputSchema: objectSchema, StateInjected: tc.injected},
					func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
						got <- string(c.State)
						if err := c.PatchState(map[string]any{"count": 2, "old": nil}); err != nil {
							return nil, err
						}
						return textOut("patched"), nil
					})
				if err != nil {
					t.Fatal(err)
				}
			})
			res := f.exec(t, execEvent(t, "patcher", "c1", `{}`, func(_ *bus.Event, r *bus.ExecRequest) { r.State = json.RawMessage(`{"count":1}`) }), "patcher")
			if s := testkit.Recv(t, got, bound, "call"); s != `{"count":1}` {
				t.Errorf("state %s", s)
			}
			wantText(t, res, tc.state, tc.text)
			if string(res.StatePatch) != tc.patch {
				t.Fatalf("state_patch %s, want %s", res.StatePatch, tc.patch)
			}
		})
	}
}

func TestPatchStateNotJSON(t *testing.T) {
	c := &worker.Call{}
	if err := c.PatchState(func() {}); err == nil {
		t.Fatal("a patch that is not JSON was accepted")
	}
}

func TestMalformedExec(t *testing.T) {
	f := newFixture(t, true)
	var runs atomic.Int32
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "echo", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			runs.Add(1)
			return textOut("echo"), nil
		})
	})
	event := func(typ, data string, mod func(*bus.Event)) []byte {
		ev := &bus.Event{SpecVersion: "1.0", ID: "x1", Source: "test", Type: typ, DataContentType: bus.ContentTypeJSON,
			SessionID: "s1", ReplyID: "r1", ToolCallID: "c1", Data: json.RawMessage(data)}
		if mod != nil {
			mod(ev)
		}
		b, err := ev.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := `{"call":{"id":"c1","name":"echo","input":{}},"attempt":1}`
	for _, tc := range []struct {
		name string
		body []byte
		hdr  nats.Header
	}{
		{"not json", []byte("run echo please"), nil},
		{"json array", []byte(`[1,2]`), nil},
		{"empty", nil, nil},
		{"not a cloudevent", []byte(`{"call":{"id":"c1","name":"echo"}}`), nil},
		{"wrong type", event(bus.TypeCallBatch, good, nil), nil},
		{"no data", event(bus.TypeExec, "", nil), nil},
		{"data of wrong type", event(bus.TypeExec, `{"call":5}`, nil), nil},
		{"data not an object", event(bus.TypeExec, `"echo"`, nil), nil},
		{"call for another tool", event(bus.TypeExec, `{"call":{"id":"c1","name":"other","input":{}},"attempt":1}`, nil), nil},
		// 5.1: the input is the object that passed the schema (session 32's red team).
		{"input an array", event(bus.TypeExec, `{"call":{"id":"c1","name":"echo","input":[1,2]},"attempt":1}`, nil), nil},
		{"input a string", event(bus.TypeExec, `{"call":{"id":"c1","name":"echo","input":"x"},"attempt":1}`, nil), nil},
		{"input a number", event(bus.TypeExec, `{"call":{"id":"c1","name":"echo","input":5},"attempt":1}`, nil), nil},
		{"bad session id", event(bus.TypeExec, good, func(e *bus.Event) { e.SessionID = "s.1" }), nil},
		{"no session id", event(bus.TypeExec, good, func(e *bus.Event) { e.SessionID = "" }), nil},
		{"no reply id", event(bus.TypeExec, good, func(e *bus.Event) { e.ReplyID = "" }), nil},
		{"bad call id in the data", event(bus.TypeExec, `{"call":{"id":"c.1","name":"echo","input":{}},"attempt":1}`, nil), nil},
		{"no call id", event(bus.TypeExec, `{"call":{"id":"","name":"echo","input":{}},"attempt":1}`, func(e *bus.Event) { e.ToolCallID = "" }), nil},
		{"bad expirytime", event(bus.TypeExec, good, func(e *bus.Event) { e.ExpiryTime = "tomorrow" }), nil},
		{"binary mode, data not json", []byte("{oops"), nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"x"}, "ce-source": {"t"}, "ce-type": {bus.TypeExec}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &nats.Msg{Subject: f.subj.Workers.Exec("echo"), Data: tc.body, Header: tc.hdr}
			wantErrorEvent(t, f.request(t, m), bus.CodeBadEvent)
		})
	}
	if runs.Load() != 0 {
		t.Fatalf("tool ran %d times on malformed requests", runs.Load())
	}
	// The worker still serves, including binary mode and a null input.
	wantText(t, f.exec(t, execEvent(t, "echo", "c1", `{}`), "echo"), bus.StateSuccess, "echo")
	wantText(t, f.exec(t, execEvent(t, "echo", "c3", `null`), "echo"), bus.StateSuccess, "echo")
	bm := bus.BinaryMsg("", execEvent(t, "echo", "c2", `{}`))
	h, body := bm.Header, bm.Data
	wantText(t, execResult(t, f.request(t, &nats.Msg{Subject: f.subj.Workers.Exec("echo"), Header: h, Data: body})), bus.StateSuccess, "echo")
}

// TestExecModes: a structured request is answered in structured mode, a
// binary one in binary mode, a compact one in the compact form, with the
// same result (docs/protocol.md 5.1, 5.2); the registration says the
// worker takes binary and compact exec. A compact result names no call,
// session or reply (its inbox does) and carries no time, content type or
// trace headers; the others copy the request's identity.
func TestExecModes(t *testing.T) {
	f := newFixture(t, true)
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "echo", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			return textOut("echo " + c.ID + " " + c.SessionID + " " + c.ReplyID), nil
		})
	})
	regs := f.reg.registrations()
	if len(regs) == 0 {
		t.Fatal("no registration")
	}
	for _, reg := range regs {
		if !reg.BinaryExec || !reg.CompactExec {
			t.Fatalf("registration %+v does not declare binary and compact exec", reg)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	subject := f.subj.Workers.Exec("echo")
	for _, form := range []bus.ExecForm{bus.ExecStructured, bus.ExecBinary, bus.ExecCompact} {
		e := execEvent(t, "echo", "c1", `{}`)
		e.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		m, err := e.Msg(subject)
		if err != nil {
			t.Fatal(err)
		}
		switch form {
		case bus.ExecBinary:
			m = bus.BinaryMsg(subject, e)
		case bus.ExecCompact:
			m = bus.CompactMsg(subject, e)
		}
		resp, err := f.nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := bus.IsBinary(resp.Header); got != (form != bus.ExecStructured) {
			t.Fatalf("form %d: reply binary %v", form, got)
		}
		ev, err := bus.Decode(resp)
		if err != nil {
			t.Fatal(err)
		}
		if form == bus.ExecCompact {
			if len(resp.Header) != 4 || ev.ToolCallID != "" || ev.SessionID != "" || ev.ReplyID != "" || ev.Time != "" ||
				ev.TraceParent != "" || ev.DataContentType != "" || !bus.CompactForm(resp.Header, ev) {
				t.Fatalf("compact reply %v: %+v", resp.Header, ev)
			}
		} else if ev.ToolCallID != "c1" || ev.SessionID != e.SessionID || ev.ReplyID != e.ReplyID || ev.TraceParent == "" {
			t.Fatalf("form %d: reply attributes %+v", form, ev)
		}
		wantText(t, execResult(t, ev), bus.StateSuccess, "echo c1 "+e.SessionID+" "+e.ReplyID)
	}
}

func TestDrainLetsCallsFinish(t *testing.T) {
	f := newFixture(t, true)
	g := newGate()
	w := f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "slow", g.handler)
		raw(t, w, "ping", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) { return textOut("pong"), nil })
	})
	p := f.send(t, execEvent(t, "slow", "c1", `{}`), "slow")
	testkit.Recv(t, g.entered, bound, "call running")

	stopped := make(chan error, 1)
	go func() { stopped <- w.Drain(context.Background()) }()
	waitClosed(t, f.reg.leaving, "leaving registration")
	// Stop takes no new calls: once the subscriptions are gone, nobody
	// answers on the worker's subjects.
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := f.nc.RequestMsgWithContext(ctx, eventMsg(t, f.subj.Workers.Exec("ping"), execEvent(t, "ping", "p1", `{}`)))
		if !errNoResponders(err) {
			return fmt.Errorf("ping still served: %v", err)
		}
		return nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v while a call was running", err)
	default:
	}
	if p.replied() {
		t.Fatal("the running call answered before it finished")
	}
	g.release <- struct{}{}
	wantText(t, p.wait(), bus.StateSuccess, "done c1")
	if err := testkit.Recv(t, stopped, bound, "Stop"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := w.Drain(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	// The leave is one per tool, on the tool's subject (protocol 1.12):
	// it names the worker and nothing else.
	var (
		leaving []bus.Register
		left    []string
	)
	on := f.reg.subjects()
	for i, r := range f.reg.registrations() {
		if r.Leaving {
			leaving, left = append(leaving, r), append(left, on[i])
		}
	}
	slices.Sort(left)
	if want := []string{f.subj.Workers.Register("ping"), f.subj.Workers.Register("slow")}; !slices.Equal(left, want) {
		t.Fatalf("leaves on %v, want %v", left, want)
	}
	for _, r := range leaving {
		if r.Worker != "w1" || len(r.Tools) != 0 {
			t.Fatalf("leaving registrations %s", jsonOf(leaving))
		}
	}
}

// TestDrainCutsOffAtDeadline: past the drain's deadline the calls still
// running have their context cancelled and send no result (the routers see
// them vanish, as from a worker that stopped); Drain returns at once after
// the calls have returned, with an error that counts them.
func TestDrainCutsOffAtDeadline(t *testing.T) {
	f := newFixture(t, true)
	g := newGate()
	w := f.startWorker(worker.Config{}, func(w *worker.Worker) { raw(t, w, "slow", g.handler) })
	p := f.send(t, execEvent(t, "slow", "c1", `{}`), "slow")
	testkit.Recv(t, g.entered, bound, "call running")
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	err := w.Drain(ctx)
	if took := time.Since(start); took > deadline+3*time.Second {
		t.Fatalf("Drain took %v, deadline %v", took, deadline)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 calls cut off") {
		t.Fatalf("Drain past its deadline: %v, want 1 call cut off and context.DeadlineExceeded", err)
	}
	if err2 := w.Drain(context.Background()); err2 != err {
		t.Fatalf("second Drain returned %v, want the first result %v", err2, err)
	}
	waitClosed(t, w.Closed(), "Closed")
	if n := g.cur.Load(); n != 0 {
		t.Fatalf("%d calls still running after Drain: their context was not cancelled", n)
	}
	if m, err := p.sub.NextMsg(250 * time.Millisecond); err == nil {
		t.Fatalf("a call cut off by the drain deadline answered: %s", m.Data)
	}
}

func TestStopTwice(t *testing.T) {
	f := newFixture(t, true)
	w := f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "ping", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) { return textOut("pong"), nil })
	})
	wantText(t, f.exec(t, execEvent(t, "ping", "c1", `{}`), "ping"), bus.StateSuccess, "pong")
	select {
	case <-w.Closed():
		t.Fatal("Closed before Stop")
	default:
	}
	w.Stop(t.Context())
	w.Stop(t.Context())
	waitClosed(t, w.Closed(), "Closed")
}

func TestStopWithoutStart(t *testing.T) {
	f := newFixture(t, true)
	w := f.newWorker(worker.Config{})
	for range 2 {
		if err := w.Drain(t.Context()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	if n := len(f.reg.registrations()); n != 0 {
		t.Fatalf("%d registrations from a worker never started", n)
	}
}

func TestRegistered(t *testing.T) {
	f := newFixture(t, false)
	groups := []bus.Group{{Name: "web", Description: "Web tools.", Scope: bus.ScopeMeta}}
	// The worker's log tells what the routers answered.
	var logs testkit.Buffer
	logged := func(what string, want ...string) {
		t.Helper()
		testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
			for line := range strings.Lines(logs.String()) {
				if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(line, w) }) {
					return nil
				}
			}
			return fmt.Errorf("no %s logged (a line with %q) in:\n%s", what, want, logs.String())
		})
	}
	w := f.newWorker(worker.Config{Heartbeat: 50 * time.Millisecond, Groups: groups,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	raw(t, w, "a", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) { return nil, nil })
	raw(t, w, "b", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) { return nil, nil })
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// No router: the first registration failed, nothing is acknowledged.
	select {
	case <-w.Registered():
		t.Fatal("Registered closed without a router")
	default:
	}
	// A router that answers with an error does not acknowledge either.
	f.reg.setRespond(func(bus.Register) (string, any) {
		return bus.TypeError, bus.Errorf(bus.CodeBadRequest, "not today")
	})
	f.answerRegistrations()
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if len(f.reg.registrations()) == 0 {
			return errors.New("no registration yet")
		}
		return nil
	})
	logged("error reply", `msg="worker: registration not acknowledged"`, `err="bad_request: not today"`)
	select {
	case <-w.Registered():
		t.Fatal("Registered closed on an error reply")
	default:
	}
	// The next heartbeat that a router acknowledges closes Registered, even
	// when the router rejected a tool.
	f.reg.setRespond(func(r bus.Register) (string, any) {
		return bus.TypeRegisterAck, bus.RegisterAck{Accepted: []string{"a"}, Rejected: []bus.Rejection{{Name: "b", Reason: "conflicts"}}}
	})
	waitClosed(t, w.Registered(), "Registered")
	logged("rejection", `level=ERROR`, `msg="worker: tool rejected by the routers; this worker does not serve it`, `tool=b reason=conflicts`)
	// Registrations repeat every heartbeat with the worker, its groups and
	// its tools.
	n := len(f.reg.registrations())
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if len(f.reg.registrations()) < n+2 {
			return errors.New("no heartbeats")
		}
		return nil
	})
	// Each group and each tool has a request of its own, on its own
	// subject (protocol 1.12).
	on := f.reg.subjects()
	for i, r := range f.reg.registrations() {
		if r.Worker != "w1" || r.Leaving {
			t.Fatalf("registration %s", jsonOf(r))
		}
		if on[i] == f.subj.Workers.RegisterGroup("web") {
			if jsonOf(r.Groups) != jsonOf(groups) || len(r.Tools) != 0 {
				t.Fatalf("group registration %s", jsonOf(r))
			}
			continue
		}
		if len(r.Groups) != 0 || len(r.Tools) != 1 || on[i] != f.subj.Workers.Register(r.Tools[0].Name) || r.Tools[0].Name != "a" && r.Tools[0].Name != "b" {
			t.Fatalf("registration on %s: %s", on[i], jsonOf(r))
		}
		if r.Tools[0].TimeoutMS != bus.DefaultTimeoutMS || r.Tools[0].Permission != bus.PermissionPassthrough || r.Tools[0].RuleMatcher != bus.MatcherNone || r.Tools[0].MaxAttempts != 1 {
			t.Fatalf("defaults not applied: %s", jsonOf(r.Tools[0]))
		}
	}
}

// FuzzExec sends arbitrary bodies to a running worker: every request gets
// an answer, an exec result or a bad_event error, and the worker survives.
func FuzzExec(f *testing.F) {
	s := testkit.RunServer(f)
	nc := testkit.Connect(f, s)
	subj := bus.NewSubjects("")
	reg := &registrar{leaving: make(chan struct{}), respond: acceptAll}
	if _, err := nc.Subscribe(subj.All("register"), reg.handle(nc)); err != nil {
		f.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		f.Fatal(err)
	}
	w, err := worker.New(testkit.Connect(f, s), worker.Config{ID: "fz"})
	if err != nil {
		f.Fatal(err)
	}
	if err := w.Handle(bus.ToolDef{Name: "echo", InputSchema: objectSchema}, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
		return textOut(string(c.Input)), nil
	}); err != nil {
		f.Fatal(err)
	}
	if err := w.Start(f.Context()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = w.Drain(context.Background()) })
	good, _ := bus.NewEvent(bus.TypeExec, "t", bus.ExecRequest{Call: bus.Call{ID: "c1", Name: "echo", Input: json.RawMessage(`{"a":1}`)}})
	good.SessionID, good.ReplyID, good.ToolCallID = "s", "r", "c1"
	b, _ := good.Encode()
	f.Add(b)
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"s","type":"io.toolbus.exec","data":{"call":{"id":"c","name":"echo"}}}`))
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"s","type":"io.toolbus.exec","data_base64":"e30="}`))
	f.Add([]byte(`{}`))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		resp, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subj.Workers.Exec("echo"), Data: body})
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		ev, err := bus.Decode(&nats.Msg{Data: resp.Data})
		if err != nil {
			t.Fatalf("answer is not a CloudEvent: %v", err)
		}
		switch ev.Type {
		case bus.TypeExecResult:
		case bus.TypeError:
			var be bus.Error
			if ev.DataAs(&be) != nil || be.Code != bus.CodeBadEvent {
				t.Fatalf("error %s", ev.Data)
			}
		default:
			t.Fatalf("answer type %s", ev.Type)
		}
	})
}

// TestDrainLeavesAfterHeartbeatInFlight: a heartbeat registration already
// sent when Drain begins is waited for (until a router answers it or a
// beat passes) before the leaving registration goes out, so no router can
// apply the heartbeat after the leave.
func TestDrainLeavesAfterHeartbeatInFlight(t *testing.T) {
	const beat = 300 * time.Millisecond
	f := newFixture(t, false)
	nc := testkit.Connect(t, f.srv)
	regs := make(chan *nats.Msg, 16)
	if _, err := nc.ChanSubscribe(f.subj.All("register"), regs); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	decode := func(m *nats.Msg) bus.Register {
		t.Helper()
		e, err := bus.Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		var r bus.Register
		if err := e.DataAs(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	w := f.newWorker(worker.Config{Heartbeat: beat})
	raw(t, w, "ping", func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textOut("pong"), nil })
	started := make(chan error, 1)
	go func() { started <- w.Start(t.Context()) }()
	first := testkit.Recv(t, regs, bound, "the first registration")
	if r := decode(first); r.Leaving || len(r.Tools) != 1 {
		t.Fatalf("first registration %s", jsonOf(r))
	}
	_ = bus.Respond(nc, first, "test/router", bus.TypeRegisterAck, bus.RegisterAck{Accepted: []string{"ping"}, Rejected: []bus.Rejection{}})
	if err := testkit.Recv(t, started, bound, "Start"); err != nil {
		t.Fatal(err)
	}
	// The next heartbeat is held: no router answers it.
	hb := testkit.Recv(t, regs, bound, "a heartbeat")
	held := time.Now()
	if r := decode(hb); r.Leaving {
		t.Fatal("leaving before Drain")
	}
	drained := make(chan error, 1)
	go func() { drained <- w.Drain(context.Background()) }()
	leave := testkit.Recv(t, regs, bound, "the leaving registration")
	if r := decode(leave); !r.Leaving {
		t.Fatalf("after the held heartbeat: %s, want the leave", jsonOf(r))
	}
	if d := time.Since(held); d < beat/3 {
		t.Fatalf("the leave came %s after a heartbeat nobody had answered; want it after the heartbeat's wait (%s)", d, beat)
	}
	_ = bus.Respond(nc, leave, "test/router", bus.TypeRegisterAck, bus.RegisterAck{Accepted: []string{}, Rejected: []bus.Rejection{}})
	if err := testkit.Recv(t, drained, bound, "Drain"); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-regs:
		t.Fatalf("a registration after the leave: %s", jsonOf(decode(m)))
	default:
	}
}

// TestCallKeptAfterItsAnswer: requests are pooled (worker.go), so the
// *Call a handler keeps must be its own: after later calls reused the
// request, a kept call still names its own call, input and session, its
// Progress still reaches its session, and the typed tool's text results
// (written in the request's scratch) are each call's own.
func TestCallKeptAfterItsAnswer(t *testing.T) {
	f := newFixture(t, true)
	events, err := f.nc.SubscribeSync(f.subj.Events("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var kept []*worker.Call
	type in struct {
		Text string `json:"text"`
	}
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		if err := worker.Register(w, bus.ToolDef{Name: "keep", Description: "Keeps its call."},
			func(_ context.Context, c *worker.Call, in in) (string, error) {
				mu.Lock()
				kept = append(kept, c)
				mu.Unlock()
				return "got " + in.Text, nil
			}); err != nil {
			t.Fatal(err)
		}
	})
	const n = 20
	for i := range n {
		id := fmt.Sprintf("toolu_%02d", i)
		res := f.exec(t, execEvent(t, "keep", id, fmt.Sprintf(`{"text":"t%02d"}`, i)), "keep")
		wantText(t, res, bus.StateSuccess, fmt.Sprintf("got t%02d", i))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kept) != n {
		t.Fatalf("%d calls kept, want %d", len(kept), n)
	}
	for i, c := range kept {
		if c.ID != fmt.Sprintf("toolu_%02d", i) || string(c.Input) != fmt.Sprintf(`{"text":"t%02d"}`, i) || c.SessionID != "s1" || c.ReplyID != "r1" {
			t.Errorf("kept call %d: id %q input %s session %q reply %q", i, c.ID, c.Input, c.SessionID, c.ReplyID)
		}
	}
	if err := kept[0].Progress(bus.Text("late")...); err != nil {
		t.Fatal(err)
	}
	m, err := events.NextMsg(bound)
	if err != nil {
		t.Fatal(err)
	}
	if ev := decodeReply(t, m); ev.Type != bus.TypeCallProgress || ev.ToolCallID != "toolu_00" || ev.SessionID != "s1" {
		t.Fatalf("late progress %+v", ev)
	}
}

// TestDrainWithoutServer: a worker whose server went away (the router that
// embeds it stopped) drains at once with nothing in flight, a heartbeat
// waiting for its answer included: no leave can follow it. Before, each
// endpoint's drain waited for nats.go's 10 s flush, which a connection that
// is reconnecting cannot answer, and the beat its wait: toolworker took 12 s
// to stop on SIGTERM.
func TestDrainWithoutServer(t *testing.T) {
	const beat = 5 * time.Second
	f := newFixture(t, false)
	regs := make(chan *nats.Msg, 16)
	if _, err := f.nc.ChanSubscribe(f.subj.All("register"), regs); err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	disconnected := make(chan struct{}, 1)
	nc := testkit.Connect(t, f.srv, nats.MaxReconnects(-1), nats.DisconnectErrHandler(func(*nats.Conn, error) {
		select {
		case disconnected <- struct{}{}:
		default:
		}
	}))
	w, err := worker.New(nc, worker.Config{ID: "w1", Heartbeat: beat})
	if err != nil {
		t.Fatal(err)
	}
	raw(t, w, "ping", func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textOut("pong"), nil })
	started := make(chan error, 1)
	go func() { started <- w.Start(t.Context()) }()
	first := testkit.Recv(t, regs, bound, "the first registration")
	_ = bus.Respond(f.nc, first, "test/router", bus.TypeRegisterAck, bus.RegisterAck{Accepted: []string{"ping"}, Rejected: []bus.Rejection{}})
	if err := testkit.Recv(t, started, bound, "Start"); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, regs, 2*beat, "a heartbeat") // held: it waits a beat for its answer
	f.srv.Shutdown()
	testkit.Recv(t, disconnected, bound, "disconnected")
	// Far below the flush's 10 s and the held beat's wait; far above a drain that waits for nothing.
	const limit = beat / 2
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := w.Drain(ctx); err != nil {
		t.Fatalf("Drain without a server: %v", err)
	}
	if took := time.Since(start); took > limit {
		t.Fatalf("Drain without a server took %v, want under %v", took, limit)
	}
}
