package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// registerDefs registers definitions the way a worker would, from a
// registrar that serves none of them (external tools need no worker).
func (e *env) registerDefs(t *testing.T, defs ...bus.ToolDef) {
	t.Helper()
	for i := range defs {
		// External tools go through permissions like any other; these tests
		// are about parking, so they allow themselves, and they are
		// concurrency-safe as on the wire by default.
		if defs[i].Permission == "" {
			defs[i].Permission = bus.PermissionAllow
		}
		defs[i].ConcurrencySafe = true
		if len(defs[i].InputSchema) == 0 {
			defs[i].InputSchema = json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)
		}
	}
	ev := e.request(t, eventMsg(t, "toolbus.register", newEvent(t, bus.TypeRegister, bus.Register{Worker: "registrar", Tools: defs})))
	var ack bus.RegisterAck
	if err := ev.DataAs(&ack); err != nil || len(ack.Rejected) > 0 {
		t.Fatalf("register: %s %v", ev.Data, err)
	}
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	e.waitLive(names...)
}

// writeTools adds a non-read-only tool "write" counting its runs and
// remembering its last input, a command tool "shell", and a path tool
// "save".
type writeTools struct {
	runs      atomic.Int32
	lastInput atomic.Value
}

func (e *env) addWriteTools(t *testing.T) *writeTools {
	wt := &writeTools{}
	h := func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
		wt.runs.Add(1)
		wt.lastInput.Store(string(c.Input))
		return textResult(c.Name + " ran " + string(c.Input)), nil
	}
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "write", Permission: bus.PermissionPassthrough, ConcurrencySafe: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"v":{"type":"integer"}}}`)}, h)
		handle(t, w, bus.ToolDef{Name: "shell", Permission: bus.PermissionPassthrough, RuleMatcher: bus.MatcherCommand, RuleField: "command", ConcurrencySafe: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)}, h)
		handle(t, w, bus.ToolDef{Name: "save", Permission: bus.PermissionPassthrough, RuleMatcher: bus.MatcherPath, RuleField: "path", ConcurrencySafe: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}, h)
		handle(t, w, bus.ToolDef{Name: "peek", ReadOnly: true}, h)
	})
	e.waitLive("write", "shell", "save", "peek")
	return wt
}

func (e *env) setMode(t *testing.T, session, mode string) {
	t.Helper()
	if err := e.client.Admin(t.Context(), "session.mode", session, map[string]string{"mode": mode}, nil); err != nil {
		t.Fatal(err)
	}
}

// handoff reads the oldest request the handoff stream keeps on subject
// (toolbus.<kind>.<tool>) as a handler that starts only now does: through
// client.Parked().Follow, a consumer a router makes on request and makes
// again when it is lost. A raw ordered consumer's first pull, sent from
// another node of a cluster right after the consumer was made, could find
// no interest yet for its pull subject ("no responders") and was not tried
// again (TestOnCluster/ExternalToolParkAndAnswer).
func (e *env) handoff(t *testing.T, subject string) *bus.Event {
	t.Helper()
	kind, tool, ok := strings.Cut(strings.TrimPrefix(subject, "toolbus."), ".")
	if !ok {
		t.Fatalf("handoff subject %q is not toolbus.<kind>.<tool>", subject)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*bound)
	defer cancel()
	ev, err := e.client.Parked().Follow(ctx, kind, tool)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	select {
	case req, ok := <-ev.C:
		if ok {
			return req
		}
	case <-ctx.Done():
	}
	t.Fatalf("no handoff request on %s within %v", subject, 3*bound)
	return nil
}

func (e *env) answer(t *testing.T, tool, session, reply, call string, a bus.Answer) error {
	t.Helper()
	return e.client.Parked().Answer(testCtx(t), tool, session, reply, call, a)
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

func TestExternalToolParkAndAnswer(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "approve_po", Description: "A person approves a purchase order.", External: true})
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	reply := e.client
	r, err := reply.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "approve_po", Input: json.RawMessage(`{"q":"PO-7"}`)}},
		User: json.RawMessage(`"alice"`), Context: json.RawMessage(`{"tenant":"acme"}`)}, client.WithReplyID("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != 0 || len(r.Parked) != 1 || r.Parked[0].Kind != bus.KindExternal || r.Parked[0].Subject != "toolbus.answer.approve_po" {
		t.Fatalf("reply = %s", jsonOf(r))
	}
	parked := nextEvent(t, ev, bus.TypeCallParked)
	var pe bus.ParkedEvent
	if err := parked.DataAs(&pe); err != nil || len(pe.Calls) != 1 || string(pe.Calls[0].Input) != `{"q":"PO-7"}` {
		t.Fatalf("parked event %s", parked.Data)
	}
	// A handler that starts only now still gets the request.
	req := e.handoff(t, "toolbus.external.approve_po")
	if req.Type != bus.TypeExternalReq || req.SessionID != "s1" || req.ReplyID != "r1" || req.ToolCallID != "c1" {
		t.Fatalf("handoff event %+v", req)
	}
	var data bus.HandoffRequest
	if err := req.DataAs(&data); err != nil || data.Call.ID != "c1" || string(data.User) != `"alice"` || string(data.Context) != `{"tenant":"acme"}` {
		t.Fatalf("handoff data %s", req.Data)
	}
	// Listed for operators.
	var list struct {
		Parked []struct {
			ID, Kind string
		} `json:"parked"`
	}
	if err := e.client.Admin(t.Context(), "parked.list", "", nil, &list); err != nil || len(list.Parked) != 1 || list.Parked[0].ID != "c1" {
		t.Fatalf("parked.list = %+v %v", list, err)
	}
	// Bad answers change nothing.
	wantCode(t, e.answer(t, "approve_po", "s1", "r1", "c1", bus.Answer{State: "maybe"}), bus.CodeBadRequest)
	wantCode(t, e.answer(t, "approve_po", "s1", "r1", "c1", bus.Answer{State: "success", Output: []bus.Block{{Type: "data", MediaType: "image/png"}}}), bus.CodeBadRequest)
	wantCode(t, e.answer(t, "approve_po", "s1", "r1", "nope", bus.Answer{State: "success"}), bus.CodeNotParked)
	wantCode(t, e.answer(t, "other_tool", "s1", "r1", "c1", bus.Answer{State: "success"}), bus.CodeNotParked)
	wantCode(t, e.answer(t, "approve_po", "s2", "r1", "c1", bus.Answer{State: "success"}), bus.CodeNotParked)
	yes := true
	wantCode(t, e.answer(t, "approve_po", "s1", "r1", "c1", bus.Answer{Confirmed: &yes}), bus.CodeBadRequest)

	if err := e.answer(t, "approve_po", "s1", "r1", "c1", bus.Answer{State: "success", Output: bus.Text("approved")}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, e.answer(t, "approve_po", "s1", "r1", "c1", bus.Answer{State: "success", Output: bus.Text("again")}), bus.CodeAlreadyAnswered)
	res := nextEvent(t, ev, bus.TypeCallResult)
	if res.ToolCallID != "c1" || res.ReplyID != "r1" {
		t.Fatalf("result event %+v", res)
	}
	done := nextEvent(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	if err := done.DataAs(&bd); err != nil || len(bd.Results) != 1 || textOf(bd.Results[0]) != "approved" || bd.Results[0].State != "success" {
		t.Fatalf("batch.done %s", done.Data)
	}
	wantCode(t, e.answer(t, "approve_po", "s1", "r1", "c1", bus.Answer{State: "success"}), bus.CodeAlreadyAnswered)
	// The request is gone once answered: a handler that starts now gets
	// nothing (the record is the request, docs/protocol.md 6.2).
	late, err := e.client.Parked().Follow(t.Context(), bus.KindExternal, "approve_po")
	if err != nil {
		t.Fatal(err)
	}
	defer late.Stop(t.Context())
	another := e.callParked(t, "s1", "r-after", bus.Call{ID: "c9", Name: "approve_po", Input: json.RawMessage(`{}`)})
	if len(another.Parked) != 1 {
		t.Fatalf("reply %s", jsonOf(another))
	}
	select { // the first request it gets is the one parked after the answer
	case req := <-late.C:
		if req.ReplyID != "r-after" || req.ToolCallID != "c9" {
			t.Fatalf("a handler started after the answer got %s of %s/%s", req.Type, req.ReplyID, req.ToolCallID)
		}
	case <-time.After(3 * bound):
		t.Fatal("no request for the call parked after the answer")
	}
	// Every stored event of the batch is kept by the events stream: a
	// header of another message must not leak into later events, which the
	// stream would then drop. call.parked is live only (docs/protocol.md
	// 3.4, 1.6).
	rp, err := e.client.Replay(testCtx(t), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Stop(t.Context())
	var types []string
	for _, x := range collect(t, rp, batchDone("r1")) {
		types = append(types, x.Type)
	}
	if want := []string{bus.TypeCallResult, bus.TypeBatchDone}; !slices.Equal(types, want) {
		t.Fatalf("replayed %v, want %v", types, want)
	}
}

func (e *env) callParked(t *testing.T, session, replyID string, calls ...bus.Call) *bus.Reply {
	t.Helper()
	r, err := e.client.Call(testCtx(t), session, bus.Batch{Calls: calls}, client.WithReplyID(replyID))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRacingAnswersOneWins(t *testing.T) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	e.callParked(t, "s1", "r1", bus.Call{ID: "c1", Name: "ext"})
	const handlers = 6
	var accepted, already atomic.Int32
	var wg sync.WaitGroup
	for i := range handlers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := e.connect(t)
			c := client.New(nc, client.Config{Source: fmt.Sprintf("handler/%d", i)})
			err := c.Parked().Answer(t.Context(), "ext", "s1", "r1", "c1", bus.Answer{State: "error", Output: bus.Text(fmt.Sprintf("no from %d", i))})
			switch {
			case err == nil:
				accepted.Add(1)
			case errors.Is(err, bus.ErrAlreadyAnswered), errors.Is(err, bus.ErrNotParked):
				already.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if accepted.Load() != 1 || already.Load() != handlers-1 {
		t.Fatalf("accepted %d, refused %d", accepted.Load(), already.Load())
	}
	done := nextEvent(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	_ = done.DataAs(&bd)
	if r := bd.Results[0]; r.State != "error" || r.Error == nil || r.Error.Code != bus.CodeToolError {
		t.Fatalf("result %s", jsonOf(r))
	}
}

func TestQueuedCallsRunAfterAnswer(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	wt := e.addWriteTools(t)
	e.setMode(t, "s1", "bypass")
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	calls := []bus.Call{
		{ID: "c1", Name: "peek"},
		{ID: "c2", Name: "ext"},
		{ID: "c3", Name: "reset_tools"}, // unknown here (no meta groups): safe, reported when its run comes
		{ID: "c4", Name: "write", Input: json.RawMessage(`{"v":1}`)},
	}
	r := e.callParked(t, "s1", "r1", calls...)
	if len(r.Results) != 3 || r.Results[0].ID != "c1" || r.Results[1].ID != "c3" || r.Results[2].ID != "c4" {
		t.Fatalf("results = %s", jsonOf(r.Results))
	}
	var kinds []string
	for _, p := range r.Parked {
		kinds = append(kinds, p.ID+":"+p.Kind)
	}
	// c3 and c4 are in the same safe run as c1 and c2 (all concurrency-safe),
	// so they ran; nothing is queued.
	if !slices.Equal(kinds, []string{"c2:external"}) {
		t.Fatalf("parked = %v", kinds)
	}
	_ = wt
	if err := e.answer(t, "ext", "s1", "r1", "c2", bus.Answer{State: "success", Output: bus.Text("ok")}); err != nil {
		t.Fatal(err)
	}
	done := nextEvent(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	_ = done.DataAs(&bd)
	checkCallOrder(t, calls, bd.Results)
}

func TestQueuedBehindParkedRun(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "solo", ConcurrencySafe: false, ReadOnly: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			runs.Add(1)
			return textResult("solo done"), nil
		})
	})
	e.waitLive("solo")
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	calls := []bus.Call{{ID: "c1", Name: "ext"}, {ID: "c2", Name: "solo"}, {ID: "c3", Name: "ext"}}
	r := e.callParked(t, "s1", "r1", calls...)
	var kinds []string
	for _, p := range r.Parked {
		kinds = append(kinds, p.ID+":"+p.Kind+":"+p.Subject)
	}
	want := []string{"c1:external:toolbus.answer.ext", "c2:queued:toolbus.answer.solo", "c3:queued:toolbus.answer.ext"}
	if len(r.Results) != 0 || !slices.Equal(kinds, want) {
		t.Fatalf("reply results %s parked %v", jsonOf(r.Results), kinds)
	}
	if runs.Load() != 0 {
		t.Fatal("a queued call ran before the parked run was answered")
	}
	if err := e.answer(t, "ext", "s1", "r1", "c1", bus.Answer{State: "success", Output: bus.Text("one")}); err != nil {
		t.Fatal(err)
	}
	// solo runs, then c3 parks in its turn: operators see it in parked.list.
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		var list struct {
			Parked []struct{ ID string } `json:"parked"`
		}
		if err := e.client.Admin(t.Context(), "parked.list", "s1", nil, &list); err != nil {
			return err
		}
		if len(list.Parked) != 1 || list.Parked[0].ID != "c3" {
			return fmt.Errorf("parked.list %+v, want c3", list.Parked)
		}
		return nil
	})
	if runs.Load() != 1 {
		t.Fatalf("solo ran %d times", runs.Load())
	}
	if err := e.answer(t, "ext", "s1", "r1", "c3", bus.Answer{State: "success", Output: bus.Text("three")}); err != nil {
		t.Fatal(err)
	}
	// One call.parked for the batch (docs/protocol.md 3.4), none when c3 parked later.
	events := collect(t, ev, batchDone("r1"))
	var bd bus.BatchDone
	parkedEvents := 0
	for _, x := range events {
		switch x.Type {
		case bus.TypeCallParked:
			parkedEvents++
		case bus.TypeBatchDone:
			_ = x.DataAs(&bd)
		}
	}
	if parkedEvents != 1 {
		t.Fatalf("%d call.parked events for one batch", parkedEvents)
	}
	checkCallOrder(t, calls, bd.Results)
	if textOf(bd.Results[1]) != "solo done" || textOf(bd.Results[2]) != "three" {
		t.Fatalf("results %s", jsonOf(bd.Results))
	}
}

func TestParkedExpiryAndCancel(t *testing.T) {
	e := startEnv(t, 1, false, router.Config{ParkTTL: 300 * time.Millisecond})
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	e.callParked(t, "s1", "r1", bus.Call{ID: "c1", Name: "ext"})
	done := nextEvent(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	_ = done.DataAs(&bd)
	wantFailure(t, bd.Results[0], "error", bus.CodeTimeout, "Tool execution timeout after 300ms")
	wantCode(t, e.answer(t, "ext", "s1", "r1", "c1", bus.Answer{State: "success"}), bus.CodeNotParked)
}

func TestCancelParkedCall(t *testing.T) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	e.callParked(t, "s1", "r1", bus.Call{ID: "c1", Name: "ext"}, bus.Call{ID: "c2", Name: "ext"})
	if err := e.client.Cancel(t.Context(), "s1", "r1"); err != nil {
		t.Fatal(err)
	}
	done := nextEvent(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	_ = done.DataAs(&bd)
	for _, res := range bd.Results {
		wantFailure(t, res, "interrupted", bus.CodeInterrupted, bus.InterruptedText)
	}
	wantCode(t, e.answer(t, "ext", "s1", "r1", "c1", bus.Answer{State: "success"}), bus.CodeNotParked)
	// Cancelling an unknown reply id is a no-op.
	if err := e.client.Cancel(t.Context(), "s1", "nope"); err != nil {
		t.Fatal(err)
	}
}

func TestPermissionModes(t *testing.T) {
	e := newEnv(t, 1)
	wt := e.addWriteTools(t)
	// default: a write asks, on P.confirm.write, with a suggested rule.
	r := e.callParked(t, "def", "r1", bus.Call{ID: "c1", Name: "write", Input: json.RawMessage(`{"v":1}`)})
	if len(r.Parked) != 1 || r.Parked[0].Kind != bus.KindConfirm || r.Parked[0].Subject != "toolbus.answer.write" || len(r.Parked[0].SuggestedRules) == 0 {
		t.Fatalf("default mode reply %s", jsonOf(r))
	}
	req := e.handoff(t, "toolbus.confirm.write")
	var data bus.HandoffRequest
	if err := req.DataAs(&data); err != nil || req.Type != bus.TypeConfirmReq || len(data.SuggestedRules) == 0 || data.Reason == "" {
		t.Fatalf("confirm request %s", req.Data)
	}
	// Read-only tools never ask.
	wantSuccess(t, e.call(t, "def", []bus.Call{{ID: "p", Name: "peek"}}).Results[0], `peek ran {}`)
	// explore denies writes.
	e.setMode(t, "exp", "explore")
	res := e.call(t, "exp", []bus.Call{{ID: "c1", Name: "write", Input: json.RawMessage(`{"v":1}`)}}).Results[0]
	if res.State != "denied" || res.Error.Code != bus.CodeDenied {
		t.Fatalf("explore: %s", jsonOf(res))
	}
	wantSuccess(t, e.call(t, "exp", []bus.Call{{ID: "p", Name: "peek"}}).Results[0], `peek ran {}`)
	// bypass runs it.
	e.setMode(t, "byp", "bypass")
	before := wt.runs.Load()
	wantSuccess(t, e.call(t, "byp", []bus.Call{{ID: "c1", Name: "write", Input: json.RawMessage(`{"v":2}`)}}).Results[0], `write ran {"v":2}`)
	if wt.runs.Load() != before+1 {
		t.Fatal("bypass did not run the tool")
	}
	// dont_ask turns the ask into a deny.
	e.setMode(t, "dont", "dont_ask")
	if res := e.call(t, "dont", []bus.Call{{ID: "c1", Name: "write"}}).Results[0]; res.State != "denied" {
		t.Fatalf("dont_ask: %s", jsonOf(res))
	}
	// A dangerous path asks even in bypass.
	r = e.callParked(t, "byp", "r2", bus.Call{ID: "c1", Name: "save", Input: json.RawMessage(`{"path":"/srv/app/.env"}`)})
	if len(r.Parked) != 1 || r.Parked[0].Kind != bus.KindConfirm {
		t.Fatalf("dangerous path in bypass: %s", jsonOf(r))
	}
	if err := e.client.Admin(t.Context(), "session.mode", "x", map[string]string{"mode": "yolo"}, nil); !errors.Is(err, bus.ErrBadRequest) {
		t.Fatalf("bad mode: %v", err)
	}
}

func TestConfirmationFlow(t *testing.T) {
	e := newEnv(t, 2)
	wt := e.addWriteTools(t)
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	yes, no := true, false

	// Edited input is validated again; a bad edit changes nothing.
	e.callParked(t, "s1", "r1", bus.Call{ID: "c1", Name: "write", Input: json.RawMessage(`{"v":1}`)})
	wantCode(t, e.answer(t, "write", "s1", "r1", "c1", bus.Answer{Confirmed: &yes, Input: json.RawMessage(`{"v":"x"}`)}), bus.CodeBadRequest)
	wantCode(t, e.answer(t, "write", "s1", "r1", "c1", bus.Answer{State: "success"}), bus.CodeBadRequest)
	if err := e.answer(t, "write", "s1", "r1", "c1", bus.Answer{Confirmed: &yes, Input: json.RawMessage(`{"v":42}`)}); err != nil {
		t.Fatal(err)
	}
	done := nextEvent(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	_ = done.DataAs(&bd)
	wantSuccess(t, bd.Results[0], `write ran {"v":42}`)
	if wt.lastInput.Load() != `{"v":42}` {
		t.Fatalf("worker saw %v", wt.lastInput.Load())
	}

	// Refused: denied with the exact text.
	e.callParked(t, "s1", "r2", bus.Call{ID: "c1", Name: "write"})
	if err := e.answer(t, "write", "s1", "r2", "c1", bus.Answer{Confirmed: &no}); err != nil {
		t.Fatal(err)
	}
	done = nextEvent(t, ev, bus.TypeBatchDone)
	bd = bus.BatchDone{}
	_ = done.DataAs(&bd)
	wantFailure(t, bd.Results[0], "denied", bus.CodeDenied, `<system-reminder>The execution of tool "write" is denied by user!</system-reminder>`)

	// Two calls covered by one rule: answering the first with the rule
	// confirms the second too.
	r := e.callParked(t, "s1", "r3", bus.Call{ID: "c1", Name: "shell", Input: json.RawMessage(`{"command":"git status"}`)},
		bus.Call{ID: "c2", Name: "shell", Input: json.RawMessage(`{"command":"git log"}`)})
	if len(r.Parked) != 2 {
		t.Fatalf("reply %s", jsonOf(r))
	}
	rule := r.Parked[0].SuggestedRules[0]
	if rule.Pattern != "git:*" {
		t.Fatalf("suggested rule %+v", rule)
	}
	if err := e.answer(t, "shell", "s1", "r3", "c1", bus.Answer{Confirmed: &yes, Rules: []bus.Rule{rule}}); err != nil {
		t.Fatal(err)
	}
	done = nextEvent(t, ev, bus.TypeBatchDone)
	bd = bus.BatchDone{}
	_ = done.DataAs(&bd)
	wantSuccess(t, bd.Results[0], `shell ran {"command":"git status"}`)
	wantSuccess(t, bd.Results[1], `shell ran {"command":"git log"}`)

	// Remembered: git runs without asking; gitk still asks.
	wantSuccess(t, e.call(t, "s1", []bus.Call{{ID: "c1", Name: "shell", Input: json.RawMessage(`{"command":"git"}`)}}).Results[0], `shell ran {"command":"git"}`)
	r = e.callParked(t, "s1", "r5", bus.Call{ID: "c1", Name: "shell", Input: json.RawMessage(`{"command":"gitk"}`)})
	if len(r.Parked) != 1 || r.Parked[0].Kind != bus.KindConfirm {
		t.Fatalf("gitk: %s", jsonOf(r))
	}
}

func TestResentParkedBatch(t *testing.T) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	var runs atomic.Int32
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "side", ConcurrencySafe: true}, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			runs.Add(1)
			return textResult("side done"), nil
		})
	})
	e.waitLive("side")
	calls := []bus.Call{{ID: "c1", Name: "side"}, {ID: "c2", Name: "ext"}}
	first := e.callParked(t, "s1", "r1", calls...)
	again := e.callParked(t, "s1", "r1", calls...)
	if jsonOf(first.Parked) != jsonOf(again.Parked) || len(again.Results) != 1 || textOf(again.Results[0]) != "side done" {
		t.Fatalf("re-sent parked batch:\nfirst %s\nagain %s", jsonOf(first), jsonOf(again))
	}
	if runs.Load() != 1 {
		t.Fatalf("the side-effecting call ran %d times", runs.Load())
	}
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	if err := e.answer(t, "ext", "s1", "r1", "c2", bus.Answer{State: "success", Output: bus.Text("ok")}); err != nil {
		t.Fatal(err)
	}
	done := nextEvent(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	_ = done.DataAs(&bd)
	checkCallOrder(t, calls, bd.Results)
}

// Two copies of each batch sent at once (an agent that re-sends, docs/
// protocol.md 3.1) reach the two routers; whichever reply comes first, its
// handler answers every call listed as parked the moment it comes. Each
// answer finds its call parked (6.1) or already answered by the other
// copy's handler, never not_parked: a copy that adopts the other's
// continuation lists a call only once its record is written.
func TestCopiesListOnlyWrittenRecords(t *testing.T) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	calls := []bus.Call{{ID: "a", Name: "ext"}, {ID: "b", Name: "ext"}, {ID: "c", Name: "ext"}}
	for i := range 20 {
		reply := fmt.Sprintf("r%d", i)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				r, err := e.client.Call(testCtx(t), "s1", bus.Batch{Calls: calls}, client.WithReplyID(reply))
				// A copy that comes after some answers has their results.
				if err != nil || len(r.Parked)+len(r.Results) != len(calls) {
					t.Errorf("batch %s: %v, %s", reply, err, jsonOf(r))
					return
				}
				for _, p := range r.Parked {
					err := e.answer(t, "ext", "s1", reply, p.ID, bus.Answer{State: "success", Output: bus.Text(p.ID)})
					var be *bus.Error
					if err != nil && !(errors.As(err, &be) && be.Code == bus.CodeAlreadyAnswered) {
						t.Errorf("batch %s: answer %s, listed as parked: %v", reply, p.ID, err)
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}
