package facade

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// fakeBusTasks answers each Task or WaitTasks with the next of answers.
type fakeBusTasks struct {
	mu      sync.Mutex
	answers []fakeAnswer
}

type fakeAnswer struct {
	task bus.Task
	err  error
}

func (f *fakeBusTasks) next() (bus.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.answers) == 0 {
		return bus.Task{}, errors.New("fake: no more answers")
	}
	a := f.answers[0]
	f.answers = f.answers[1:]
	return a.task, a.err
}

func (f *fakeBusTasks) Task(context.Context, string, string) (bus.Task, error) { return f.next() }

func (f *fakeBusTasks) WaitTasks(context.Context, string, time.Duration, ...string) ([]bus.Task, error) {
	t, err := f.next()
	if err != nil {
		return nil, err
	}
	return []bus.Task{t}, nil
}

func (f *fakeBusTasks) CancelTask(context.Context, string, string) (bus.Task, error) { return f.next() }

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
