package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/parked"
)

// Table tests of the executor chain's middlewares on fakes (chain.go):
// a guardrail that is off is not in the chain; one that is on does what
// docs/guardrails.md says, and nothing else.

// fakeNext is the executor below a middleware: it counts what reaches it.
type fakeNext struct {
	mu  sync.Mutex
	ran []string
}

func (f *fakeNext) Exec(_ context.Context, j *job) bus.Result {
	j.admit()
	f.mu.Lock()
	f.ran = append(f.ran, j.call.ID)
	f.mu.Unlock()
	return bus.Result{ID: j.call.ID, Name: j.call.Name, State: bus.StateSuccess, Output: bus.Text("ran")}
}

// jobFor is a job of a one-call batch of target.
func jobFor(id string, target groups.Resolved) *job {
	b := &batch{ctx: context.Background(), turn: turn{session: "s1", replyID: "r1", data: bus.Batch{User: json.RawMessage(`"alice"`)}}}
	c := &callState{call: bus.Call{ID: id, Name: "t", Input: json.RawMessage(`{}`)}, target: target, input: json.RawMessage(`{}`)}
	if target.Tool != nil {
		c.call.Name = target.Tool.Def.Name
	}
	b.calls = []*callState{c}
	return jobOf(b, c)
}

func TestChainOff(t *testing.T) {
	if mws := (guardrails{}).middlewares(); len(mws) != 0 {
		t.Fatalf("every guardrail off, yet %d middlewares", len(mws))
	}
	last := &fakeNext{}
	if got := chain(last, nil, nil); got != Executor(last) {
		t.Fatalf("chain of nothing is %T, want the executor itself", got)
	}
	g := guardrails{audit: &auditTrail{}, guard: &quotas{}}
	if mws := g.middlewares(); len(mws) != 2 {
		t.Fatalf("audit and cache on: %d middlewares", len(mws))
	}
}

type fakeLimiter struct {
	mu     sync.Mutex
	budget int // calls allowed; -1 unlimited
	err    error
	calls  []limits.Call
}

func (f *fakeLimiter) Check(_ context.Context, c limits.Call) (*limits.Refusal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	if f.err != nil {
		return nil, f.err
	}
	if c.CacheHit || f.budget < 0 {
		return nil, nil
	}
	if f.budget == 0 {
		return &limits.Refusal{Rule: "one", Kind: limits.KindBudget, RetryAfter: time.Second}, nil
	}
	f.budget--
	return nil, nil
}

type fakeCounted bool

func (f fakeCounted) counted(context.Context, string, bool) bool { return bool(f) }

type fakeStore struct {
	mu         sync.Mutex
	m          map[string]bus.Result
	gets, puts int
	hang       chan struct{} // non-nil: a Put waits for it to close (or its ctx to end)
}

func (f *fakeStore) Get(_ context.Context, key string) (bus.Result, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	r, ok := f.m[key]
	return r, ok
}

func (f *fakeStore) Put(ctx context.Context, key string, _ time.Duration, res bus.Result) bool {
	if f.hang != nil {
		select {
		case <-f.hang:
		case <-ctx.Done():
			return false
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts++
	f.m[key] = res
	return true
}

// counts are f's gets and puts once q's writes in flight have ended.
func (f *fakeStore) counts(q *quotas) (gets, puts int) {
	q.wmu.Lock()
	var ends []chan struct{}
	for _, done := range q.writing {
		ends = append(ends, done)
	}
	q.wmu.Unlock()
	for _, done := range ends {
		<-done
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, f.puts
}

// newFakeCache gives q a result cache on a fake store, holding j's
// result when hit.
func newFakeCache(q *quotas, hit bool, j *job) *fakeStore {
	st := &fakeStore{m: map[string]bus.Result{}}
	q.cache, q.lookups = st, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"tool", "result"})
	if hit {
		key, _ := q.lookup(context.Background(), j)
		st.m[key] = bus.Result{State: bus.StateSuccess, Output: bus.Text("cached")}
		st.gets = 0
	}
	return st
}

func TestQuotaMiddleware(t *testing.T) {
	read := groups.Resolved{Tool: tool(t, bus.ToolDef{Name: "read", ReadOnly: true})}
	write := groups.Resolved{Tool: tool(t, bus.ToolDef{Name: "write"})}
	cached := groups.Resolved{Tool: tool(t, bus.ToolDef{Name: "lookup", ReadOnly: true, CacheTTLMS: 60_000})}
	for _, tc := range []struct {
		name    string
		target  groups.Resolved
		budget  int
		err     error
		counted bool
		cache   string // "", "hit", "miss"
		code    string // the result's error code; "" when it ran
		checks  int
		ran     bool
	}{
		{"within the budget it runs", read, 1, nil, false, "", "", 1, true},
		{"past it: limit_exceeded, nothing runs", read, 0, nil, false, "", bus.CodeLimitExceeded, 1, false},
		{"limits unreachable: unavailable (fail closed)", read, 1, errors.New("down"), false, "", bus.CodeUnavailable, 1, false},
		{"a built-in is not counted", groups.Resolved{Reset: true}, 0, nil, false, "", "", 0, true},
		{"the skill loader is not counted", groups.Resolved{Skill: true, Tool: read.Tool}, 0, nil, false, "", "", 0, true},
		{"a re-sent write the ledger holds is not counted", write, 0, nil, true, "", "", 0, true},
		{"a re-sent read-only call counts again", read, 0, nil, true, "", bus.CodeLimitExceeded, 1, false},
		{"a cache hit spends no quota and runs nothing", cached, 0, nil, false, "hit", "", 1, false},
		{"a cache miss counts, and runs", cached, 1, nil, false, "miss", "", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := jobFor("c1", tc.target)
			lim := &fakeLimiter{budget: tc.budget, err: tc.err}
			q := &quotas{lim: lim.Check, counted: fakeCounted(tc.counted).counted, log: discard}
			st := &fakeStore{}
			if tc.cache != "" {
				st = newFakeCache(q, tc.cache == "hit", j)
			}
			next := &fakeNext{}
			res := chain(next, q.wrap).Exec(context.Background(), j)
			if got := codeOf(res); got != tc.code {
				t.Fatalf("code %q, want %q (%+v)", got, tc.code, res)
			}
			if len(lim.calls) != tc.checks || (len(next.ran) == 1) != tc.ran {
				t.Fatalf("%d checks, ran %v; want %d, %v", len(lim.calls), next.ran, tc.checks, tc.ran)
			}
			if tc.code == bus.CodeLimitExceeded && (j.c.limitRule != "one" || res.Error.RetryAfterMS != 1000) {
				t.Fatalf("refusal: rule %q, %+v", j.c.limitRule, res.Error)
			}
			if tc.cache == "hit" && (!lim.calls[0].CacheHit || textOf(res.Output) != "cached" || res.ID != "c1") {
				t.Fatalf("hit: %+v, checked %+v", res, lim.calls[0])
			}
			if gets, puts := st.counts(q); tc.cache == "miss" && (gets != 1 || puts != 1) {
				t.Fatalf("a miss: %d gets, %d puts; want it looked up once and stored", gets, puts)
			}
		})
	}
}

// TestQuotaCallOrder: the calls of a parallel run are counted in call
// order, so which ones a budget refuses does not depend on scheduling.
func TestQuotaCallOrder(t *testing.T) {
	for range 20 {
		f := newFakePipeline(t, bus.ToolDef{Name: "echo", ReadOnly: true, ConcurrencySafe: true})
		f.p.quota = &quotas{lim: (&fakeLimiter{budget: 2}).Check, counted: fakeCounted(false).counted, log: discard}
		f.p.exec = chain(f.p.exec, f.p.quota.wrap)
		b := f.batchOf(t, "", call("c1", "echo"), call("c2", "echo"), call("c3", "echo"), call("c4", "echo"))
		if !b.run(0) {
			t.Fatal("batch did not complete")
		}
		var got []string
		for _, c := range b.calls {
			got = append(got, codeOf(*c.result))
		}
		if want := []string{"", "", bus.CodeLimitExceeded, bus.CodeLimitExceeded}; !slices.Equal(got, want) {
			t.Fatalf("codes %q, want %q", got, want)
		}
	}
}

// TestQuotaAdmitPark: a call that parks counts when it parks, unless an
// earlier copy of its batch parked it.
func TestQuotaAdmitPark(t *testing.T) {
	j := jobFor("c1", groups.Resolved{Tool: tool(t, bus.ToolDef{Name: "deploy"})})
	for _, tc := range []struct {
		counted bool
		budget  int
		code    string
		checks  int
	}{{false, 1, "", 1}, {false, 0, bus.CodeLimitExceeded, 1}, {true, 0, "", 0}} {
		lim := &fakeLimiter{budget: tc.budget}
		q := &quotas{lim: lim.Check, counted: fakeCounted(tc.counted).counted, log: discard}
		res := q.admitPark(j.b, j.c)
		if got := ""; res != nil {
			got = codeOf(*res)
			if got != tc.code {
				t.Errorf("%+v: code %q", tc, got)
			}
		} else if tc.code != "" {
			t.Errorf("%+v: admitted", tc)
		}
		if len(lim.calls) != tc.checks {
			t.Errorf("%+v: %d checks", tc, len(lim.calls))
		}
	}
}

func TestCacheMiddleware(t *testing.T) {
	cached := groups.Resolved{Tool: tool(t, bus.ToolDef{Name: "lookup", ReadOnly: true, CacheTTLMS: 60_000})}
	plain := groups.Resolved{Tool: tool(t, bus.ToolDef{Name: "read", ReadOnly: true})}
	for _, tc := range []struct {
		name       string
		target     groups.Resolved
		hit        bool
		ran        bool
		gets, puts int
	}{
		{"a miss runs and is stored", cached, false, true, 1, 1},
		{"a hit answers, nothing runs", cached, true, false, 1, 0},
		{"a tool without cache_ttl_ms runs, nothing stored", plain, false, true, 0, 0},
		{"a built-in passes", groups.Resolved{Search: true}, false, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := jobFor("c1", tc.target)
			q := &quotas{}
			st := newFakeCache(q, tc.hit, j)
			next := &fakeNext{}
			res := chain(next, q.wrap).Exec(context.Background(), j)
			if gets, puts := st.counts(q); (len(next.ran) == 1) != tc.ran || gets != tc.gets || puts != tc.puts || res.State != bus.StateSuccess {
				t.Fatalf("ran %v, %d gets, %d puts, %+v", next.ran, gets, puts, res)
			}
		})
	}
}

// TestCacheWriteHung (docs/security.md): a cacheable call whose cache
// write hangs (a slow or leaderless JetStream) is answered at once; the
// router's next call of it waits for the write and hits; past
// maxCacheWrites hung writes a result is not stored, and nothing waits.
func TestCacheWriteHung(t *testing.T) {
	cached := groups.Resolved{Tool: tool(t, bus.ToolDef{Name: "lookup", ReadOnly: true, CacheTTLMS: 60_000})}
	q := &quotas{log: discard}
	st := newFakeCache(q, false, jobFor("c1", cached))
	st.hang = make(chan struct{})
	next := &fakeNext{}
	exec := func(input string) <-chan bus.Result {
		j := jobFor("c1", cached)
		j.call.Input = json.RawMessage(input)
		out := make(chan bus.Result, 1)
		go func() { out <- chain(next, q.wrap).Exec(context.Background(), j) }()
		return out
	}
	answered := func(out <-chan bus.Result) bus.Result {
		t.Helper()
		select {
		case res := <-out:
			return res
		case <-time.After(10 * time.Second):
			t.Fatal("no answer in 10s")
			return bus.Result{}
		}
	}
	for i := range maxCacheWrites + 1 {
		if res := answered(exec(fmt.Sprintf(`{"i":%d}`, i))); res.State != bus.StateSuccess || textOf(res.Output) != "ran" {
			t.Fatalf("call %d with its write hung: %+v", i, res)
		}
	}
	q.wmu.Lock()
	inFlight := len(q.writing)
	q.wmu.Unlock()
	if inFlight != maxCacheWrites {
		t.Fatalf("%d writes in flight, want %d (the last one dropped)", inFlight, maxCacheWrites)
	}
	again := exec(`{"i":0}`)
	close(st.hang)
	if res := answered(again); res.State != bus.StateSuccess || len(next.ran) != maxCacheWrites+1 {
		t.Fatalf("the repeat once stored: %+v, %d runs", res, len(next.ran))
	}
	if _, puts := st.counts(q); puts != maxCacheWrites {
		t.Fatalf("%d stored, want %d", puts, maxCacheWrites)
	}
	if res := answered(exec(fmt.Sprintf(`{"i":%d}`, maxCacheWrites))); len(next.ran) != maxCacheWrites+2 {
		t.Fatalf("the dropped write's repeat: %+v, %d runs; want it run again", res, len(next.ran))
	}
}

type fakeTrail struct {
	recs   []*audit.Record
	inputs []json.RawMessage
	stored int
}

func (f *fakeTrail) Write(rec *audit.Record, input json.RawMessage) (*audit.Pending, error) {
	f.recs, f.inputs = append(f.recs, rec), append(f.inputs, input)
	return &audit.Pending{}, nil
}
func (f *fakeTrail) WriteRefusal(rec *audit.Record) (*audit.Pending, error) { return f.Write(rec, nil) }
func (f *fakeTrail) Stored(_ context.Context, ps []*audit.Pending) []*audit.Pending {
	f.stored += len(ps)
	return nil
}

type fakeModes struct{}

func (fakeModes) Session(string) *groups.Session { return &groups.Session{Mode: "default"} }

func TestAuditMiddleware(t *testing.T) {
	read := groups.Resolved{Tool: tool(t, bus.ToolDef{Name: "read", ReadOnly: true})}
	for _, tc := range []struct {
		name      string
		target    groups.Resolved
		rule      string // the permission engine's reason, decided once
		limitRule string
		res       *bus.Result // the result below the middleware; nil: it ran
		behavior  string
		wantRule  string
	}{
		{"an allowed call that ran", read, "read-only", "", nil, audit.Allow, "read-only"},
		{"a limited call", read, "read-only", "one", new(bus.ErrorResult(bus.Call{ID: "c1"}, bus.CodeLimitExceeded, "x")), audit.Limit, "one"},
		{"a denied call", read, "explore mode", "", new(bus.Result{ID: "c1", State: bus.StateDenied}), audit.Deny, "explore mode"},
		{"a built-in", groups.Resolved{Reset: true}, "", "", nil, audit.Builtin, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &fakeTrail{}
			a := &auditTrail{tr: tr, id: "r1", log: discard, session: fakeModes{}.Session}
			j := jobFor("c1", tc.target)
			j.c.rule, j.c.limitRule = tc.rule, tc.limitRule
			var next Executor = &fakeNext{}
			if tc.res != nil {
				next = ExecFunc(func(context.Context, *job) bus.Result { return *tc.res })
			}
			chain(next, a.wrap).Exec(context.Background(), j)
			if len(tr.recs) != 1 {
				t.Fatalf("%d records", len(tr.recs))
			}
			d := tr.recs[0].Decision
			if d.Behavior != tc.behavior || d.Rule != tc.wantRule || d.Mode != "default" || tr.recs[0].User != "alice" {
				t.Fatalf("record %+v", tr.recs[0])
			}
			a.audited(j.b, nil)
			if tr.stored != 1 || len(j.b.audits) != 0 {
				t.Fatalf("audited: %d stored, %d left", tr.stored, len(j.b.audits))
			}
		})
	}
}

type fakeOnce struct{ keys []string }

func (f *fakeOnce) Once(_ context.Context, c ledger.Call, run func() bus.Result) (bus.Result, bool) {
	f.keys = append(f.keys, c.Key)
	if len(f.keys) > 1 {
		return bus.Result{ID: c.Call.ID, State: bus.StateSuccess, Output: bus.Text("recorded")}, false
	}
	return run(), true
}

func TestLedgerMiddleware(t *testing.T) {
	for _, tc := range []struct {
		name   string
		def    bus.ToolDef
		keys   int // calls through the ledger, of two runs
		ran    int
		second string
		landed [2]bool // each run's job.landed: the run's own record landed
	}{
		{"a read-only call runs every time, no ledger", bus.ToolDef{Name: "read", ReadOnly: true}, 0, 2, "ran", [2]bool{}},
		{"a write runs once per call key", bus.ToolDef{Name: "write"}, 2, 1, "recorded", [2]bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, next := &fakeOnce{}, &fakeNext{}
			x := chain(next, once(l.Once))
			var res bus.Result
			for i := range 2 {
				j := jobFor("c1", groups.Resolved{Tool: tool(t, tc.def)})
				res = x.Exec(context.Background(), j)
				if j.landed != tc.landed[i] {
					t.Fatalf("run %d: landed %v, want %v", i+1, j.landed, tc.landed[i])
				}
			}
			if len(l.keys) != tc.keys || len(next.ran) != tc.ran || textOf(res.Output) != tc.second {
				t.Fatalf("keys %v, ran %v, second %+v", l.keys, next.ran, res)
			}
			if tc.keys > 0 && l.keys[0] != "s1.r1.c1" && l.keys[0] != bus.CallKey("s1", "r1", "c1") {
				t.Fatalf("key %q", l.keys[0])
			}
		})
	}
}

func codeOf(res bus.Result) string {
	if res.Error == nil {
		return ""
	}
	return res.Error.Code
}

var discard = slog.New(slog.DiscardHandler)

// TestAuditParkedHeldInput: the audit record of a parked call that ended
// keeps the call's input, but a record a router took over once it ended
// holds a large input by its digest only (protocol 6.1, 1.23): its audit
// record then carries the record's input_digest and says the input is
// held, never the "held:" mark as the input.
func TestAuditParkedHeldInput(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    bus.ParkStatus
		input     string
		wantInput string // "": none given to the trail
	}{
		{"the caller's copy, whole", bus.ParkDone, `{"env":"prod"}`, `{"env":"prod"}`},
		{"taken over, held", bus.ParkDone, `"held:d1"`, ""},
		{"taken over, cancelled, held", bus.ParkCancelled, `"held:d1"`, ""},
		{"answered, not ended: the mark is an input like any", bus.ParkAnswered, `"held:d1"`, `"held:d1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTrail{}
			a := &auditTrail{tr: f, log: slog.New(slog.DiscardHandler), session: fakeModes{}.Session}
			rec := &parked.Record{Session: "s1", ReplyID: "r1", Status: tc.status, Kind: bus.KindConfirm, InputDigest: "sha256:abc",
				Call: bus.Call{ID: "c1", Name: "deploy", Input: json.RawMessage(tc.input)}}
			a.recordParked(t.Context(), rec, bus.Result{ID: "c1", Name: "deploy", State: bus.StateSuccess})
			if len(f.recs) != 1 {
				t.Fatalf("%d audit records", len(f.recs))
			}
			r, in := f.recs[0], string(f.inputs[0])
			if in != tc.wantInput {
				t.Fatalf("the trail got input %q, want %q", in, tc.wantInput)
			}
			if held := tc.wantInput == ""; held != (r.InputDigest == "sha256:abc" && r.InputOmitted != "") {
				t.Fatalf("input_digest %q, input_omitted %q", r.InputDigest, r.InputOmitted)
			}
		})
	}
}
