package router

import (
	"context"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
)

func TestCheckQuery(t *testing.T) {
	many := make([]string, bus.MaxTaskIDs+1)
	for i := range many {
		many[i] = "t"
	}
	tests := []struct {
		q       bus.TaskQuery
		err     string // "" accepted
		timeout int64  // the bounded wait
	}{
		{q: bus.TaskQuery{Op: bus.TaskList}},
		{q: bus.TaskQuery{Op: bus.TaskList, IDs: []string{"a"}}, err: "list takes no ids"},
		{q: bus.TaskQuery{Op: bus.TaskGet}, err: "get takes 1 to 16"},
		{q: bus.TaskQuery{Op: bus.TaskWait, IDs: many}, err: "wait takes 1 to 16"},
		{q: bus.TaskQuery{Op: bus.TaskWait, IDs: []string{"a"}}, timeout: bus.DefaultTaskWait},
		{q: bus.TaskQuery{Op: bus.TaskWait, IDs: []string{"a"}, TimeoutMS: 1 << 40}, timeout: bus.MaxTaskWaitMS},
		{q: bus.TaskQuery{Op: bus.TaskGet, IDs: []string{"a"}, TimeoutMS: 5000}, timeout: 0},
		{q: bus.TaskQuery{Op: bus.TaskCancel, IDs: []string{"a", "b"}}, err: "exactly one"},
		{q: bus.TaskQuery{Op: bus.TaskOutput, IDs: []string{"a.b"}}, err: "invalid task id"},
		{q: bus.TaskQuery{Op: "delete", IDs: []string{"a"}}, err: "unknown task verb"},
	}
	for _, tt := range tests {
		q := tt.q
		err := checkQuery(&q)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%+v: %v", tt.q, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !isCode(err, bus.CodeBadRequest)):
			t.Errorf("%+v: got %v, want %q", tt.q, err, tt.err)
		case tt.err == "" && q.TimeoutMS != tt.timeout:
			t.Errorf("%+v: wait %d, want %d", tt.q, q.TimeoutMS, tt.timeout)
		}
	}
}

func isCode(err error, code string) bool {
	be, ok := err.(*bus.Error)
	return ok && be.Code == code
}

func TestMayBackground(t *testing.T) {
	tests := []struct {
		def  bus.ToolDef
		ask  bool
		want bool
	}{
		{def: bus.ToolDef{}, want: false},
		{def: bus.ToolDef{}, ask: true, want: true},
		{def: bus.ToolDef{Background: true}, want: true},
		{def: bus.ToolDef{Background: true, External: true}, want: false},
		{def: bus.ToolDef{Background: true, StateInjected: true}, ask: true, want: false},
		{def: bus.ToolDef{ReadOnly: true, CacheTTLMS: 1000}, ask: true, want: false},
		{def: bus.ToolDef{NoBackground: true}, ask: true, want: false}, // 1.12: the author keeps the timeout
		{def: bus.ToolDef{NoBackground: true}, want: false},
	}
	for _, tt := range tests {
		j := &job{call: bus.Call{Background: tt.ask}, tool: &registry.Tool{Def: tt.def}}
		if got := mayBackground(j); got != tt.want {
			t.Errorf("%+v ask=%v: %v", tt.def, tt.ask, got)
		}
	}
}

// TestFlightWait: a copy waiting for a run on its router gets the run's
// outcome, a copy of it it may change; a cancel of its own batch ends its
// wait interrupted; its own deadline does not end the wait.
func TestFlightWait(t *testing.T) {
	c := bus.Call{ID: "c1", Name: "slow"}
	outcome := bus.Result{ID: "c1", Name: "slow", State: bus.StateBackground, Output: bus.Text("running"),
		Task: &bus.TaskHandle{ID: "t1", State: bus.StateBackground}}

	f := &flight{done: make(chan struct{})}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if r := f.wait(cancelled, c); r.Error == nil || r.Error.Code != bus.CodeInterrupted {
		t.Fatalf("a cancelled copy's wait: %+v", r)
	}

	expired, stop := context.WithTimeout(t.Context(), 0)
	defer stop()
	got := make(chan bus.Result, 1)
	go func() { got <- f.wait(expired, c) }()
	<-expired.Done()
	f.res = outcome
	close(f.done)
	r := <-got
	if r.State != bus.StateBackground || r.Task == nil || r.Task.ID != "t1" {
		t.Fatalf("a copy past its deadline: %+v", r)
	}
	r.Task.State, r.Output[0].Text = "changed", "changed"
	if outcome.Task.State != bus.StateBackground || outcome.Output[0].Text != "running" {
		t.Fatalf("a copy's change reached the run's outcome: %+v", outcome)
	}
	if r := f.wait(cancelled, c); r.Task == nil || r.Task.ID != "t1" {
		t.Fatalf("a cancelled copy of a run that ended: %+v", r)
	}
}
