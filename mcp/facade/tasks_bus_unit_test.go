package facade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
)

// fakeBusTasks answers each Get or Wait with the next of answers.
type fakeBusTasks struct {
	mu      sync.Mutex
	answers []fakeAnswer
}

type fakeAnswer struct {
	task bus.Task
	out  []bus.Block
	err  error
}

func (f *fakeBusTasks) next() (bus.Task, error) {
	a := f.answer()
	return a.task, a.err
}

func (f *fakeBusTasks) answer() fakeAnswer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.answers) == 0 {
		return fakeAnswer{err: errors.New("fake: no more answers")}
	}
	a := f.answers[0]
	f.answers = f.answers[1:]
	return a
}

func (f *fakeBusTasks) Get(context.Context, string, string) (bus.Task, error) { return f.next() }

func (f *fakeBusTasks) Wait(context.Context, string, time.Duration, ...string) ([]bus.Task, error) {
	t, err := f.next()
	if err != nil {
		return nil, err
	}
	return []bus.Task{t}, nil
}

func (f *fakeBusTasks) Cancel(context.Context, string, string) (bus.Task, error) { return f.next() }

func (f *fakeBusTasks) Output(context.Context, string, string) (bus.Task, []bus.Block, error) {
	a := f.answer()
	return a.task, a.out, a.err
}

func TestBusTaskFollowUnit(t *testing.T) {
	mine := bus.Task{ID: "k1", ReplyID: "r1", CallID: "c1", State: bus.StateBackground}
	done := mine
	done.State, done.Result = bus.StateSuccess, &bus.Result{ID: "c1", State: bus.StateSuccess, Output: bus.Text("out")}
	other := mine
	other.CallID = "c2"
	noResult := mine
	noResult.State = bus.StateSuccess
	lost := errors.New("nats: timeout")
	refused := &bus.Error{Code: bus.CodeUnknownTask, Message: "no such task"}
	for _, c := range []struct {
		name    string
		answers []fakeAnswer
		wantErr string
	}{
		{"ends", []fakeAnswer{{task: mine}, {task: done}}, ""},
		{"no answer, asked again", []fakeAnswer{{err: lost}, {err: lost}, {task: done}}, ""},
		{"unknown task", []fakeAnswer{{err: refused}}, "no such task"},
		{"another call", []fakeAnswer{{task: other}}, "not the task's call"},
		{"ended without a result", []fakeAnswer{{task: noResult}}, "without a result"},
	} {
		t.Run("await "+c.name, func(t *testing.T) {
			res, err := awaitBusTask(t.Context(), &fakeBusTasks{answers: c.answers}, "s", "k1", "r1", "c1")
			if c.wantErr == "" && (err != nil || res == nil || res.State != bus.StateSuccess) {
				t.Fatalf("%+v %v", res, err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("%+v %v, want %q", res, err, c.wantErr)
			}
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	forever := make([]fakeAnswer, 1000)
	for i := range forever {
		forever[i] = fakeAnswer{task: mine}
	}
	if _, err := awaitBusTask(ctx, &fakeBusTasks{answers: forever}, "s", "k1", "r1", "c1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait past its deadline: %v", err)
	}

	r := &taskRecord{Session: "s", ReplyID: "r1", CallID: "c1"}
	for _, c := range []struct {
		name    string
		answers []fakeAnswer
		wantErr string
	}{
		{"its call", []fakeAnswer{{task: mine}}, ""},
		{"no answer, then its call", []fakeAnswer{{err: lost}, {task: mine}}, ""},
		{"never an answer", []fakeAnswer{{err: lost}, {err: lost}, {err: lost}}, "nats: timeout"},
		{"another call", []fakeAnswer{{task: other}}, "not the task's call"},
		{"nothing", []fakeAnswer{{task: bus.Task{}}}, "not the task's call"},
		{"refused", []fakeAnswer{{err: refused}}, "no such task"},
	} {
		t.Run("check "+c.name, func(t *testing.T) {
			err := checkBusTask(t.Context(), &fakeBusTasks{answers: c.answers}, r, "k1")
			if (c.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("%v, want %q", err, c.wantErr)
			}
		})
	}
	for _, c := range []struct {
		name string
		res  *bus.Result
		ok   bool
	}{
		{"handle", &bus.Result{State: bus.StateBackground, Task: &bus.TaskHandle{ID: "k1"}}, true},
		{"no handle", &bus.Result{State: bus.StateBackground}, false},
		{"success with a handle", &bus.Result{State: bus.StateSuccess, Task: &bus.TaskHandle{ID: "k1"}}, false},
		{"bad id", &bus.Result{State: bus.StateBackground, Task: &bus.TaskHandle{ID: "a.>"}}, false},
		{"nil", nil, false},
	} {
		if _, ok := backgrounded(c.res); ok != c.ok {
			t.Errorf("backgrounded %s: %v", c.name, ok)
		}
	}
}

// TestBackgroundResultUnit: a plain tools/call whose call went on as a
// bus task returns the handle as a normal result (its text and the
// handle in _meta); a tool listed with an outputSchema keeps it isError,
// saying it is not a failure (no structuredContent a schema would refuse).
func TestBackgroundResultUnit(t *testing.T) {
	h := bus.TaskHandle{ID: "k1", State: bus.StateBackground, Subject: "toolbus.tasks.s1"}
	r := bus.Result{ID: "c1", Name: "build", State: bus.StateBackground, Output: bus.Text("running in background (id=k1)"), Task: &h}
	res := toMCP(r)
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("handle result: %+v", res)
	}
	if got, ok := handleOf(res); !ok || got != h {
		t.Fatalf("handle in _meta: %+v %v", got, ok)
	}
	raw, err := json.Marshal(res)
	if err != nil || !strings.Contains(string(raw), `"_meta":{"io.toolbus/task":{"id":"k1","state":"background","subject":"toolbus.tasks.s1"}}`) {
		t.Fatalf("wire form: %s %v", raw, err)
	}
	st := structurer{session: "s1"}
	wrapped := st.wrap(func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) { return toMCP(r), nil })
	res, _ = wrapped(t.Context(), mcp.CallToolRequest{})
	if !res.IsError || res.StructuredContent != nil || len(res.Content) != 2 ||
		!strings.Contains(res.Content[0].(mcp.TextContent).Text, "Not a failure") {
		t.Fatalf("handle of a tool with an output schema: %+v", res)
	}
	// Not a handle: unchanged.
	for _, r := range []bus.Result{{State: bus.StateBackground}, {State: bus.StateError, Output: bus.Text("x")}} {
		if res := toMCP(r); !res.IsError || res.Meta != nil {
			t.Errorf("%s without a handle: %+v", r.State, res)
		}
	}
}

// TestWithOutputUnit: tasks/get's status message shows the bus task's
// output so far, its last maxStatusOutput bytes; nothing when the bus
// task is not the record's call or the verb fails; a read serves the
// tasks/get that come within outputEvery.
func TestWithOutputUnit(t *testing.T) {
	mine := bus.Task{ID: "k1", ReplyID: "r1", CallID: "c1", State: bus.StateBackground}
	long := strings.Repeat("é", maxStatusOutput) // two bytes a rune
	f := &fakeBusTasks{answers: []fakeAnswer{
		{task: mine, out: append(bus.Text("step 1"), bus.Text("step 2")...)},
		{task: mine, out: bus.Text(long)},
		{task: bus.Task{ID: "k3", ReplyID: "r2", CallID: "c1"}, out: bus.Text("not mine")},
		{err: errors.New("no router")},
	}}
	tr := &taskRunners{tasks: f}
	rec := func(busTask string) *taskRecord {
		return &taskRecord{Session: "s1", ReplyID: "r1", CallID: "c1", BusTask: busTask, Status: mcp.TaskStatusWorking, Message: "running"}
	}
	for range 2 { // the second within outputEvery: the same read
		if got := tr.withOutput(t.Context(), rec("k1")); got != "running; output so far: step 1\nstep 2" {
			t.Errorf("output so far: %q", got)
		}
	}
	got := tr.withOutput(t.Context(), rec("k2"))
	if shown := strings.TrimPrefix(got, "running; output so far: …"); len(shown) > maxStatusOutput || !utf8.ValidString(shown) || shown == got {
		t.Errorf("bounded output: %d bytes, valid %v", len(shown), utf8.ValidString(shown))
	}
	for i, why := range []string{"another call's task", "a failed verb"} {
		if got := tr.withOutput(t.Context(), rec(fmt.Sprint("k", 3+i))); got != "running" {
			t.Errorf("%s: %q", why, got)
		}
	}
	if got := (&taskRunners{}).withOutput(t.Context(), rec("k1")); got != "running" {
		t.Errorf("no bus tasks: %q", got)
	}
}
