package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// runningTools adds, on a worker of d: fast (returns at once), slow (read
// only; the first blocks until release gives it a token or closes, and
// entered gets it) and held (a
// call that parks: its permission asks).
func runningTools(t *testing.T, d *xtest.Deployment, entered chan string, release chan struct{}, runs *atomic.Int32) {
	t.Helper()
	schema := json.RawMessage(`{"type":"object","properties":{}}`)
	ok := func(c *worker.Call) *bus.ExecResult {
		return &bus.ExecResult{Output: []bus.Block{{Type: "text", Text: c.ID}}}
	}
	_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		for _, def := range []struct {
			def bus.ToolDef
			h   worker.Handler
		}{
			{bus.ToolDef{Name: "fast", ReadOnly: true, ConcurrencySafe: true, Permission: bus.PermissionAllow},
				func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) { return ok(c), nil }},
			{bus.ToolDef{Name: "slow", ReadOnly: true, ConcurrencySafe: true, NoBackground: true, Permission: bus.PermissionAllow},
				func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
					if runs.Add(1) == 1 {
						entered <- c.ID
						select {
						case <-release:
						case <-ctx.Done():
						}
					}
					return ok(c), nil
				}},
			{bus.ToolDef{Name: "held", ConcurrencySafe: true, Permission: bus.PermissionAsk},
				func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) { return ok(c), nil }},
		} {
			def.def.Description, def.def.InputSchema = "Test tool "+def.def.Name+".", schema
			if err := w.Handle(def.def, def.h); err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), "fast", "slow", "held"); err != nil {
		t.Fatal(err)
	}
}

// runningRig is a router noticing after first, then every 2×first, its
// worker (runningTools) and a client connection.
func runningRig(t *testing.T, first time.Duration) (*xtest.Deployment, chan string, chan struct{}, *atomic.Int32, *nats.Conn) {
	t.Helper()
	d := xtest.Run(t, xtest.Config{Routers: 1, Router: router.Config{Notices: router.Notices{First: first, Every: 2 * first}}})
	entered, release := make(chan string, 4), make(chan struct{})
	t.Cleanup(func() { close(release) })
	runs := new(atomic.Int32)
	runningTools(t, d, entered, release, runs)
	nc, err := d.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	return d, entered, release, runs, nc
}

// sendBatch publishes a batch of calls (id:name) as replyID with reply subject reply.
func sendBatch(t *testing.T, nc *nats.Conn, replyID, reply string, calls ...string) {
	t.Helper()
	var b bus.Batch
	for _, c := range calls {
		id, name, _ := strings.Cut(c, ":")
		b.Calls = append(b.Calls, bus.Call{ID: id, Name: name, Input: json.RawMessage(`{}`)})
	}
	e, err := bus.NewEvent(bus.TypeCallBatch, "test/agent", b)
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID = replyID, "s1"
	m, err := e.Msg(bus.NewSubjects("").Call("s1"))
	if err != nil {
		t.Fatal(err)
	}
	m.Reply = reply
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}

// running is a notice's list, or nil when m is not a notice.
func running(t *testing.T, m *nats.Msg) []string {
	t.Helper()
	if !strings.HasSuffix(m.Subject, bus.RunningSuffix) {
		return nil
	}
	e, err := bus.Decode(m)
	if err != nil || e.Type != bus.TypeCallRunning || e.ReplyID == "" {
		t.Fatalf("a notice that is not io.toolbus.call.running: %v %+v", err, e)
	}
	var d struct{ Running []string }
	if err := e.DataAs(&d); err != nil || d.Running == nil {
		t.Fatalf("notice data %s: %v", e.Data, err)
	}
	return d.Running
}

// TestRunningNotices: a batch whose read-only call runs for many notice
// periods gets notices on its reply subject + .running naming the calls
// still running (not the finished one, not the parked one), and none once
// its reply came; a draining router sends no more.
func TestRunningNotices(t *testing.T) {
	d, entered, release, runs, nc := runningRig(t, 30*time.Millisecond)
	msgs := make(chan *nats.Msg, 4096) // one subscription: the reply and its notices in order
	if _, err := nc.ChanSubscribe("_INBOX.run.>", msgs); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sendBatch(t, nc, "r1", "_INBOX.run.r1", "c1:fast", "c2:held", "c3:slow")
	testkit.Recv(t, entered, 30*time.Second, "the slow call")
	// Until c2 parked and c1 finished a notice may list them; from the
	// first that lists c3 alone on, each does (a batch's notices go out in
	// the order they were made).
	for n := 0; n < 3; {
		m := testkit.Recv(t, msgs, 30*time.Second, "a notice")
		got := running(t, m)
		switch {
		case m.Subject != "_INBOX.run.r1"+bus.RunningSuffix:
			t.Fatalf("%s before r1's reply", m.Subject)
		case slices.Equal(got, []string{"c3"}):
			n++
		case n > 0:
			t.Fatalf("after [c3]: %v", got)
		}
	}
	release <- struct{}{}
	for m := testkit.Recv(t, msgs, 30*time.Second, "the reply"); m.Subject != "_INBOX.run.r1"; m = testkit.Recv(t, msgs, 30*time.Second, "the reply") {
		running(t, m)
	}
	// Another slow batch: once two of its notices are seen, the periods
	// passed twice over since r1's reply, and nothing more of r1 came.
	runs.Store(0) // the next slow call blocks again
	sendBatch(t, nc, "r3", "_INBOX.run.r3", "c1:slow")
	testkit.Recv(t, entered, 30*time.Second, "r3's slow call")
	for n := 0; n < 2; n++ {
		if m := testkit.Recv(t, msgs, 30*time.Second, "r3's notice"); m.Subject != "_INBOX.run.r3"+bus.RunningSuffix {
			t.Fatalf("%s after r1's reply", m.Subject)
		}
	}
	// Drain: once the router takes no batch (no responders), no notice.
	go func() { _ = d.Routers[0].Drain(context.WithoutCancel(t.Context())) }()
	testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		_, err := nc.Request(bus.NewSubjects("").Call("s2"), []byte("{}"), time.Second)
		if err == nil || !strings.Contains(err.Error(), "no responders") {
			return errors.New("the router still takes batches")
		}
		return nil
	})
	for len(msgs) > 0 { // sent before the drain began: they preceded the 503
		<-msgs
	}
	window := time.After(10 * 60 * time.Millisecond) // ten periods: no notice may come
	select {
	case m := <-msgs:
		t.Fatalf("%s while the router drains", m.Subject)
	case <-window:
	}
}

// TestNoNoticesForFastBatches: batches answered before the first notice
// (2 s, the default) get none: each one's first message is its reply.
func TestNoNoticesForFastBatches(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1})
	runningTools(t, d, make(chan string, 1), make(chan struct{}), new(atomic.Int32))
	nc, err := d.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan *nats.Msg, 64)
	if _, err := nc.ChanSubscribe("_INBOX.fast.>", msgs); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		reply := fmt.Sprintf("_INBOX.fast.%d", i)
		sendBatch(t, nc, fmt.Sprintf("f%d", i), reply, "c1:fast", "c2:fast")
		if m := testkit.Recv(t, msgs, 30*time.Second, "the reply"); m.Subject != reply {
			t.Fatalf("%s before the reply on %s", m.Subject, reply)
		}
	}
}

// TestResendAfterRouterLoss: the real case. A read-only call blocks in its
// tool on router A; A dies abruptly (its connection closed, no drain). The
// client's re-send after silence runs on router B and the call returns
// long before its timeout: two executions (the lost one and B's), one reply.
func TestResendAfterRouterLoss(t *testing.T) {
	d, entered, _, runs, nc := runningRig(t, 50*time.Millisecond)
	watch, err := d.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	inbox := make(chan *nats.Msg, 1<<16) // in order, in the connection's reader: counted once flushed
	if _, err := watch.ChanSubscribe("_INBOX.>", inbox); err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	c := client.New(nc, client.Config{Source: "test/agent", Resend: client.Resend{First: 500 * time.Millisecond, AfterNotice: time.Second}})
	type out struct {
		rep *bus.Reply
		err error
	}
	done := make(chan out, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		rep, err := c.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "slow", Input: json.RawMessage(`{}`)}}}, client.WithReplyID("lost1"))
		done <- out{rep, err}
	}()
	testkit.Recv(t, entered, 30*time.Second, "the call on router A")
	if _, err := d.AddRouter(t.Context()); err != nil { // B, after A took the batch
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), "slow"); err != nil {
		t.Fatal(err)
	}
	d.RouterConns[0].Close() // A dies: no drain, no reply
	got := testkit.Recv(t, done, 60*time.Second, "the call's end")
	if got.err != nil || len(got.rep.Results) != 1 || got.rep.Results[0].State != bus.StateSuccess {
		t.Fatalf("%+v, %v", got.rep, got.err)
	}
	if el := time.Since(start); el > time.Minute {
		t.Fatalf("the call took %v", el)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d executions, want 2 (the lost one and B's)", n)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	replies := 0
	for len(inbox) > 0 {
		if e, err := bus.Decode(<-inbox); err == nil && e.Type == bus.TypeCallReply && e.ReplyID == "lost1" {
			replies++
		}
	}
	if n := replies; n != 1 {
		t.Fatalf("%d replies, want 1", n)
	}
}
