package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackParkInputPastHalfPayload (session 28, third red team; fixed in
// session 29): on a standalone server (max payload 1 MiB, a call input's
// bound too) a park record held its input twice over (the call's and the
// batch it carries), so a 700 KiB input, under the input bound and
// accepted, ended its park in an internal error ("maximum payload
// exceeded"). Since 1.19 the record holds it once: the call parks, and its
// answers fit beside it: an external output and a confirmed run's output
// that would take the record past the max payload are stored (5.9).
func TestAttackParkInputPastHalfPayload(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true, Permission: bus.PermissionAsk})
	out := strings.Repeat("y", 400<<10)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "run", Permission: bus.PermissionAsk}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{State: bus.StateSuccess, Output: bus.Text(out)}, nil
		})
	})
	e.waitLive("run")
	ev := e.watch(t, "hostile")
	input := bigInput(700 << 10)
	yes := true
	for _, tool := range []string{"ask", "run"} {
		r := e.callParked(t, "hostile", tool, bus.Call{ID: "c1", Name: tool, Input: input})
		if len(r.Parked) != 1 {
			t.Fatalf("%s: a 700 KiB input did not park: %.300s", tool, jsonOf(r.Results))
		}
		rec := leaderEntry(t, e, "toolbus_parked", bus.CallKey("hostile", tool, "c1")).Value()
		if n := bytes.Count(rec, input[6:len(input)-2]); n != 1 {
			t.Fatalf("%s: the record holds the input %d times, want once", tool, n)
		}
		if tool == "run" { // an edited input as large beside it: refused, nothing changed
			edited := bigInput(700 << 10)
			edited[7] = 'z'
			wantCode(t, e.answer(t, tool, "hostile", tool, "c1", bus.Answer{Confirmed: &yes, InputDigest: bus.InputDigest(input), Input: edited}), bus.CodeBadRequest)
		}
		if err := e.answer(t, tool, "hostile", tool, "c1", bus.Answer{Confirmed: &yes, InputDigest: bus.InputDigest(input)}); err != nil {
			t.Fatal(err)
		}
		if tool == "ask" { // parked again for its external result
			if err := e.answer(t, tool, "hostile", tool, "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text(out)}); err != nil {
				t.Fatalf("an answer that fits beside the input refused: %v", err)
			}
		}
		var bd bus.BatchDone
		if err := slowDone(t, ev).DataAs(&bd); err != nil || len(bd.Results) != 1 || bd.Results[0].State != bus.StateSuccess {
			t.Fatalf("%s: batch.done %.300s %v", tool, jsonOf(bd), err)
		}
		res := bd.Results[0]
		if len(res.Output) != 2 || !strings.HasPrefix(res.Output[1].URL, "nats-object://") {
			t.Fatalf("%s: the output was not stored: %.300s", tool, jsonOf(res))
		}
		if got, err := e.client.Outputs().FetchBytes(testCtx(t), res.Output[1].URL); err != nil || string(got) != out {
			t.Fatalf("%s: the stored output reads back %d bytes, %v", tool, len(got), err)
		}
		if rec := parkedRecord(t, e, "hostile", tool, "c1"); rec.Status != bus.ParkDone {
			t.Fatalf("%s: the record is %s", tool, rec.Status)
		}
	}
}

// standalone is an env of one router on a nats-server with a standalone
// server's max payload (1 MiB; the embedded one's is 8 MiB).
func standalone(t *testing.T) *env {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	d := xtest.Run(t, xtest.Config{Server: srv, Routers: 1, Router: router.Config{Logger: testLogger()}, Heartbeat: testHeartbeat, Bound: readyBound})
	e := &env{t: t, d: d, srv: d.Server, routers: slices.Clone(d.Routers), rconns: slices.Clone(d.RouterConns)}
	e.nc = e.connect(t)
	e.client = client.New(e.nc, client.Config{Source: "test/agent"})
	if mp := e.nc.MaxPayload(); mp != 1<<20 {
		t.Fatalf("max payload %d", mp)
	}
	return e
}

// slowDone is the next batch.done on ev: a call of a large input (and a
// 400 KiB output) takes a second or more a step under -race beside a CPU
// burner (an exec, the ledger, the stored output), so the bound is wide.
func slowDone(t *testing.T, ev *client.Events) *bus.Event {
	t.Helper()
	timeout := time.After(2 * readyBound)
	for {
		select {
		case e, ok := <-ev.C:
			if !ok {
				t.Fatal("events closed before batch.done")
			}
			if e.Type == bus.TypeBatchDone {
				return e
			}
		case <-timeout:
			t.Fatal("no batch.done")
		}
	}
}

// parkedKV is the P_parked bucket of e's deployment.
func parkedKV(t *testing.T, e *env) jetstream.KeyValue {
	kv, err := testkit.JetStream(t, e.nc).KeyValue(t.Context(), "toolbus_parked")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// bigInput is an object input of exactly n bytes.
func bigInput(n int) json.RawMessage {
	return json.RawMessage(`{"x":"` + strings.Repeat("x", n-8) + `"}`)
}

// TestParkInputBound: a call parks while its record leaves AnswerRoom of
// the max payload for its answer (1.19); past that, up to the largest
// input a batch can carry, it gets limit_exceeded at once, the rest of its
// batch goes on, and nothing of it is kept.
func TestParkInputBound(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true})
	kv := parkedKV(t, e)
	limit := int(e.nc.MaxPayload()) - parked.AnswerRoom // a record holds its input and about 600 bytes more
	for _, tc := range []struct {
		name  string
		n     int
		parks bool
	}{
		{"700 KiB", 700 << 10, true},
		{"just under", limit - 1024, true},
		{"just over", limit - 64, false},
		{"the largest a batch carries", int(e.nc.MaxPayload()) - 512, false},
	} {
		session := "s" + strconv.Itoa(tc.n)
		t.Run(tc.name, func(t *testing.T) {
			ev := e.watch(t, session)
			r := e.callParked(t, session, "r1", bus.Call{ID: "c1", Name: "ask", Input: bigInput(tc.n)})
			if tc.parks {
				if len(r.Parked) != 1 || len(r.Results) != 0 {
					t.Fatalf("%d bytes did not park: %.300s", tc.n, jsonOf(r.Results))
				}
				// Every parked input fits a page of parked.list alone (the
				// approver's inbox reads only four left-out inputs a poll).
				var list struct {
					Parked []bus.ParkedCall `json:"parked"`
				}
				if err := e.client.Admin(testCtx(t), "parked.list", session, nil, &list); err != nil || len(list.Parked) != 1 || list.Parked[0].InputOmitted {
					t.Fatalf("parked.list: %d calls, %v", len(list.Parked), err)
				}
				if err := e.answer(t, "ask", session, "r1", "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("ok")}); err != nil {
					t.Fatal(err)
				}
				slowDone(t, ev)
				return
			}
			if len(r.Parked) != 0 || len(r.Results) != 1 || r.Results[0].Error == nil || r.Results[0].Error.Code != bus.CodeLimitExceeded ||
				!strings.Contains(textOf(r.Results[0]), "could not wait for an answer: its record would be") {
				t.Fatalf("%d bytes: want limit_exceeded, got parked %d, %.300s", tc.n, len(r.Parked), jsonOf(r.Results))
			}
			slowDone(t, ev)
			for _, key := range []string{session + ".r1.c1", session + ".r1"} {
				if _, err := kv.Get(t.Context(), key); err != jetstream.ErrKeyNotFound {
					t.Fatalf("%s after a refused park: %v", key, err)
				}
			}
		})
	}
}

// TestParkRefusedLeavesNothingHalfWritten: a batch whose continuation is
// written before one of its records is refused for its size (1.19): that
// call ends limit_exceeded, the other waits, and once it is answered the
// batch is done with both results and nothing of it is left in P_parked.
func TestParkRefusedLeavesNothingHalfWritten(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true})
	kv := parkedKV(t, e)
	ev := e.watch(t, "s1")
	big := bigInput(int(e.nc.MaxPayload()) - parked.AnswerRoom + 1024)
	r := e.callParked(t, "s1", "r1", bus.Call{ID: "c0", Name: "ask"}, bus.Call{ID: "c1", Name: "ask", Input: big})
	if len(r.Parked) != 1 || r.Parked[0].ID != "c0" || len(r.Results) != 1 || r.Results[0].Error == nil || r.Results[0].Error.Code != bus.CodeLimitExceeded {
		t.Fatalf("want c0 parked and c1 limit_exceeded: parked %s, %.300s", jsonOf(r.Parked), jsonOf(r.Results))
	}
	if _, err := kv.Get(t.Context(), "s1.r1.c1"); err != jetstream.ErrKeyNotFound {
		t.Fatalf("the refused call has a record: %v", err)
	}
	if err := e.answer(t, "ask", "s1", "r1", "c0", bus.Answer{State: bus.StateSuccess, Output: bus.Text("ok")}); err != nil {
		t.Fatal(err)
	}
	var bd bus.BatchDone
	if err := slowDone(t, ev).DataAs(&bd); err != nil || len(bd.Results) != 2 ||
		bd.Results[0].State != bus.StateSuccess || bd.Results[1].Error == nil || bd.Results[1].Error.Code != bus.CodeLimitExceeded {
		t.Fatalf("batch.done %.400s %v", jsonOf(bd), err)
	}
	// The continuation goes once batch.done is out (1.13): bounded polling.
	testkit.CheckFor(t, readyBound, 10*time.Millisecond, func() error {
		if _, err := kv.Get(t.Context(), "s1.r1"); err != jetstream.ErrKeyNotFound {
			return fmt.Errorf("the continuation stays after batch.done: %v", err)
		}
		return nil
	})
	if rec := parkedRecord(t, e, "s1", "r1", "c0"); rec.Status != bus.ParkDone {
		t.Fatalf("c0 is %s", rec.Status)
	}
}

// TestParkLargeBatchAnswered: the answers' results join a batch's
// continuation of its own; an answer's output past its share of it (what
// the continuation leaves less AnswerRoom, halved: two waits), or past what
// its record's 700 KiB input leaves, is stored (5.9, 1.19), so the batch is
// done with both results.
func TestParkLargeBatchAnswered(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true})
	ev := e.watch(t, "s1")
	r := e.callParked(t, "s1", "r1", bus.Call{ID: "c0", Name: "ask"}, bus.Call{ID: "c1", Name: "ask", Input: bigInput(700 << 10)})
	if len(r.Parked) != 2 {
		t.Fatalf("parked %d: %.300s", len(r.Parked), jsonOf(r.Results))
	}
	out := strings.Repeat("y", 600<<10)
	for _, id := range []string{"c0", "c1"} {
		if err := e.answer(t, "ask", "s1", "r1", id, bus.Answer{State: bus.StateSuccess, Output: bus.Text(out)}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	var bd bus.BatchDone
	if err := slowDone(t, ev).DataAs(&bd); err != nil || len(bd.Results) != 2 {
		t.Fatalf("batch.done %.300s %v", jsonOf(bd), err)
	}
	for _, res := range bd.Results {
		if res.State != bus.StateSuccess || len(res.Output) != 2 || !strings.HasPrefix(res.Output[1].URL, "nats-object://") {
			t.Fatalf("%s: the output was not stored: %.300s", res.ID, jsonOf(res))
		}
	}
}

// TestParkReplyPastMaxPayload: the reply lists each parked call with its
// input, and an entry takes more than the call in the batch (kind,
// subject), so two parked inputs that nearly fill the batch's message
// would take the reply (and the live call.parked) past the max payload: the
// agent would wait until its timeout, and a re-send the same. Since 1.19 a
// call that does not fit is listed without its input (input_omitted, its
// input_digest kept; protocol 3.2), and is answered as any other.
func TestParkReplyPastMaxPayload(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true})
	max := int(e.nc.MaxPayload())
	omitted, last := 0, ""
	for n := (max - 700) / 2; n < (max-200)/2; n += 25 {
		id := "r" + strconv.Itoa(n)
		ctx, cancel := context.WithTimeout(t.Context(), readyBound)
		r, err := e.client.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c0", Name: "ask", Input: bigInput(n)}, {ID: "c1", Name: "ask", Input: bigInput(n)}}},
			client.WithReplyID(id))
		cancel()
		if errors.Is(err, nats.ErrMaxPayload) && omitted > 0 {
			break // the batch itself is past it now
		}
		if err != nil || len(r.Parked) != 2 {
			t.Fatalf("two inputs of %d bytes: %v", n, err)
		}
		last = id
		for _, p := range r.Parked {
			rec := parkedRecord(t, e, "s1", last, p.ID)
			if p.InputOmitted && (p.Input != nil || p.InputDigest != rec.InputDigest) || !p.InputOmitted && !bytes.Equal(p.Input, rec.Call.Input) {
				t.Fatalf("%d bytes, %s listed as %+.200v", n, p.ID, p)
			}
			if p.InputOmitted {
				omitted++
			}
		}
	}
	if omitted == 0 {
		t.Fatal("no input was left out: the bound was not reached")
	}
	var list bus.ParkedPage // an omitted input is read from parked.list, the same digest
	if err := e.client.Admin(testCtx(t), "parked.list", "s1", nil, &list); err != nil || len(list.Parked) == 0 {
		t.Fatalf("parked.list: %d calls, %v", len(list.Parked), err)
	}
	for _, p := range list.Parked {
		if rec := parkedRecord(t, e, "s1", p.ReplyID, p.ID); p.InputDigest != rec.InputDigest {
			t.Fatalf("parked.list: %s.%s has digest %s, the record %s", p.ReplyID, p.ID, p.InputDigest, rec.InputDigest)
		}
	}
}

// TestParkContinuationNoRoom (session 29, found beside the fix above): two
// parked inputs that filled a batch's continuation of its own to within
// 64 KiB of the max payload parked (a record leaves AnswerRoom, the
// continuation did not), and then no answer's result could join the
// continuation ("parked result not recorded: maximum payload exceeded",
// every lease): the answers were accepted and the batch never finished.
// Since 1.20 the continuation holds such inputs by their digests (the
// records hold them) and leaves AnswerRoom too.
func TestParkContinuationNoRoom(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true})
	ev := e.watch(t, "s1")
	n := (int(e.nc.MaxPayload()) - 700) / 2
	r := e.callParked(t, "s1", "r1", bus.Call{ID: "c0", Name: "ask", Input: bigInput(n)}, bus.Call{ID: "c1", Name: "ask", Input: bigInput(n)})
	for _, p := range r.Parked {
		if err := e.answer(t, "ask", "s1", "r1", p.ID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("ok")}); err != nil {
			t.Fatalf("%s: %v", p.ID, err)
		}
	}
	var bd bus.BatchDone
	if done := slowDone(t, ev); done.DataAs(&bd) != nil || len(bd.Results) != 2 {
		t.Fatalf("batch.done: %.300s", jsonOf(bd))
	}
}

// TestParkThreeLargeAnswers: three parked calls with 300 KiB inputs each
// (held by their records, not by the continuation: 1.20) are answered with
// 300 KiB outputs each on a 1 MiB server; each result joins the
// continuation inline or, past its share, by reference (5.9), and
// batch.done has all three.
func TestParkThreeLargeAnswers(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true})
	ev := e.watch(t, "s1")
	ids := []string{"c0", "c1", "c2"}
	var calls []bus.Call
	for _, id := range ids {
		calls = append(calls, bus.Call{ID: id, Name: "ask", Input: bigInput(300 << 10)})
	}
	if r := e.callParked(t, "s1", "r1", calls...); len(r.Parked) != 3 {
		t.Fatalf("parked %d: %.300s", len(r.Parked), jsonOf(r.Results))
	}
	out := strings.Repeat("y", 300<<10)
	for _, id := range ids {
		if err := e.answer(t, "ask", "s1", "r1", id, bus.Answer{State: bus.StateSuccess, Output: bus.Text(out)}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	var bd bus.BatchDone
	if err := slowDone(t, ev).DataAs(&bd); err != nil || len(bd.Results) != 3 {
		t.Fatalf("batch.done %.300s %v", jsonOf(bd), err)
	}
	for i, res := range bd.Results {
		inline := len(res.Output) == 1 && res.Output[0].Text == out
		stored := len(res.Output) == 2 && strings.HasPrefix(res.Output[1].URL, "nats-object://")
		if res.ID != ids[i] || res.State != bus.StateSuccess || !inline && !stored {
			t.Fatalf("%s: %.300s", ids[i], jsonOf(res))
		}
	}
}

// TestParkLargeInputLateResult: a batch parks a call while its other call,
// with a 700 KiB input, still runs; that call's 350 KiB result joins the
// batch's continuation, which holds that input, so it is fitted beside it
// (stored, 5.9, 1.19), and the batch finishes once answered. Before, it
// was fitted to the reply alone: the continuation was not saved, and the
// batch waited for a re-send. (Until 1.20 the parked call had the large
// input, which the continuation now leaves to its record.)
func TestParkLargeInputLateResult(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true})
	release := make(chan struct{})
	out := strings.Repeat("y", 350<<10)
	e.startWorker(worker.Config{}, func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "late", ConcurrencySafe: true, Permission: bus.PermissionAllow},
			func(ctx context.Context, _ *worker.Call) (*bus.ExecResult, error) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return &bus.ExecResult{Output: bus.Text(out)}, nil
			})
	}, "late")
	ev := e.watch(t, "s1")
	type got struct {
		r   *bus.Reply
		err error
	}
	replied := make(chan got, 1)
	go func() {
		r, err := e.client.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "c0", Name: "ask"}, {ID: "c1", Name: "late", Input: bigInput(700 << 10)}}},
			client.WithReplyID("r1"))
		replied <- got{r, err}
	}()
	nextEvent(t, ev, bus.TypeCallParked) // c0 parked while c1 runs
	close(release)
	var g got
	select {
	case g = <-replied:
	case <-time.After(readyBound):
		t.Fatal("no reply")
	}
	if g.err != nil || len(g.r.Parked) != 1 || len(g.r.Results) != 1 {
		t.Fatalf("reply %v: %.300s", g.err, jsonOf(g.r))
	}
	if res := g.r.Results[0]; len(res.Output) != 2 || !strings.HasPrefix(res.Output[1].URL, "nats-object://") {
		t.Fatalf("c1's output was not stored: %.300s", jsonOf(res))
	}
	if err := e.answer(t, "ask", "s1", "r1", "c0", bus.Answer{State: bus.StateSuccess, Output: bus.Text("ok")}); err != nil {
		t.Fatal(err)
	}
	var bd bus.BatchDone
	if err := slowDone(t, ev).DataAs(&bd); err != nil || len(bd.Results) != 2 {
		t.Fatalf("batch.done %.300s %v", jsonOf(bd), err)
	}
}

// TestAttackResendHeldInput (1.20): a batch's continuation of its own holds
// a parked call's input of 1 KiB or more by its digest (the record holds the
// input), so a re-sent copy under the batch's reply id is compared with
// that digest: while the batch waits (the copy's park conflicts) and while
// it runs resumed on this router (whose batch, rebuilt from the
// continuation, lacks the input). A copy with another input is refused
// bad_request, before any call runs; the same calls written otherwise are
// a copy, adopted while it waits and run beside it once resumed.
func TestAttackResendHeldInput(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true})
	release, started := make(chan struct{}), make(chan struct{}, 2)
	e.startWorker(worker.Config{}, func(w *worker.Worker) {
		// Read-only: a copy runs it too (no ledger); not concurrency-safe: a run after c0's.
		handle(t, w, bus.ToolDef{Name: "after", ReadOnly: true, Permission: bus.PermissionAllow},
			func(ctx context.Context, _ *worker.Call) (*bus.ExecResult, error) {
				started <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
				}
				return &bus.ExecResult{Output: bus.Text("after")}, nil
			})
	}, "after")
	ev := e.watch(t, "s1")
	x := strings.Repeat("x", 4<<10)
	batch := func(input string) bus.Batch {
		return bus.Batch{Calls: []bus.Call{{ID: "c0", Name: "ask", Input: json.RawMessage(input)}, {ID: "c1", Name: "after"}}}
	}
	same, other := ` {"x": "`+x+`"} `, `{"x":"`+x[1:]+`y"}`
	if r := e.callParked(t, "s1", "r1", batch(`{"x":"`+x+`"}`).Calls...); len(r.Parked) != 2 || r.Parked[1].Kind != bus.KindQueued {
		t.Fatalf("first: %.300s", jsonOf(r))
	}
	refused := func(when string) {
		t.Helper()
		_, err := e.client.Call(testCtx(t), "s1", batch(other), client.WithReplyID("r1"))
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, "call c0 (ask) has another input") {
			t.Fatalf("%s: a copy with another input: %v", when, err)
		}
	}
	refused("waiting")
	if r, err := e.client.Call(testCtx(t), "s1", batch(same), client.WithReplyID("r1")); err != nil || len(r.Parked) != 2 {
		t.Fatalf("waiting: the same calls: %.300s %v", jsonOf(r), err)
	}
	if err := e.answer(t, "ask", "s1", "r1", "c0", bus.Answer{State: bus.StateSuccess, Output: bus.Text("ok")}); err != nil {
		t.Fatal(err)
	}
	<-started // resumed: c1 runs here, until released
	refused("resumed")
	copied := make(chan error, 1)
	go func() {
		r, err := e.client.Call(testCtx(t), "s1", batch(same), client.WithReplyID("r1"))
		if err == nil && (len(r.Results) != 2 || r.Results[0].State != bus.StateSuccess || r.Results[1].State != bus.StateSuccess) {
			err = fmt.Errorf("results %.300s", jsonOf(r.Results))
		}
		copied <- err
	}()
	select { // the copy, taken beside the resumed batch, runs c1 too; refused, it would not
	case <-started:
	case err := <-copied:
		t.Fatalf("resumed: the same calls: %v", err)
	}
	close(release)
	if err := <-copied; err != nil {
		t.Fatalf("resumed: the same calls: %v", err)
	}
	var bd bus.BatchDone
	if err := slowDone(t, ev).DataAs(&bd); err != nil || len(bd.Results) != 2 || bd.Results[1].State != bus.StateSuccess {
		t.Fatalf("batch.done %.300s %v", jsonOf(bd), err)
	}
}
