package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// storedOf returns the events the events stream holds for session, in
// stream order (stored, retried while a request fails).
func storedOf(t *testing.T, nc *nats.Conn, session string) []*bus.Event {
	t.Helper()
	var out []*bus.Event
	testkit.CheckFor(t, 3*bound, 50*time.Millisecond, func() (err error) {
		out, err = stored(t, nc, session)
		return err
	})
	return out
}

// typesOf lists the types of the events of replyID, in order, with the
// call id of each call.result.
func typesOf(es []*bus.Event, replyID string) []string {
	var out []string
	for _, e := range es {
		if e.ReplyID != replyID {
			continue
		}
		typ := strings.TrimPrefix(e.Type, "io.toolbus.")
		if e.Type == bus.TypeCallResult {
			typ += ":" + e.ToolCallID
		}
		out = append(out, typ)
	}
	return out
}

// TestRevisionStoredEvents: docs/protocol.md 3.4 on a 3-node cluster with
// the events stream replicated three times. A batch whose results all come
// back in the reply stores exactly one event, batch.done, before the
// reply; "events": "calls" stores a call.result per call, then
// batch.done; a parked call's call.result is stored before the batch's
// batch.done, and only its own (the calls answered in the reply get none).
func TestRevisionStoredEvents(t *testing.T) {
	e := startEnv(t, 2, true, router.Config{})
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "quick", ReadOnly: true, ConcurrencySafe: true, InputSchema: objectSchema(`{}`)},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				return textResult("quick " + c.ID), nil
			})
	})
	e.waitLive("quick")
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	calls := []bus.Call{{ID: "c1", Name: "quick"}, {ID: "c2", Name: "quick"}, {ID: "c3", Name: "nope"}}

	t.Run("one event per batch", func(t *testing.T) {
		for i := range 5 {
			reply := client.NewReplyID()
			r := e.batch(t, "rev-1", bus.Batch{Calls: calls}, client.WithReplyID(reply))
			wantSuccess(t, r.Results[0], "quick c1")
			// A read-only batch's batch.done is not awaited (docs/protocol.md
			// 3.4): stored, maybe just after the reply.
			testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
				es, err := stored(t, e.nc, "rev-1")
				if err != nil {
					return err
				}
				if got := typesOf(es, reply); !slices.Equal(got, []string{"batch.done"}) {
					return fmt.Errorf("batch %d: stored %v, want only batch.done", i, got)
				}
				return nil
			})
		}
	})
	t.Run("events calls", func(t *testing.T) {
		reply := client.NewReplyID()
		e.batch(t, "rev-2", bus.Batch{Calls: calls, Events: bus.EventsCalls}, client.WithReplyID(reply))
		got := typesOf(storedOf(t, e.nc, "rev-2"), reply)
		if len(got) != 4 || got[3] != "batch.done" {
			t.Fatalf("stored %v, want a call.result per call, then batch.done", got)
		}
		slices.Sort(got[:3])
		if want := []string{"call.result:c1", "call.result:c2", "call.result:c3"}; !slices.Equal(got[:3], want) {
			t.Fatalf("stored %v, want %v first", got, want)
		}
	})
	t.Run("parked call", func(t *testing.T) {
		reply := client.NewReplyID()
		r := e.callParked(t, "rev-3", reply, bus.Call{ID: "c1", Name: "quick"}, bus.Call{ID: "p1", Name: "ext"})
		if len(r.Results) != 1 || len(r.Parked) != 1 {
			t.Fatalf("reply %s", jsonOf(r))
		}
		ev := e.watch(t, "rev-3")
		if err := e.answer(t, "ext", "rev-3", reply, "p1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("answered")}); err != nil {
			t.Fatal(err)
		}
		collect(t, ev, batchDone(reply))
		// The watch sees batch.done as it is published; the stream may
		// store it a moment later.
		var got []string
		testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
			if got = typesOf(storedOf(t, e.nc, "rev-3"), reply); !slices.Contains(got, "batch.done") {
				return fmt.Errorf("batch.done not stored yet: %v", got)
			}
			return nil
		})
		// call.parked is live only (docs/protocol.md 3.4, 1.6): the reply
		// and the parked record say what it said.
		if want := []string{"call.result:p1", "batch.done"}; !slices.Equal(got, want) {
			t.Fatalf("stored %v, want %v", got, want)
		}
	})
}

// sessionReads counts the reads of one session's KV record that routers
// make: a spy on the JetStream API subjects of the sessions bucket, on the
// test's own connection, so that a read made before a reply is counted
// once the reply is in.
type sessionReads struct {
	subs    []*nats.Subscription
	session string
}

func spySessionReads(t *testing.T, nc *nats.Conn, session string) *sessionReads {
	t.Helper()
	s := &sessionReads{session: session}
	for _, subj := range []string{"$JS.API.DIRECT.GET.KV_toolbus_sessions", "$JS.API.DIRECT.GET.KV_toolbus_sessions.>",
		"$JS.API.STREAM.MSG.GET.KV_toolbus_sessions"} {
		sub, err := nc.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		s.subs = append(s.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// take returns how many reads of the session arrived since the last take.
func (s *sessionReads) take() int {
	n := 0
	for _, sub := range s.subs {
		for {
			m, err := sub.NextMsg(0)
			if err != nil {
				break
			}
			if strings.HasSuffix(m.Subject, "."+s.session) || strings.Contains(string(m.Data), "."+s.session+`"`) {
				n++
			}
		}
	}
	return n
}

// TestSessionRevisionAcrossRouters: docs/protocol.md 4.2 with two routers.
// A batch that echoes the session revision of an earlier reply is served
// from a router's cache when the cache is that new (no read of the
// session), and read where it is not; an activation through one router
// counts at once on a batch carrying that router's revision sent to the
// other, and a revision newer than a router has seen forces the read.
func TestSessionRevisionAcrossRouters(t *testing.T) {
	e := groupEnv(t, 2)
	const session = "rev-s"
	reads := spySessionReads(t, e.nc, session)
	send := func(t *testing.T, rev uint64, calls ...bus.Call) (bus.Reply, string, int) {
		t.Helper()
		reads.take()
		ev := newEvent(t, bus.TypeCallBatch, bus.Batch{Calls: calls, SessionRev: rev})
		ev.SessionID = session
		re := e.request(t, eventMsg(t, e.client.Subjects().Call(session), ev))
		if re.Type != bus.TypeCallReply {
			t.Fatalf("reply %s: %s", re.Type, re.Data)
		}
		var r bus.Reply
		if err := json.Unmarshal(re.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r, re.Source, reads.take()
	}
	activate := func(t *testing.T, on bool) (uint64, string) {
		t.Helper()
		r, src, _ := send(t, 0, bus.Call{ID: "rt", Name: "reset_tools", Input: json.RawMessage(`{"ops":` + map[bool]string{true: "true", false: "false"}[on] + `}`)})
		if r.Results[0].State != bus.StateSuccess || r.SessionRev == 0 {
			t.Fatalf("reset_tools: %s", jsonOf(r))
		}
		return r.SessionRev, src
	}
	deploy := bus.Call{ID: "d1", Name: "deploy", Input: json.RawMessage(`{}`)}

	// Activation through router A; batches carrying A's revision, sent until
	// both routers served some, see it at once on either. The first batch a
	// router serves at that revision may read the session (B's cache is
	// older); every later one is served from the cache.
	rev, a := activate(t, true)
	served := map[string]int{}
	for i := 0; i < 200 && (served[a] < 2 || len(served) < 2 || minOf(served) < 2); i++ {
		r, src, n := send(t, rev, deploy)
		wantSuccess(t, r.Results[0], "deploy:")
		if r.SessionRev < rev {
			t.Fatalf("reply revision %d older than the batch's %d", r.SessionRev, rev)
		}
		if served[src] > 0 && n != 0 {
			t.Fatalf("batch %d on %s, whose cache is current: %d session reads, want none", i, src, n)
		}
		served[src]++
	}
	if len(served) < 2 {
		t.Fatalf("only %v served", served)
	}
	// Without a revision every batch reads, as before.
	if _, _, n := send(t, 0, deploy); n == 0 {
		t.Fatal("a batch without sessionrev skipped the read")
	}
	// A revision newer than a router has seen forces the read.
	if _, _, n := send(t, rev+1000, deploy); n == 0 {
		t.Fatal("a batch with an unseen revision skipped the read")
	}
	// Deactivation through whichever router: its revision counts at once
	// on both.
	rev2, _ := activate(t, false)
	seen := map[string]bool{}
	for i := 0; i < 200 && len(seen) < 2; i++ {
		r, src, _ := send(t, rev2, deploy)
		wantFailure(t, r.Results[0], bus.StateError, bus.CodeInactiveTool, "")
		seen[src] = true
	}
	if len(seen) < 2 {
		t.Fatalf("only %v served", seen)
	}
}

func minOf(m map[string]int) int {
	n := -1
	for _, v := range m {
		if n < 0 || v < n {
			n = v
		}
	}
	return n
}

// oldWorker is a worker of a previous revision written from the page
// alone: it registers without binary_exec (with binary, as a worker of
// 1.15 declaring binary_exec only), beats, and reads exec requests in
// structured mode only (with binary, in binary mode too, never in the
// compact form of 1.16); a request it cannot read is refused, and counted.
type oldWorker struct {
	binarySeen chan string // call ids of requests in a form it could not read
}

func startOldWorker(t *testing.T, e *env, id string, def bus.ToolDef, binary bool) *oldWorker {
	t.Helper()
	o := &oldWorker{binarySeen: make(chan string, 100)}
	startRawWorker(t, e, bus.Register{Worker: id, Tools: []bus.ToolDef{def}, BinaryExec: binary}, func(nc *nats.Conn, m *nats.Msg) {
		if bus.IsBinary(m.Header) && (!binary || m.Header.Get(bus.HeaderContentType) == "") {
			o.binarySeen <- m.Header.Get("ce-toolcallid")
			_ = bus.RespondError(nc, m, "old/"+id, bus.Errorf(bus.CodeBadEvent, "not a form this worker reads"))
			return
		}
		ev, err := bus.Decode(m)
		var req bus.ExecRequest
		if err == nil {
			err = ev.DataAs(&req)
		}
		if err != nil {
			_ = bus.RespondError(nc, m, "old/"+id, bus.Errorf(bus.CodeBadEvent, "%v", err))
			return
		}
		out := &bus.Event{SpecVersion: "1.0", ID: client.NewReplyID(), Source: "old/" + id, Type: bus.TypeExecResult,
			DataContentType: bus.ContentTypeJSON, SessionID: ev.SessionID, ReplyID: ev.ReplyID, ToolCallID: req.Call.ID}
		_ = out.SetData(bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("old " + req.Call.ID)})
		if bus.IsBinary(m.Header) {
			_ = bus.PublishBinary(nc, m.Reply, out, false)
		} else {
			_ = bus.Publish(nc, m.Reply, out)
		}
	})
	return o
}

// startRawWorker is a worker written by hand: it registers reg's one tool
// on the shared subject and beats until the test ends, and hands each exec
// request of the tool to serve.
func startRawWorker(t *testing.T, e *env, reg bus.Register, serve func(*nats.Conn, *nats.Msg)) {
	t.Helper()
	nc := e.connect(t)
	def := &reg.Tools[0]
	sub, err := nc.QueueSubscribe("toolbus.exec."+def.Name, "toolbus-exec-"+def.Name, func(m *nats.Msg) { serve(nc, m) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// The definition handle gives the new worker's tools: a different one
	// would be rejected as a conflict, and the old worker served unseen.
	def.ConcurrencySafe, def.ReadOnly, def.Permission = true, true, bus.PermissionAllow
	def.InputSchema = objectSchema(`{}`)
	def.Description = "Test tool " + def.Name + "."
	register := func() *nats.Msg {
		ev, _ := bus.NewEvent(bus.TypeRegister, "old/"+reg.Worker, reg)
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		m, _ := bus.SendRequest(ctx, nc, "toolbus.register", ev)
		return m
	}
	var ack bus.RegisterAck
	if m := register(); m == nil {
		t.Fatal("no register ack")
	} else if ev, err := bus.Decode(m); err != nil || ev.DataAs(&ack) != nil || len(ack.Accepted) != 1 {
		t.Fatalf("%s's registration: %v %s", reg.Worker, err, m.Data)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(testHeartbeat)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				register()
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })
}

// execModes records the mode of every exec request on a tool's subject.
func execModes(t *testing.T, nc *nats.Conn, tool string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync("toolbus.exec." + tool)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// modesOf drains sub and counts its requests by form (a binary one
// without content-type is compact).
func modesOf(sub *nats.Subscription) (n [3]int) {
	for {
		m, err := sub.NextMsg(0)
		if err != nil {
			return n
		}
		form := bus.ExecStructured
		if bus.IsBinary(m.Header) {
			form = bus.ExecBinary
			if m.Header.Get(bus.HeaderContentType) == "" {
				form = bus.ExecCompact
			}
		}
		n[form]++
	}
}

// TestExecBinaryMode: docs/protocol.md 5.1. The router sends io.toolbus.exec
// in the compact form to a tool all of whose live workers declared
// binary_exec and compact_exec (the Go worker SDK does), in binary mode to
// one a worker of 1.15 (binary_exec only) serves beside a new one, in
// structured mode to a tool a worker that declares neither serves, alone
// or beside a new one; every call gets its worker's result.
func TestExecBinaryMode(t *testing.T) {
	e := newEnv(t, 1)
	e.addWorker(func(w *worker.Worker) {
		for _, name := range []string{"fresh", "mixed", "bin15"} {
			handle(t, w, bus.ToolDef{Name: name, ReadOnly: true, ConcurrencySafe: true, InputSchema: objectSchema(`{}`)},
				func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
					return textResult("new " + c.ID), nil
				})
		}
	})
	old := startOldWorker(t, e, "old-1", bus.ToolDef{Name: "legacy"}, false)
	oldMixed := startOldWorker(t, e, "old-2", bus.ToolDef{Name: "mixed"}, false)
	old15 := startOldWorker(t, e, "old-3", bus.ToolDef{Name: "bin15"}, true)
	e.waitLive("fresh", "legacy", "mixed", "bin15")
	for _, tc := range []struct {
		tool  string
		form  bus.ExecForm
		texts []string
	}{
		{"fresh", bus.ExecCompact, []string{"new "}},
		{"legacy", bus.ExecStructured, []string{"old "}},
		{"mixed", bus.ExecStructured, []string{"new ", "old "}},
		{"bin15", bus.ExecBinary, []string{"new ", "old "}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			spy := execModes(t, e.nc, tc.tool)
			for i := range 8 {
				id := "c" + string(rune('a'+i))
				r := e.call(t, "bin-"+tc.tool, []bus.Call{{ID: id, Name: tc.tool, Input: json.RawMessage(`{}`)}})
				if r.Results[0].State != bus.StateSuccess || !slices.ContainsFunc(tc.texts, func(p string) bool { return textOf(r.Results[0]) == p+id }) {
					t.Fatalf("call %s: %s", id, jsonOf(r.Results[0]))
				}
			}
			if n := modesOf(spy); n[tc.form] != 8 {
				t.Fatalf("requests by form (structured, binary, compact) %v, want all 8 in form %d", n, tc.form)
			}
		})
	}
	for _, o := range []*oldWorker{old, oldMixed, old15} {
		select {
		case id := <-o.binarySeen:
			t.Fatalf("a worker of a previous revision got call %s in a form it does not read", id)
		default:
		}
	}
}
