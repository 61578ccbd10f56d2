package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/registry"
)

// Fakes of the pipeline's ports: structs with func fields (and a record of
// what they were asked), so that each step runs without NATS or a Router.

type fakeSessions struct {
	sess    *groups.Session
	rev     uint64
	resets  []string
	touched []*groups.Session // TouchRead's sessions
}

func (f *fakeSessions) Snapshot(context.Context, string, uint64) *groups.Session { return f.sess }
func (f *fakeSessions) Session(string) *groups.Session                           { return f.sess }
func (f *fakeSessions) Revision(string) uint64                                   { return f.rev }
func (f *fakeSessions) TouchRead(_ context.Context, _ string, s *groups.Session, _ time.Time) error {
	f.touched = append(f.touched, s)
	return nil
}
func (f *fakeSessions) Forestall(context.Context, string, string, []string) error { return nil }
func (f *fakeSessions) Reset(_ context.Context, _ string, in json.RawMessage) (string, error) {
	f.resets = append(f.resets, string(in))
	if strings.Contains(string(in), "bad") {
		return "", bus.Errorf(bus.CodeInvalidInput, "Invalid group name(s): bad.")
	}
	return "The currently activated tool group(s): ops.", nil
}

type fakeResolver struct {
	known     map[string]*registry.Tool // what resolves
	refreshed []string
	onRefresh map[string]*registry.Tool // what becomes known once read from KV
}

func (f *fakeResolver) resolve(_ *groups.Session, _ *groups.Request, _ json.RawMessage, name string) groups.Resolved {
	if name == "reset_tools" {
		return groups.Resolved{Reset: true}
	}
	if t, ok := f.known[name]; ok {
		return groups.Resolved{Tool: t}
	}
	return groups.Resolved{Code: bus.CodeUnknownTool, Message: "ToolNotFoundError: " + name}
}

func (f *fakeResolver) refresh(_ context.Context, name string) error {
	f.refreshed = append(f.refreshed, name)
	if t, ok := f.onRefresh[name]; ok {
		f.known[name] = t
	}
	return nil
}

type fakeRunner struct {
	mu     sync.Mutex
	tools  []string
	skill  int
	landed bool // a write's ledger record landed before its result came (the once middleware's job.landed)
}

func (f *fakeRunner) runTool(_ context.Context, j *job) bus.Result {
	f.mu.Lock()
	f.tools = append(f.tools, j.call.ID)
	f.mu.Unlock()
	j.landed = f.landed && !j.tool.Def.ReadOnly
	return bus.Result{ID: j.call.ID, Name: j.call.Name, State: bus.StateSuccess, Output: bus.Text("ran " + j.call.ID)}
}

func (f *fakeRunner) loadSkill(_ context.Context, _ string, _ json.RawMessage, c bus.Call, _ json.RawMessage) bus.Result {
	f.skill++
	return bus.Result{ID: c.ID, Name: c.Name, State: bus.StateSuccess, Output: bus.Text("skill")}
}

func (f *fakeRunner) search(_ context.Context, _ *batch, c *callState) bus.Result {
	return bus.Result{ID: c.call.ID, Name: c.call.Name, State: bus.StateSuccess, Output: bus.Text("found")}
}

func (f *fakeRunner) readOutput(_ context.Context, _ string, c bus.Call, _ json.RawMessage) bus.Result {
	return bus.Result{ID: c.ID, Name: c.Name, State: bus.StateSuccess, Output: bus.Text("read")}
}

type fakeEvents struct {
	mu        sync.Mutex
	types     []string // type:callid of every event published
	ids       []string // the id each was published with ("": a new one)
	replies   []*bus.Event
	announced []string // the data of every event announced, as it was sent
}

func (f *fakeEvents) publish(id, typ, _, _, callID string, _ [2]string, _ any) (*sentEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.types = append(f.types, strings.TrimPrefix(typ, "io.toolbus.")+":"+callID)
	f.ids = append(f.ids, id)
	return &sentEvent{}, nil
}

func (f *fakeEvents) announce(typ, session, replyID, callID string, trace [2]string, data json.RawMessage) error {
	f.mu.Lock()
	f.announced = append(f.announced, string(data)) // a copy: the sender may reuse data once this returns
	f.mu.Unlock()
	_, err := f.publish("", typ, session, replyID, callID, trace, data)
	return err
}

func (f *fakeEvents) live(typ, session, replyID, callID string, trace [2]string, data any) error {
	_, err := f.publish("", typ, session, replyID, callID, trace, data)
	return err
}

func (f *fakeEvents) stored(context.Context, []*sentEvent) error { return nil }

func (f *fakeEvents) reply(_, typ, session, replyID string, trace [2]string, data json.RawMessage) error {
	e := new(bus.Event)
	rawEventTo(e, "toolbus/router/test", typ, session, replyID, "", trace, data)
	f.replies = append(f.replies, e)
	return nil
}

type fakeConts struct {
	parked  []*parked.Record
	before  *parked.Parking // what Park answers a re-sent copy (nil: it parks)
	parkErr error           // what Park fails with
	batches int
	settle  func() (*parked.Batch, bool, error)
}

func (f *fakeConts) Park(_ context.Context, run parked.Run) (parked.Parking, error) {
	if f.parkErr != nil {
		return parked.Parking{}, f.parkErr
	}
	if f.before != nil {
		return *f.before, nil
	}
	f.batches++
	for _, rec := range run.Calls {
		rec.Subject = "toolbus.answer." + rec.Call.Name
	}
	if run.Announce != nil {
		run.Announce(run.Calls)
	}
	f.parked = append(f.parked, run.Calls...)
	return parked.Parking{Batch: run.Batch, Parked: run.Calls}, nil
}
func (f *fakeConts) Settle(context.Context, string, string, map[string]bus.Result) (*parked.Batch, bool, error) {
	if f.settle != nil {
		return f.settle()
	}
	return &parked.Batch{}, false, nil
}
func (f *fakeConts) Finish(context.Context, *parked.Batch) error { return nil }
func (f *fakeConts) Release(*parked.Batch)                       {}
func (f *fakeConts) Marks(*parked.Batch)                         {}
func (f *fakeConts) Get(context.Context, string) (*parked.Record, error) {
	return nil, errors.New("not found")
}
func (f *fakeConts) Parked(_, replyID string) []*parked.Record {
	if replyID == "" {
		return f.parked
	}
	var out []*parked.Record
	for _, r := range f.parked {
		if r != nil && r.ReplyID == replyID {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeConts) Held(string, string, []bus.Call) *parked.Record { return nil }
func (f *fakeConts) Continuation(context.Context, *parked.Record) (*parked.Batch, error) {
	return nil, errors.New("fake: no continuation")
}

func (f *fakeConts) Forestall(context.Context, string, string, bus.Call, bus.Result) error {
	return nil
}

var _ continuationPort = (*fakeConts)(nil)

// fakePipeline wires a pipeline from fakes.
type fakePipeline struct {
	sessions *fakeSessions
	resolver *fakeResolver
	runner   *fakeRunner
	events   *fakeEvents
	conts    *fakeConts
	p        *pipeline
}

func newFakePipeline(t *testing.T, tools ...bus.ToolDef) *fakePipeline {
	t.Helper()
	f := &fakePipeline{sessions: &fakeSessions{sess: &groups.Session{Mode: "default"}, rev: 7},
		resolver: &fakeResolver{known: map[string]*registry.Tool{}, onRefresh: map[string]*registry.Tool{}},
		runner:   &fakeRunner{}, events: &fakeEvents{}, conts: &fakeConts{}}
	for _, d := range tools {
		d.Permission = bus.PermissionAllow
		f.resolver.known[d.Name] = tool(t, d)
	}
	log := slog.New(slog.DiscardHandler)
	f.p = &pipeline{sessions: f.sessions, conts: f.conts, log: log, base: context.Background(),
		resolve: resolveStep{resolve: f.resolver.resolve, refresh: f.resolver.refresh, log: log},
		exec:    execStep{runner: f.runner, sessions: f.sessions},
		park:    parkStep{conts: f.conts, subj: bus.NewSubjects(""), maxParked: 2},
		report:  reportStep{events: f.events, sessions: f.sessions, log: log},
		fit:     fitStep{}}
	return f
}

// batchOf is a new batch of calls on the fake pipeline.
func (f *fakePipeline) batchOf(t *testing.T, events string, calls ...bus.Call) *batch {
	t.Helper()
	tn, err := newTurn("s1", "r1", [2]string{}, "", bus.Batch{Calls: calls, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	return f.p.newBatch(tn, time.Now())
}

func call(id, name string) bus.Call {
	return bus.Call{ID: id, Name: name, Input: json.RawMessage(`{}`)}
}

// TestPipelineEvents: the events a batch publishes, by what it asked and
// how its calls ended (docs/protocol.md 3.4), and the reply's sessionrev.
func TestPipelineEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events string
		cont   bool // a continuation: its calls finish after the reply
		want   []string
	}{
		{"default: batch.done only", "", false, []string{"batch.done:"}},
		{"explicit batch", bus.EventsBatch, false, []string{"batch.done:"}},
		{"events calls", bus.EventsCalls, false, []string{"call.result:c1", "call.result:c2", "batch.done:"}},
		{"continuation", "", true, []string{"call.result:c1", "call.result:c2", "batch.done:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakePipeline(t, bus.ToolDef{Name: "echo", ReadOnly: true})
			b := f.batchOf(t, tc.events, call("c1", "echo"), call("c2", "nope"))
			if tc.cont {
				b.start = time.Time{}
			}
			if !b.run(0) {
				t.Fatal("batch did not complete")
			}
			b.done()
			f.p.report.reply(b, "_INBOX.x")
			got := slices.Clone(f.events.types)
			slices.Sort(got[:len(got)-1])
			if !slices.Equal(got, tc.want) {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
			var r bus.Reply
			if err := f.events.replies[0].DataAs(&r); err != nil {
				t.Fatal(err)
			}
			if r.SessionRev != 7 || len(r.Results) != 2 || r.Results[0].State != bus.StateSuccess || r.Results[1].Error.Code != bus.CodeUnknownTool {
				t.Fatalf("reply %s", f.events.replies[0].Data)
			}
			// A read-only batch's announced batch.done and its reply carry the
			// same results (the reply finishes batch.done's buffer).
			if announced := tc.events != bus.EventsCalls && !tc.cont; announced != (len(f.events.announced) == 1) {
				t.Fatalf("announced %d batch.done", len(f.events.announced))
			}
			for _, done := range f.events.announced {
				var d struct{ Results json.RawMessage }
				var rr struct{ Results json.RawMessage }
				if json.Unmarshal([]byte(done), &d) != nil || json.Unmarshal(f.events.replies[0].Data, &rr) != nil || string(d.Results) != string(rr.Results) {
					t.Fatalf("batch.done %s, reply %s", done, f.events.replies[0].Data)
				}
			}
		})
	}
}

// TestPipelineWriteDone: a writing batch's batch.done is announced (not
// awaited) when every write's ledger record landed before its result came,
// and published to be awaited otherwise (docs/protocol.md 3.4, 1.15); a
// write that a cancel ended first is not counted as landed, whatever its
// run's record did.
func TestPipelineWriteDone(t *testing.T) {
	for _, landed := range []bool{true, false} {
		f := newFakePipeline(t, bus.ToolDef{Name: "put"}, bus.ToolDef{Name: "echo", ReadOnly: true})
		f.runner.landed = landed
		b := f.batchOf(t, "", call("c1", "put"), call("c2", "echo"))
		if !b.run(0) {
			t.Fatal("batch did not complete")
		}
		if b.calls[0].landed != landed || b.calls[1].landed {
			t.Fatalf("landed %v: calls' landed %v, %v", landed, b.calls[0].landed, b.calls[1].landed)
		}
		b.done()
		if got := len(f.events.announced); got != map[bool]int{true: 1, false: 0}[landed] || !slices.Equal(f.events.types, []string{"batch.done:"}) {
			t.Fatalf("landed %v: announced %d, events %v", landed, got, f.events.types)
		}
	}

	f := newFakePipeline(t, bus.ToolDef{Name: "put"})
	b := f.batchOf(t, "", call("c1", "put"))
	c := b.calls[0]
	c.job.landed = true // the run's record landed, but a cancel settled the call first
	if !b.finish(c, interrupted(c.call)) || b.settle(c, bus.Result{ID: "c1", Name: "put", State: bus.StateSuccess}, chained) {
		t.Fatal("the cancel's result was not the one kept")
	}
	if c.landed || unawaitedDone(b) {
		t.Fatalf("a call a cancel ended counts as landed (%v, unawaited %v)", c.landed, unawaitedDone(b))
	}
}

// TestOwnEvent: which results get an io.toolbus.call.result of their own.
func TestOwnEvent(t *testing.T) {
	now := time.Now()
	ok := bus.Result{State: bus.StateSuccess}
	cancelled := bus.Result{State: bus.StateInterrupted}
	for _, tc := range []struct {
		name   string
		events string
		start  time.Time
		res    bus.Result
		want   bool
	}{
		{"in the reply", "", now, ok, false},
		{"asked per call", bus.EventsCalls, now, ok, true},
		{"after the reply", "", time.Time{}, ok, true},
		{"cancelled", "", now, cancelled, true},
	} {
		b := &batch{start: tc.start}
		b.data.Events = tc.events
		if got := ownEvent(b, tc.res); got != tc.want {
			t.Errorf("%s: ownEvent %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestResolveStepRefreshes: a call that resolves to an unknown tool is
// resolved again after the tool is read from KV, once per name.
func TestResolveStepRefreshes(t *testing.T) {
	f := newFakePipeline(t)
	f.resolver.onRefresh["late"] = tool(t, bus.ToolDef{Name: "late", ReadOnly: true, Permission: bus.PermissionAllow})
	b := f.batchOf(t, "", call("c1", "late"), call("c2", "late"), call("c3", "gone"), call("c4", "bad name!"))
	b.resolveFrom(0)
	if !slices.Equal(f.resolver.refreshed, []string{"late", "gone"}) {
		t.Fatalf("refreshed %v, want late and gone once each (not an invalid name)", f.resolver.refreshed)
	}
	for i, want := range []string{"", "", bus.CodeUnknownTool, bus.CodeUnknownTool} {
		if got := b.calls[i].target.Code; got != want {
			t.Errorf("call %d: code %q, want %q", i, got, want)
		}
	}
}

// TestExecStep: reset_tools and the skill loader run in the router, a tool
// through the runner; reset_tools' invalid input is its own result.
func TestExecStep(t *testing.T) {
	f := newFakePipeline(t, bus.ToolDef{Name: "echo", ReadOnly: true})
	b := f.batchOf(t, "", call("c1", "echo"), bus.Call{ID: "c2", Name: "reset_tools", Input: json.RawMessage(`{"ops":true}`)},
		bus.Call{ID: "c3", Name: "reset_tools", Input: json.RawMessage(`{"bad":true}`)})
	b.resolveFrom(0)
	b.calls = append(b.calls, &callState{call: call("c4", "load_skill_through_path"), target: groups.Resolved{Skill: true}})
	want := []struct{ state, code string }{{bus.StateSuccess, ""}, {bus.StateSuccess, ""}, {bus.StateError, bus.CodeInvalidInput}, {bus.StateSuccess, ""}}
	for i, c := range b.calls {
		res := f.p.exec.Exec(context.Background(), jobOf(b, c))
		if res.State != want[i].state || want[i].code != "" && (res.Error == nil || res.Error.Code != want[i].code) {
			t.Errorf("call %s: %+v", c.call.ID, res)
		}
	}
	if !slices.Equal(f.runner.tools, []string{"c1"}) || f.runner.skill != 1 || len(f.sessions.resets) != 2 {
		t.Fatalf("runner ran %v, skills %d, resets %v", f.runner.tools, f.runner.skill, f.sessions.resets)
	}
}

// TestParkStep: an external call parks (its record, the continuation, one
// call.parked, queued calls listed); past the session's limit it ends
// limit_exceeded instead; a batch parked before adopts the first copy's
// state and runs nothing.
func TestParkStep(t *testing.T) {
	ext := bus.ToolDef{Name: "ext", External: true}
	t.Run("parks", func(t *testing.T) {
		f := newFakePipeline(t, ext, bus.ToolDef{Name: "echo", ReadOnly: true})
		b := f.batchOf(t, "", call("p1", "ext"), call("c2", "echo"))
		b.calls[1].target.Tool = f.resolver.known["echo"]
		b.calls[1].target.Tool.Def.ConcurrencySafe = false // held back behind the park
		if b.run(0) {
			t.Fatal("a batch with a parked call completed")
		}
		if len(f.conts.parked) != 1 || f.conts.batches != 1 {
			t.Fatalf("parked %d records, %d continuations", len(f.conts.parked), f.conts.batches)
		}
		if len(b.parked) != 2 || b.parked[0].Kind != bus.KindExternal || b.parked[1].Kind != bus.KindQueued {
			t.Fatalf("reply's parked %+v", b.parked)
		}
		if !slices.Equal(f.events.types, []string{"call.parked:"}) {
			t.Fatalf("events %v", f.events.types)
		}
	})
	t.Run("limit", func(t *testing.T) {
		f := newFakePipeline(t, ext)
		f.conts.parked = make([]*parked.Record, 2) // the session's limit (2) is reached
		b := f.batchOf(t, "", call("p1", "ext"))
		if !b.run(0) {
			t.Fatal("a call past the limit parked")
		}
		if c := b.calls[0].result; c == nil || c.Error == nil || c.Error.Code != bus.CodeLimitExceeded {
			t.Fatalf("result %+v", c)
		}
	})
	t.Run("taken over", func(t *testing.T) {
		// A resumed batch parks a call after another router took its
		// continuation over: that router's batch parks it; this copy stops
		// with no result for it and no event (docs/protocol.md 6.1).
		f := newFakePipeline(t, ext, bus.ToolDef{Name: "echo", ReadOnly: true})
		f.conts.parkErr = fmt.Errorf("parked: batch s1.r1: %w (taken over by router-b)", parked.ErrNotOwner)
		b := f.batchOf(t, "", call("c1", "echo"), call("p1", "ext"))
		b.start, b.cont = time.Time{}, &parked.Batch{Session: "s1", ReplyID: "r1", Phase: parked.PhaseResumed, Owner: "router-a", Next: 1}
		b.calls[0].result = &bus.Result{ID: "c1", Name: "echo", State: bus.StateSuccess}
		if b.run(1) {
			t.Fatal("a batch taken over completed")
		}
		if b.calls[1].result != nil || len(f.events.types) != 0 || len(f.runner.tools) != 0 {
			t.Fatalf("result %+v, events %v, runs %v", b.calls[1].result, f.events.types, f.runner.tools)
		}
	})
	t.Run("parked before", func(t *testing.T) {
		f := newFakePipeline(t, ext)
		f.conts.before = &parked.Parking{Before: true, Batch: &parked.Batch{Results: map[string]bus.Result{}, Waiting: []string{"p1"}, Next: 1}}
		b := f.batchOf(t, "", call("p1", "ext"))
		if b.run(0) || len(f.conts.parked) != 0 {
			t.Fatalf("a re-sent batch parked again: %d", len(f.conts.parked))
		}
		if len(b.parked) != 1 || b.parked[0].ID != "p1" {
			t.Fatalf("reply's parked %+v", b.parked)
		}
	})
	// The first copy's batch finished between the re-sent copy's conflict
	// and its read of the continuation: the copy's reply has the result
	// the call's record holds (docs/protocol.md 3.1), not an empty reply.
	t.Run("continuation gone", func(t *testing.T) {
		f := newFakePipeline(t, ext)
		res := bus.Result{ID: "p1", Name: "ext", State: bus.StateSuccess, Output: bus.Text("answered")}
		f.conts.before = &parked.Parking{Before: true, Parked: []*parked.Record{
			{Session: "s1", Call: bus.Call{ID: "p1", Name: "ext"}, Status: bus.ParkDone, Result: &res}}}
		b := f.batchOf(t, "", call("p1", "ext"))
		if b.run(0) || len(f.conts.parked) != 0 {
			t.Fatalf("a re-sent batch parked again: %d", len(f.conts.parked))
		}
		if r := b.calls[0].result; len(b.parked) != 0 || r == nil || textOf(r.Output) != "answered" {
			t.Fatalf("reply's parked %+v, result %+v", b.parked, r)
		}
	})
}

// TestUnawaitedDone: which batches publish batch.done without awaiting
// the stream (docs/protocol.md 3.4): read-only ones (1.4) and those whose
// every write's ledger record landed before the reply (1.15).
func TestUnawaitedDone(t *testing.T) {
	tool := func(def bus.ToolDef) groups.Resolved { return groups.Resolved{Tool: &registry.Tool{Def: def}} }
	ro := tool(bus.ToolDef{Name: "ro", ReadOnly: true})
	w := tool(bus.ToolDef{Name: "w"})
	early := bus.Result{State: bus.StateError}
	for _, tc := range []struct {
		name    string
		targets []groups.Resolved
		early   bool // the second call never ran
		landed  bool // every call's result was the chain's, its ledger record landed (callState.landed)
		events  string
		parked  bool
		cont    bool
		want    bool
	}{
		{"read-only calls", []groups.Resolved{ro, ro}, false, false, "", false, false, true},
		{"search_tools and an unknown tool", []groups.Resolved{{Search: true}, {Code: bus.CodeUnknownTool}}, false, false, "", false, false, true},
		{"a write whose record did not land at once (or a duplicate's, or a cancel's result)", []groups.Resolved{ro, w}, false, false, "", false, false, false},
		{"a write that never ran", []groups.Resolved{ro, w}, true, false, "", false, false, true},
		{"a durable read-only tool", []groups.Resolved{tool(bus.ToolDef{Name: "d", ReadOnly: true, Durable: true})}, false, false, "", false, false, false},
		{"reset_tools", []groups.Resolved{{Reset: true}}, false, false, "", false, false, false},
		{"a request-scoped external tool", []groups.Resolved{{External: &groups.RequestTool{}}}, false, false, "", false, false, false},
		{"events calls", []groups.Resolved{ro}, false, false, bus.EventsCalls, false, false, false},
		{"parked", []groups.Resolved{ro}, false, false, "", true, false, false},
		{"a continuation", []groups.Resolved{ro}, false, false, "", false, true, false},

		{"a landed write", []groups.Resolved{w}, false, true, "", false, false, true},
		{"landed writes beside read-only calls", []groups.Resolved{ro, w, w}, false, true, "", false, false, true},
		{"a landed write beside a write that never ran", []groups.Resolved{w, w}, true, true, "", false, false, true},
		{"a durable write", []groups.Resolved{tool(bus.ToolDef{Name: "d", Durable: true})}, false, true, "", false, false, false},
		{"an external tool's definition", []groups.Resolved{tool(bus.ToolDef{Name: "x", External: true})}, false, true, "", false, false, false},
		{"a landed write and reset_tools", []groups.Resolved{w, {Reset: true}}, false, true, "", false, false, false},
		{"a landed write, events calls", []groups.Resolved{w}, false, true, bus.EventsCalls, false, false, false},
		{"a landed write, parked", []groups.Resolved{w}, false, true, "", true, false, false},
		{"a landed write of a continuation", []groups.Resolved{w}, false, true, "", false, true, false},
		{"a landed mark on an unknown tool's call", []groups.Resolved{{Code: bus.CodeUnknownTool}, w}, false, true, "", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &batch{start: time.Now()}
			b.data.Events = tc.events
			for i, r := range tc.targets {
				c := &callState{target: r, landed: tc.landed}
				if tc.early && i == 1 {
					c.early = &early
				}
				b.calls = append(b.calls, c)
			}
			if tc.parked {
				b.parked = []bus.Parked{{ID: "p"}}
			}
			if tc.cont {
				b.start = time.Time{}
			}
			if got := unawaitedDone(b); got != tc.want {
				t.Errorf("unawaitedDone = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestExecMsgMode: binary mode when every live worker takes it, else
// structured (docs/protocol.md 5.1); both decode to the same event.
func TestExecMsgMode(t *testing.T) {
	e, err := bus.NewEvent(bus.TypeExec, "toolbus/router/r1", bus.ExecRequest{Call: call("c1", "echo"), Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID, e.ReplyID, e.ToolCallID, e.ExpiryTime = "s1", "r1", "c1", "2030-01-01T00:00:00Z"
	for _, form := range []bus.ExecForm{bus.ExecStructured, bus.ExecBinary, bus.ExecCompact} {
		x := requestReply{subj: bus.NewSubjects(""), workers: execForm(form)}
		sent := 0
		x.sendExec("echo", e, func(m *nats.Msg) {
			sent++
			_, full := m.Header[bus.HeaderContentType]
			if m.Subject != "toolbus.exec.echo" || bus.IsBinary(m.Header) != (form != bus.ExecStructured) || full != (form != bus.ExecCompact) {
				t.Fatalf("form %d: subject %s, header %v", form, m.Subject, m.Header)
			}
			got, err := bus.Decode(m)
			if err != nil || got.ID != e.ID || got.ToolCallID != "c1" || string(got.Data) != string(e.Data) {
				t.Fatalf("form %d: decoded %+v, %v", form, got, err)
			}
		})
		if sent != 1 {
			t.Fatalf("form %d: sent %d times", form, sent)
		}
	}
}

// execForm is the exec form every live worker of a tool reads.
type execForm bus.ExecForm

func (f execForm) ExecForm(string) bus.ExecForm { return bus.ExecForm(f) }

// TestRepairHonoursCancel: a router that takes over the continuation of a
// dead router does not run again a call of its last run that the agent
// cancelled meanwhile (docs/protocol.md 3.5, 6.1): it ends interrupted.
func TestRepairHonoursCancel(t *testing.T) {
	f := newFakePipeline(t, bus.ToolDef{Name: "ext", External: true}, bus.ToolDef{Name: "echo", ReadOnly: true, ConcurrencySafe: true})
	cont := &parked.Batch{Session: "s1", ReplyID: "r1", Data: bus.Batch{Calls: []bus.Call{call("p1", "ext"), call("c2", "echo")}},
		Results: map[string]bus.Result{"p1": bus.InterruptedResult(call("p1", "ext"))}, Waiting: []string{"p1"}, Next: 2,
		Phase: parked.PhaseResumed, Owner: "router-b", Cancelled: []string{"*"}}
	r := &continuations{pipe: f.p, batches: &runningBatches{}}
	r.repair(cont)
	if len(f.runner.tools) != 0 {
		t.Fatalf("a cancelled call ran again: %v", f.runner.tools)
	}
	if !slices.Contains(f.events.types, "call.result:c2") {
		t.Fatalf("no interrupted result for the cancelled call: %v", f.events.types)
	}
}

// TestRunningBatchesCopies: every copy of one reply id running here is
// reached (docs/protocol.md 3.1, 3.5), whichever leaves first.
func TestRunningBatchesCopies(t *testing.T) {
	f := newFakePipeline(t)
	a, b, c := f.batchOf(t, "", call("c1", "x")), f.batchOf(t, "", call("c1", "x")), f.batchOf(t, "", call("c1", "x"))
	var rb runningBatches
	for _, x := range []*batch{a, b, b, c} {
		rb.track(x)
	}
	if got := rb.running("s1", "r1"); len(got) != 3 || got[0] != a || got[1] != b || got[2] != c {
		t.Fatalf("running %v", got)
	}
	rb.untrack(a) // the first leaves: the others stay reachable
	if got := rb.running("s1", "r1"); len(got) != 2 || got[0] != b || got[1] != c {
		t.Fatalf("after the first left: %v", got)
	}
	rb.untrack(c)
	rb.untrack(c)
	if got := rb.running("s1", "r1"); len(got) != 1 || got[0] != b {
		t.Fatalf("after the last left: %v", got)
	}
	rb.untrack(b)
	if got := rb.running("s1", "r1"); got != nil || len(rb.m) != 0 || len(rb.more) != 0 {
		t.Fatalf("after all left: %v %v %v", got, rb.m, rb.more)
	}
}

// TestNewBatchTouchesItsSnapshot: a new batch touches the session it runs
// in, as its snapshot read it (no second read); a continuation does not.
func TestNewBatchTouchesItsSnapshot(t *testing.T) {
	for _, cont := range []bool{false, true} {
		f := newFakePipeline(t, bus.ToolDef{Name: "echo", ReadOnly: true})
		b := f.batchOf(t, "", call("c1", "echo"))
		if cont {
			b.start = time.Time{}
		}
		if !b.run(0) {
			t.Fatal("batch did not complete")
		}
		want := []*groups.Session{f.sessions.sess}
		if cont {
			want = nil
		}
		if !slices.Equal(f.sessions.touched, want) {
			t.Errorf("continuation %v: touched %v, want %v", cont, f.sessions.touched, want)
		}
	}
}
