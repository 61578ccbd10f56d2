package router

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/registry"
)

// fakeParked counts what answers asks of the parked calls.
type fakeParked struct {
	cont      *parked.Batch
	getErr    error
	resume    bool
	gets      int
	completes []bus.Result
	mends     []bus.Result
}

func (f *fakeParked) Answer(context.Context, string, string, *bus.Answer, parked.Decide) (parked.Answered, error) {
	return parked.Answered{}, errors.New("not used")
}
func (f *fakeParked) Taken(string, string) int { return 0 }
func (f *fakeParked) Continuation(context.Context, *parked.Record) (*parked.Batch, error) {
	f.gets++
	return f.cont, f.getErr
}
func (f *fakeParked) Resume(_ context.Context, _ *parked.Record, res bus.Result, report func(*parked.Batch)) (*parked.Batch, bool, error) {
	f.gets++ // Resume reads the continuation for the event's trace and the batch
	report(f.cont)
	f.completes = append(f.completes, res)
	return f.cont, f.resume, nil
}
func (f *fakeParked) Mend(_ context.Context, _ *parked.Record, res bus.Result, report func(*parked.Batch)) (*parked.Batch, bool, error) {
	f.gets++
	report(f.cont)
	f.mends = append(f.mends, res)
	return f.cont, f.resume, nil
}

func (f *fakeParked) Parked(string, string) []*parked.Record { return nil }

// fakeTools counts registry lookups.
type fakeTools struct {
	tools   map[string]*registry.Tool
	lookups int
}

func (f *fakeTools) Lookup(name string) (*registry.Tool, bool) {
	f.lookups++
	t, ok := f.tools[name]
	return t, ok
}
func (f *fakeTools) Live(*registry.Tool) bool { return true }

type fakeRules struct{}

func (fakeRules) Update(context.Context, string, func(*groups.Session) error) (*groups.Session, error) {
	return nil, nil
}
func (fakeRules) Session(string) *groups.Session { return nil }

// One answer, one registry lookup and one continuation read (in Resume),
// two for a confirmed call (its run reads it first), for every verdict: the answer is the result (Done), the call waits again
// (Repark: parked.Answer parked it again, nothing is reported), or it
// runs; Resume when it was the last one awaited.
func TestSettle(t *testing.T) {
	yes, no := true, false
	call := bus.Call{ID: "c1", Name: "tool", Input: []byte(`{}`)}
	cont := &parked.Batch{Session: "s", ReplyID: "r", Data: bus.Batch{Calls: []bus.Call{call}}}
	ran := bus.Result{ID: "c1", Name: "tool", State: bus.StateSuccess, Output: bus.Text("ran")}
	for _, tc := range []struct {
		name     string
		kind     string
		answer   bus.Answer
		tool     *registry.Tool // nil: not registered
		getErr   error
		resume   bool
		verdict  parked.Verdict
		code     string // the completed result's error code ("" success)
		text     string
		gets     int
		runs     int
		resumed  bool
		complete bool
	}{
		{name: "external result: done", kind: bus.KindExternal, answer: bus.Answer{State: bus.StateSuccess, Output: bus.Text("out")},
			tool: &registry.Tool{Def: bus.ToolDef{Name: "tool", External: true}}, verdict: parked.Done, text: "out", gets: 1, complete: true},
		{name: "external error: done, tool_error", kind: bus.KindExternal, answer: bus.Answer{State: bus.StateError, Output: bus.Text("bad")},
			verdict: parked.Done, code: bus.CodeToolError, gets: 1, complete: true},
		{name: "denied: done", kind: bus.KindConfirm, answer: bus.Answer{Confirmed: &no, Reason: "not now"},
			tool: &registry.Tool{Def: bus.ToolDef{Name: "tool"}}, verdict: parked.Done, code: bus.CodeDenied, gets: 1, complete: true},
		{name: "confirmed, external tool: repark", kind: bus.KindConfirm, answer: bus.Answer{Confirmed: &yes},
			tool: &registry.Tool{Def: bus.ToolDef{Name: "tool", External: true}}, verdict: parked.Repark},
		{name: "confirmed: run", kind: bus.KindConfirm, answer: bus.Answer{Confirmed: &yes},
			tool: &registry.Tool{Def: bus.ToolDef{Name: "tool"}}, verdict: parked.Confirmed, text: "ran", gets: 2, runs: 1, complete: true},
		{name: "confirmed, last awaited: run and resume", kind: bus.KindConfirm, answer: bus.Answer{Confirmed: &yes}, resume: true,
			tool: &registry.Tool{Def: bus.ToolDef{Name: "tool"}}, verdict: parked.Confirmed, text: "ran", gets: 2, runs: 1, resumed: true, complete: true},
		{name: "confirmed, tool gone: unavailable", kind: bus.KindConfirm, answer: bus.Answer{Confirmed: &yes},
			verdict: parked.Confirmed, code: bus.CodeUnavailable, gets: 2, complete: true},
		{name: "confirmed, continuation unreadable: internal", kind: bus.KindConfirm, answer: bus.Answer{Confirmed: &yes}, getErr: errors.New("kv down"),
			tool: &registry.Tool{Def: bus.ToolDef{Name: "tool"}}, verdict: parked.Confirmed, code: bus.CodeInternal, gets: 2, complete: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &parked.Record{Session: "s", ReplyID: "r", Call: call, Kind: tc.kind, Status: bus.ParkAnswered, Answer: &tc.answer}
			if v, _, _ := decideAnswer(rec, &tc.answer, tc.tool); v != tc.verdict {
				t.Errorf("decideAnswer = %v, want %v", v, tc.verdict)
			}
			pk := &fakeParked{cont: cont, getErr: tc.getErr, resume: tc.resume}
			tools := &fakeTools{tools: map[string]*registry.Tool{}}
			if tc.tool != nil {
				tools.tools["tool"] = tc.tool
			}
			runs, resumed := 0, false
			a := &answers{wire: &wire{log: slog.New(slog.DiscardHandler), base: t.Context(),
				landing: func() (context.Context, context.CancelFunc) { return context.WithCancel(t.Context()) }},
				parked: pk, reg: tools, groups: fakeRules{}, confirming: &confirmed{},
				events:  &fakeEvents{},
				runTool: func(context.Context, *job) bus.Result { runs++; return ran },
				resume:  func(*parked.Batch) { resumed = true },
			}
			a.settleTaken(rec) // as a takeover does: it looks the tool up itself
			if tools.lookups != 1 || pk.gets != tc.gets {
				t.Errorf("%d registry lookups and %d continuation reads, want 1 and %d", tools.lookups, pk.gets, tc.gets)
			}
			if runs != tc.runs || resumed != tc.resumed {
				t.Errorf("runs %d, resumed %v; want %d, %v", runs, resumed, tc.runs, tc.resumed)
			}
			if (len(pk.completes) == 1) != tc.complete {
				t.Fatalf("completed %d times, want %v", len(pk.completes), tc.complete)
			}
			if !tc.complete {
				return
			}
			res := pk.completes[0]
			code := ""
			if res.Error != nil {
				code = res.Error.Code
			}
			if code != tc.code || tc.text != "" && textOf(res.Output) != tc.text {
				t.Errorf("result %s %q, want %s %q", code, textOf(res.Output), tc.code, tc.text)
			}
		})
	}
}

// A parked call's call.result has the call's derived id (docs/protocol.md
// 3.4, 1.11), from the router that ended it (complete) as from one that
// mends its batch (mend), and each resumes the batch when told to.
func TestResultEventID(t *testing.T) {
	call := bus.Call{ID: "c1", Name: "tool"}
	res := bus.Result{ID: "c1", Name: "tool", State: bus.StateSuccess, Output: bus.Text("out")}
	rec := &parked.Record{Session: "s", ReplyID: "r", Call: call, Kind: bus.KindExternal, Status: bus.ParkDone, Result: &res}
	for _, mend := range []bool{false, true} {
		pk := &fakeParked{cont: &parked.Batch{Session: "s", ReplyID: "r"}, resume: true}
		ev := &fakeEvents{}
		resumed := 0
		a := &answers{wire: &wire{log: slog.New(slog.DiscardHandler), base: t.Context(),
			landing: func() (context.Context, context.CancelFunc) { return context.WithCancel(t.Context()) }},
			parked: pk, events: ev, resume: func(*parked.Batch) { resumed++ }}
		if mend {
			a.mend(rec)
		} else {
			a.complete(rec, res)
		}
		if want := parked.ResultID("s", "r", "c1"); len(ev.ids) != 1 || ev.ids[0] != want || ev.types[0] != "call.result:c1" {
			t.Fatalf("mend %v: events %v with ids %v, want call.result with %s", mend, ev.types, ev.ids, want)
		}
		if resumed != 1 || len(pk.completes)+len(pk.mends) != 1 || mend != (len(pk.mends) == 1) {
			t.Fatalf("mend %v: resumed %d, %d completes, %d mends", mend, resumed, len(pk.completes), len(pk.mends))
		}
	}
}
