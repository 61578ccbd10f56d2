package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

// durableDef is a durable, side-effecting tool.
func durableDef(name string) bus.ToolDef {
	return bus.ToolDef{Name: name, Description: "A durable job.", Durable: true, Permission: bus.PermissionAllow,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`), TimeoutMS: 60000}
}

// workLeft is how many durable calls the work queue still holds.
func workLeft(t *testing.T, e *env) uint64 {
	t.Helper()
	js := testkit.JetStream(t, e.nc)
	s, err := js.Stream(t.Context(), e.client.Subjects().Stream(bus.StreamWork))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestDurableCall(t *testing.T) {
	e := newEnv(t, 2)
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		if err := w.Handle(durableDef("job"), func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			runs.Add(1)
			return &bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("done " + string(c.Input))}, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitLive("job")
	rid := client.WithReplyID(client.NewReplyID())
	wantText(t, call1(t, e.client, "d1", "job", `{"n":1}`, rid), bus.StateSuccess, "", `done {"n":1}`)
	// Once, or not at all: on a loaded cluster the job may expire before
	// any worker takes it (TestOnCluster/DurableTimeout saw 0 beside a
	// CPU burner). Never twice.
	if n := runs.Load(); n > 1 {
		t.Fatalf("the handler ran %d times, want at most 1", n)
	}
	// A re-sent batch gets the recorded result and runs nothing again.
	wantText(t, call1(t, e.client, "d1", "job", `{"n":1}`, rid), bus.StateSuccess, "", `done {"n":1}`)
	if n := runs.Load(); n != 1 {
		t.Fatalf("a re-sent durable call ran again (%d runs)", n)
	}
	// The call left the queue once its result was recorded.
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		if n := workLeft(t, e); n != 0 {
			return fmt.Errorf("the work queue holds %d calls", n)
		}
		return nil
	})
}

// TestDurableRedeliveredToItsRunner: JetStream delivers a durable call
// again to the worker that still runs it (its progress reports came later
// than AckWait: here the consumer's AckWait is cut to 500 ms under a worker
// that reports every 10 s); the worker does not run it a second time, the
// run under way acknowledges the stream message, and the agent gets its
// one result.
func TestDurableRedeliveredToItsRunner(t *testing.T) {
	e := newEnv(t, 1)
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		if err := w.Handle(durableDef("job"), func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			if runs.Add(1) == 1 {
				close(started)
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("ran")}, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitLive("job")
	done := make(chan bus.Result, 1)
	go func() { done <- call1(t, e.client, "d3", "job", `{"n":3}`) }()
	<-started
	js := testkit.JetStream(t, e.nc)
	stream, name := e.client.Subjects().Stream(bus.StreamWork), e.client.Subjects().Workers.WorkConsumer("job")
	cons, err := js.Consumer(t.Context(), stream, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.AckWait = 500 * time.Millisecond
	if _, err := js.UpdateConsumer(t.Context(), stream, cfg); err != nil {
		t.Fatal(err)
	}
	// The server delivers the call again (more than once while it runs):
	// wait until it has, then let the run end.
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		info, err := cons.Info(t.Context())
		if err != nil {
			return err
		}
		if info.NumRedelivered == 0 {
			return fmt.Errorf("not delivered again yet (%+v)", info.Delivered)
		}
		return nil
	})
	close(release)
	wantText(t, <-done, bus.StateSuccess, "", "ran")
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		if n := workLeft(t, e); n != 0 {
			return fmt.Errorf("the work queue holds %d calls", n)
		}
		return nil
	})
}

// TestDurableRedeliveredAfterWorkerKilled kills the worker that runs a
// durable call: once its progress reports stop, JetStream delivers the call
// to another worker, which runs it to completion; the agent gets one result.
//
// WorkAckWait 3 s (30 s by default): the second worker's progress reports go
// every second, so only a stall of three seconds delivers the call to it a
// second time while it runs it (at 1 s, CI at load 20 saw it run twice).
func TestDurableRedeliveredAfterWorkerKilled(t *testing.T) {
	e := startEnv(t, 1, onCluster(t), router.Config{Logger: testLogger(), Store: store.Config{WorkAckWait: 3 * time.Second}})
	started := make(chan struct{})
	release := make(chan struct{}) // lets the dead worker's handler end before the deployment closes
	t.Cleanup(func() { close(release) })
	var once sync.Once
	var firstRuns, secondRuns atomic.Int32
	firstNC := e.connect(t)
	e.addWorkerOn(firstNC, func(w *worker.Worker) {
		if err := w.Handle(durableDef("job"), func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			firstRuns.Add(1)
			once.Do(func() { close(started) })
			select { // hangs: its worker dies under it
			case <-ctx.Done():
			case <-release:
			}
			return nil, ctx.Err()
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitLive("job")
	type outcome struct {
		res bus.Result
		err error
	}
	done := make(chan outcome, 1)
	replyID := client.NewReplyID()
	go func() {
		reply, err := e.client.Call(testCtx(t), "d2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "job", Input: json.RawMessage(`{"n":2}`)}}},
			client.WithReplyID(replyID))
		if err != nil {
			done <- outcome{err: err}
			return
		}
		done <- outcome{res: reply.Results[0]}
	}()
	select {
	case <-started:
	case <-time.After(bound):
		t.Fatal("the first worker never got the call")
	}
	// The second worker comes up while the first holds the call, then the
	// first dies without a word.
	e.addWorker(func(w *worker.Worker) {
		if err := w.Handle(durableDef("job"), func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			secondRuns.Add(1)
			return &bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("finished by the second worker")}, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	firstNC.Close()
	var got outcome
	select {
	case got = <-done:
	case <-time.After(3 * bound):
		t.Fatal("the durable call never finished after its worker died")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	wantText(t, got.res, bus.StateSuccess, "", "finished by the second worker")
	if f, s := firstRuns.Load(), secondRuns.Load(); f != 1 || s != 1 {
		t.Fatalf("runs: first worker %d, second %d; want 1 and 1", f, s)
	}
	// One result for the call in the session's events: batch.done's, and no
	// call.result, the result came back in the reply (docs/protocol.md 3.4).
	rp, err := e.client.Replay(testCtx(t), "d2")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, rp.Stop)
	evs := collect(t, rp, batchDone(replyID))
	n := 0
	for _, ev := range evs {
		if ev.Type == bus.TypeCallResult && ev.ToolCallID == "c1" {
			n++
		}
	}
	if n != 0 {
		t.Fatalf("%d call.result events for the call, want none", n)
	}
	if last := evs[len(evs)-1]; last.Type != bus.TypeBatchDone {
		t.Fatalf("last event %s, want batch.done", last.Type)
	}
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		if n := workLeft(t, e); n != 0 {
			return fmt.Errorf("the work queue holds %d calls", n)
		}
		return nil
	})
}

// TestDurableTimeout: a durable call nobody finishes in time ends with a
// timeout, and a worker that comes later never runs it.
func TestDurableTimeout(t *testing.T) {
	e := newEnv(t, 1)
	def := durableDef("slowjob")
	def.TimeoutMS = 1000
	block := make(chan struct{})
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		if err := w.Handle(def, func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			runs.Add(1)
			select {
			case <-block:
				return &bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("late")}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitLive("slowjob")
	rid := client.WithReplyID(client.NewReplyID())
	res := call1(t, e.client, "d3", "slowjob", `{}`, rid)
	if res.Error == nil || res.Error.Code != bus.CodeTimeout {
		t.Fatalf("result %+v, want a timeout", res)
	}
	close(block)
	// The late result is refused; a re-send gets the timeout again.
	again := call1(t, e.client, "d3", "slowjob", `{}`, rid)
	if again.Error == nil || again.Error.Code != bus.CodeTimeout {
		t.Fatalf("re-sent: %+v, want the recorded timeout", again)
	}
	// Once, or not at all: on a loaded cluster the job may expire before
	// any worker takes it (TestOnCluster/DurableTimeout saw 0 beside a
	// CPU burner). Never twice.
	if n := runs.Load(); n > 1 {
		t.Fatalf("the handler ran %d times, want at most 1", n)
	}
}
