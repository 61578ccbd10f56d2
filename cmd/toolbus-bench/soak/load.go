package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/bench"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// soakKind is one kind of call the soak's agents make. Adding a kind is
// one entry in soakKinds.
type soakKind struct {
	name   string
	tool   string
	weight int // share of the calls
	// input returns a call's input and the text its successful result must
	// have (callID is the call's id).
	input func(r *rand.Rand, callID string) (input json.RawMessage, want string)
	// once: not read-only, so two different results are a duplicate.
	once bool
	// effect: each execution appends a line to the effects file
	// (toolworker's record_effect tools), so executions are counted.
	effect bool
	// durable (protocol.md 5.8): unknown_outcome is wrong, and a repeat
	// effect line is a redelivery, not a second effect.
	durable bool
	// park is "" or the kind of park the call goes through first
	// (external, confirm); the soak's approver answers it.
	park string
	// answer is the approver's answer to a parked call.
	answer func(callID string) bus.Answer
}

// soakKinds are the calls of a soak.
var soakKinds = []soakKind{
	{name: "side_effect", tool: "record_effect", weight: 4, once: true, effect: true,
		input: func(_ *rand.Rand, id string) (json.RawMessage, string) {
			return json.RawMessage(`{"tag":"soak"}`), "recorded " + id
		}},
	{name: "slow_effect", tool: "record_effect", weight: 2, once: true, effect: true,
		input: func(r *rand.Rand, id string) (json.RawMessage, string) {
			return mustJSON(map[string]any{"tag": "slow", "before_ms": r.IntN(800), "after_ms": r.IntN(800)}), "recorded " + id
		}},
	// Durable: a killed worker's call goes to another; idempotent by call key.
	{name: "durable", tool: "record_effect_durable", weight: 2, once: true, effect: true, durable: true,
		input: func(r *rand.Rand, id string) (json.RawMessage, string) {
			return mustJSON(map[string]any{"tag": "durable", "before_ms": r.IntN(800), "after_ms": r.IntN(800)}), "recorded " + id
		}},
	{name: "read_only", tool: "word_count", weight: 3,
		input: func(r *rand.Rand, _ string) (json.RawMessage, string) {
			n := r.IntN(20)
			return mustJSON(map[string]string{"text": strings.Repeat("word ", n)}), fmt.Sprintf(`{"words":%d}`, n)
		}},
	{name: "slow_read", tool: "slow_echo", weight: 1,
		input: func(r *rand.Rand, id string) (json.RawMessage, string) {
			return mustJSON(map[string]any{"text": "echo " + id, "ms": 100 + r.IntN(1400)}), "echo " + id
		}},
	{name: "parked_external", tool: soakExternalTool, weight: 1, once: true, park: "external",
		input: func(_ *rand.Rand, id string) (json.RawMessage, string) {
			return json.RawMessage(`{}`), "approved " + id
		},
		answer: func(id string) bus.Answer {
			return bus.Answer{State: bus.StateSuccess, Output: bus.Text("approved " + id)}
		}},
	{name: "parked_confirm", tool: "record_effect_confirm", weight: 1, once: true, effect: true, park: "confirm",
		input: func(_ *rand.Rand, id string) (json.RawMessage, string) {
			return json.RawMessage(`{"tag":"confirmed"}`), "recorded " + id
		},
		answer: func(string) bus.Answer { return bus.Answer{Confirmed: new(true)} }},
}

// soakExternalTool is the external tool the soak registers itself and
// answers as its external handler.
const soakExternalTool = "soak_approve"

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with maps of strings and numbers
	}
	return b
}

// pickKind chooses a kind by weight.
func pickKind(r *rand.Rand) *soakKind {
	total := 0
	for i := range soakKinds {
		total += soakKinds[i].weight
	}
	n := r.IntN(total)
	for i := range soakKinds {
		if n -= soakKinds[i].weight; n < 0 {
			return &soakKinds[i]
		}
	}
	return &soakKinds[0]
}

// The soak's load: agents that behave as protocol.md says agents should,
// an approver that answers parked calls, and a record of every call.

const (
	// soakRequest bounds one send of a batch; an agent re-sends after it.
	soakRequest = 20 * time.Second
	// soakStatusEvery is how long an agent waits for the events of a parked
	// batch before it re-sends it (with the same reply id) to ask.
	soakStatusEvery = 10 * time.Second
	// soakHandoffWait is how long the approver waits for a handoff request
	// before answering from the reply (a missed handoff).
	soakHandoffWait = 20 * time.Second
	// soakAnswerFor bounds the approver's tries to answer one call.
	soakAnswerFor = 2 * time.Minute
	// soakBatchCalls is the most calls in one batch.
	soakBatchCalls = 4
	// soakBatchesPerSession: an agent starts a new session after this many.
	soakBatchesPerSession = 20
)

// soakStep is one line of a call's event trail.
type soakStep struct {
	at   time.Duration // since the load started
	what string
}

// soakCall is what the soak knows about one call.
type soakCall struct {
	key   string // session.reply.call
	id    string
	kind  *soakKind
	input json.RawMessage
	want  string
	batch *soakBatch

	final     *bus.Result
	finalAt   time.Time
	seen      map[string]string // final result summary → where it was first seen
	handoff   bool              // its handoff request came through the stream
	answering bool              // the approver took it on
	answered  time.Time         // when an answer was accepted
	lost      bool
	effects   int // executions in the effects file
	trail     []soakStep
}

// soakBatch is one model turn.
type soakBatch struct {
	session, reply string
	calls          []*soakCall
	first          time.Time
	expiry         time.Time
	sends          int
	done           bool          // batch.done was seen
	signal         chan struct{} // a call got its final result
}

// soakTracker holds every call; its methods are safe for concurrent use.
type soakTracker struct {
	start time.Time
	mu    sync.Mutex
	calls map[string]*soakCall
	order []*soakCall
	bats  map[string]*soakBatch // session.reply
	list  []*soakBatch
	// handoffMissed counts parked calls whose handoff request the approver
	// never saw in time.
	handoffMissed int
}

func (t *soakTracker) add(b *soakBatch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bats[b.session+"."+b.reply] = b
	t.list = append(t.list, b)
	for _, c := range b.calls {
		t.calls[c.key] = c
		t.order = append(t.order, c)
	}
}

// step adds a line to c's trail; t.mu is held.
func (t *soakTracker) step(c *soakCall, format string, args ...any) {
	c.trail = append(c.trail, soakStep{time.Since(t.start), fmt.Sprintf(format, args...)})
}

// note adds a line to the trail of the call with key, if the soak made it,
// and returns that call.
func (t *soakTracker) note(key, format string, args ...any) *soakCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.calls[key]
	if c != nil {
		t.step(c, format, args...)
	}
	return c
}

// summary is what two results of one call are compared by.
func summary(r bus.Result) string {
	var text []string
	for _, b := range r.Output {
		text = append(text, b.Text)
	}
	code := ""
	if r.Error != nil {
		code = r.Error.Code
	}
	return r.State + "/" + code + ": " + strings.Join(text, "|")
}

func clip(s string) string {
	if len(s) > 160 {
		return s[:160] + "..."
	}
	return s
}

// observe records a result of key seen at from (a reply or an event). An
// unavailable result is not final: nothing ran, and the agent re-sends.
func (t *soakTracker) observe(key string, r bus.Result, from string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.calls[key]
	if c == nil {
		return
	}
	sum := summary(r)
	t.step(c, "%s: %s", from, clip(sum))
	if r.Error != nil && r.Error.Code == bus.CodeUnavailable {
		return
	}
	if _, ok := c.seen[sum]; !ok {
		c.seen[sum] = from
	}
	if c.final == nil && !c.lost {
		c.final, c.finalAt = &r, time.Now()
		select {
		case c.batch.signal <- struct{}{}:
		default:
		}
	}
}

// batchDone notes a batch.done event.
func (t *soakTracker) batchDone(session, reply string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.bats[session+"."+reply]; b != nil {
		b.done = true
	}
}

// pending returns the calls of b without a final result.
func (t *soakTracker) pending(b *soakBatch) []*soakCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(b.calls), func(c *soakCall) bool { return c.final != nil })
}

// giveUp is when the agent stops waiting for b: its expirytime (or the
// last accepted answer, when later) plus the grace.
func (t *soakTracker) giveUp(b *soakBatch, grace time.Duration) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := b.expiry
	for _, c := range b.calls {
		if c.answered.After(last) {
			last = c.answered
		}
	}
	return last.Add(grace)
}

// soakLoad drives the agents and the approver.
type soakLoad struct {
	o    *Options
	t    *soakTracker
	run  string // the run's id, in every session and reply id
	appr *soakApprover
}

// soakAgent is one agent: its client, its randomness and the batches it
// made so far.
type soakAgent struct {
	i, n int
	r    *rand.Rand
	cl   *client.Client
}

// batch makes a's next batch and runs it to its end (or gives it up);
// stop ends it at once (the operator interrupted).
func (l *soakLoad) batch(stop context.Context, a *soakAgent) {
	i, n := a.i, a.n
	a.n++
	b := &soakBatch{session: fmt.Sprintf("%s-a%d-s%d", l.run, i, n/soakBatchesPerSession),
		reply: fmt.Sprintf("%s-a%d-b%d", l.run, i, n), signal: make(chan struct{}, 1)}
	for k := range 1 + a.r.IntN(soakBatchCalls) {
		kind := pickKind(a.r)
		id := fmt.Sprintf("c%d", k+1)
		in, want := kind.input(a.r, id)
		b.calls = append(b.calls, &soakCall{key: bus.CallKey(b.session, b.reply, id), id: id, kind: kind,
			input: in, want: want, batch: b, seen: map[string]string{}})
	}
	b.first = time.Now()
	b.expiry = b.first.Add(l.o.BatchDeadline)
	l.t.add(b)
	l.runBatch(stop, a.cl, b)
}

// runBatch sends b and re-sends it with the same reply id as an agent must
// (time-out, no router, unavailable, parked calls pending);
// unknown_outcome is final.
func (l *soakLoad) runBatch(stop context.Context, cl *client.Client, b *soakBatch) {
	calls := make([]bus.Call, len(b.calls))
	for i, c := range b.calls {
		calls[i] = bus.Call{ID: c.id, Name: c.kind.tool, Input: c.input}
	}
	for {
		pend := l.t.pending(b)
		if len(pend) == 0 {
			return
		}
		if time.Now().After(l.t.giveUp(b, l.o.Grace)) || stop.Err() != nil {
			l.t.mu.Lock()
			for _, c := range pend {
				c.lost = true
				l.t.step(c, "agent gave up: no final result by the batch's expirytime + %v grace after %d sends", l.o.Grace, b.sends)
			}
			l.t.mu.Unlock()
			return
		}
		b.sends++
		from := fmt.Sprintf("reply to send %d", b.sends)
		ctx, cancel := context.WithTimeout(stop, soakRequest)
		rep, err := cl.Call(ctx, b.session, bus.Batch{Calls: calls}, client.WithReplyID(b.reply), client.WithExpiry(b.expiry))
		cancel()
		if err != nil {
			for _, c := range pend {
				l.t.note(c.key, "send %d: %v", b.sends, err)
			}
			wait := 250 * time.Millisecond
			if _, ok := errors.AsType[*bus.Error](err); ok {
				wait = time.Second // a refused batch: a bug, shown in the trail; try again slowly
			}
			l.wait(stop, b, wait)
			continue
		}
		unavailable := false
		for _, res := range rep.Results {
			if res.Error != nil && res.Error.Code == bus.CodeUnavailable {
				unavailable = true
			}
			l.t.observe(bus.CallKey(b.session, b.reply, res.ID), res, from)
		}
		for _, p := range rep.Parked {
			c := l.t.note(bus.CallKey(b.session, b.reply, p.ID), "%s: parked (%s)", from, p.Kind)
			if c != nil && p.Kind != bus.KindQueued {
				l.appr.expect(c)
			}
		}
		switch {
		case len(l.t.pending(b)) == 0:
			return
		case unavailable:
			l.wait(stop, b, 500*time.Millisecond)
		default:
			l.wait(stop, b, soakStatusEvery)
		}
	}
}

// wait returns after d, once every call of b is final, or when stop ends.
func (l *soakLoad) wait(stop context.Context, b *soakBatch, d time.Duration) {
	timeout := time.After(d)
	for len(l.t.pending(b)) > 0 {
		select {
		case <-timeout:
			return
		case <-stop.Done():
			return
		case <-b.signal:
		}
	}
}

// events follows every session's events through the events stream (an
// ordered consumer, so a node loss does not skip any).
func (l *soakLoad) events(ctx context.Context, cl *client.Client) error {
	evs, err := cl.Replay(ctx, "*")
	if err != nil {
		return err
	}
	go func() {
		for e := range evs.C {
			from := e.Type[len("io.toolbus."):] + " event from " + e.Source
			switch e.Type {
			case bus.TypeCallResult:
				var r bus.Result
				if e.DataAs(&r) == nil {
					l.t.observe(bus.CallKey(e.SessionID, e.ReplyID, r.ID), r, from)
				}
			case bus.TypeBatchDone:
				var d bus.BatchDone
				if e.DataAs(&d) == nil {
					for _, r := range d.Results {
						l.t.observe(bus.CallKey(e.SessionID, e.ReplyID, r.ID), r, from)
					}
					l.t.batchDone(e.SessionID, e.ReplyID)
				}
			case bus.TypeCallParked:
				var p bus.ParkedEvent
				if e.DataAs(&p) == nil {
					for _, c := range p.Calls {
						l.t.note(bus.CallKey(e.SessionID, e.ReplyID, c.ID), "%s: parked (%s)", from, c.Kind)
					}
				}
			}
		}
	}()
	context.AfterFunc(ctx, func() { _ = evs.Stop(context.WithoutCancel(ctx)) })
	return nil
}

// soakApprover is the simulated external handler and approver, answering
// every handoff request after a short think time.
type soakApprover struct {
	l   *soakLoad
	cl  *client.Client
	ctx context.Context
}

// follow reads the handoff requests of the soak's parked tools through a
// router (docs/protocol.md 6.2), as a handler started for them would.
func (a *soakApprover) follow(ctx context.Context) error {
	for kind, tool := range map[string]string{bus.KindExternal: soakExternalTool, bus.KindConfirm: "record_effect_confirm"} {
		reqs, err := a.cl.Parked().Follow(ctx, kind, tool)
		if err != nil {
			return fmt.Errorf("handoff: %w", err)
		}
		go func() {
			for e := range reqs.C {
				a.request(e)
			}
		}()
	}
	return nil
}

// request answers the call of a handoff request.
func (a *soakApprover) request(e *bus.Event) {
	key := bus.CallKey(e.SessionID, e.ReplyID, e.ToolCallID)
	a.l.t.mu.Lock()
	c := a.l.t.calls[key]
	if c != nil {
		c.handoff = true
		a.l.t.step(c, "handoff request %s from %s", e.Type[len("io.toolbus."):], e.Source)
	}
	a.l.t.mu.Unlock()
	if c != nil {
		a.answer(c, "handoff")
	}
}

// expect notes a parked call from a reply, answered anyway (a missed
// handoff) if no request comes within soakHandoffWait.
func (a *soakApprover) expect(c *soakCall) {
	time.AfterFunc(soakHandoffWait, func() {
		a.l.t.mu.Lock()
		missed := !c.handoff && !c.answering && c.final == nil
		if missed {
			a.l.t.handoffMissed++
			a.l.t.step(c, "approver: no handoff request within %v; answering from the agent's reply", soakHandoffWait)
		}
		a.l.t.mu.Unlock()
		if missed {
			a.answer(c, "reply")
		}
	})
}

// answer answers c once (several tries when the answer's fate is unknown).
func (a *soakApprover) answer(c *soakCall, via string) {
	t := a.l.t
	t.mu.Lock()
	if c.answering {
		t.mu.Unlock()
		return
	}
	c.answering = true
	t.mu.Unlock()
	think := time.Duration(rand.IntN(1000)) * time.Millisecond
	go func() {
		_ = bus.Sleep(a.ctx, think)
		ans, b, try := c.kind.answer(c.id), c.batch, 0
		err := bench.Poll(a.ctx, soakAnswerFor, 500*time.Millisecond, func() error {
			try++
			ctx, cancel := context.WithTimeout(a.ctx, 10*time.Second)
			err := a.cl.Parked().Answer(ctx, c.kind.tool, b.session, b.reply, c.id, ans)
			cancel()
			be, isBus := errors.AsType[*bus.Error](err)
			t.mu.Lock()
			defer t.mu.Unlock()
			switch {
			case err == nil:
				t.step(c, "approver (%s): answer accepted on try %d", via, try)
			case isBus && be.Code == bus.CodeAlreadyAnswered:
				t.step(c, "approver (%s): try %d: already answered (an earlier try landed)", via, try)
			case isBus && be.Code == bus.CodeNotParked && (try > 1 || c.final != nil):
				t.step(c, "approver (%s): try %d: not parked any more (an earlier try landed, or it settled)", via, try)
			default:
				t.step(c, "approver (%s): try %d: %v", via, try, err)
				return errors.New("retry")
			}
			c.answered = time.Now()
			return nil
		})
		if err != nil {
			t.note(c.key, "approver: gave up answering after %d tries", try)
		}
	}()
}
