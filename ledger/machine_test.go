package ledger

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// The state machine of one call key, table-driven over the in-memory KV on
// the fake clock: what Claimed does from each entry it finds, and the entry
// it leaves.
func TestClaimedStateMachine(t *testing.T) {
	const lease = 15 * time.Second
	call := bus.Call{ID: "c1", Name: "t"}
	ok := bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("ran")}
	other := bus.Result{ID: "c1", Name: "t", State: bus.StateSuccess, Output: bus.Text("recorded")}
	full := &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}
	for _, tc := range []struct {
		name string
		// found is the entry in the bucket, made at the fake clock's now
		// (nil: none; raw: a corrupt one).
		found func(now time.Time) *Entry
		raw   string
		call  Call
		// refuse makes every write fail with it.
		refuse error
		// midRun, when set, runs while the call runs (after its claim).
		midRun func(kv *fakeKV)
		// ran is whether run runs; code the result's error code ("" success).
		ran   bool
		code  string
		text  string
		state string // the entry's state afterwards ("" when none)
		// landed is Once's: the record landed before it returned
		// (docs/protocol.md 3.4, 1.15).
		landed bool
	}{
		{name: "no entry: claimed and run", ran: true, text: "ran", state: stateDone, landed: true},
		{name: "abandoned: claimed again and run", found: func(now time.Time) *Entry { return &Entry{State: stateAbandoned, Router: "a", Claim: "x"} }, ran: true, text: "ran", state: stateDone, landed: true},
		{name: "claimed, its record's first write conflicts: landed by the background retry, not at once", midRun: func(kv *fakeKV) {
			kv.mu.Lock()
			kv.rev++ // the same claim at another revision: the retry writes over it
			kv.mu.Unlock()
		}, ran: true, text: "ran", state: stateDone},
		{name: "done: the recorded result", found: func(now time.Time) *Entry { return &Entry{State: stateDone, Router: "a", Claim: "x", Result: &other} }, text: "recorded", state: stateDone},
		{name: "running, lease lapsed: unknown_outcome", found: func(now time.Time) *Entry {
			return &Entry{State: stateRunning, Router: "dead", Claim: "x", Deadline: now.Add(time.Hour), Touched: now}
		},
			code: bus.CodeUnknownOutcome, state: stateDone},
		{name: "running, lease lapsed, retryable: taken over and run", found: func(now time.Time) *Entry {
			return &Entry{State: stateRunning, Router: "dead", Claim: "x", Deadline: now.Add(time.Hour), Touched: now}
		},
			call: Call{Retry: true}, ran: true, text: "ran", state: stateDone, landed: true},
		{name: "running, lease lapsed, durable: its timeout at the deadline", found: func(now time.Time) *Entry {
			return &Entry{State: stateRunning, Router: "dead", Claim: "x", Deadline: now.Add(time.Minute), Touched: now}
		},
			call: Call{Durable: true, Timeout: time.Minute}, code: bus.CodeTimeout, state: stateDone},
		{name: "running, no lease, past deadline and grace: unknown_outcome", found: func(now time.Time) *Entry {
			return &Entry{State: stateRunning, Router: "old", Claim: "x", Deadline: now.Add(-2 * grace)}
		},
			code: bus.CodeUnknownOutcome, state: stateDone},
		{name: "corrupt entry: internal", raw: "{", code: bus.CodeInternal},
		{name: "store full: refused, nothing ran", refuse: full, code: bus.CodeInternal, text: "InternalError: store full: JetStream refused to record the call of tool 't' (insufficient resources); it did not run. Call it again once the operator has freed space."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				kv := &fakeKV{}
				switch {
				case tc.found != nil:
					v, _ := json.Marshal(tc.found(time.Now()))
					kv.val, kv.rev = v, 1
				case tc.raw != "":
					kv.val, kv.rev = []byte(tc.raw), 1
				}
				kv.refuse = tc.refuse
				l := New(kv, Config{Router: "me", Lease: lease, Health: &store.Health{}})
				c := tc.call
				c.Key, c.Call = "k", call
				if c.Timeout == 0 {
					c.Timeout = time.Hour
				}
				ran := false
				res, landed := l.Once(t.Context(), c, func() bus.Result {
					ran = true
					if tc.midRun != nil {
						tc.midRun(kv)
					}
					return ok
				})
				if ran != tc.ran {
					t.Errorf("run ran %v, want %v", ran, tc.ran)
				}
				if landed != tc.landed {
					t.Errorf("landed %v, want %v", landed, tc.landed)
				}
				code := ""
				if res.Error != nil {
					code = res.Error.Code
				}
				if code != tc.code || tc.text != "" && textOf(res.Output) != tc.text {
					t.Errorf("result %s %q, want %s %q", code, textOf(res.Output), tc.code, tc.text)
				}
				if err := l.Stop(t.Context()); err != nil {
					t.Fatal(err)
				}
				var after Entry
				if kv.rev != 0 {
					_ = json.Unmarshal(kv.val, &after)
				}
				if after.State != tc.state {
					t.Errorf("entry left %q, want %q", after.State, tc.state)
				}
				if tc.state == stateDone && (after.Result == nil || after.Result.Error != res.Error && (after.Result.Error == nil || res.Error == nil || after.Result.Error.Code != res.Error.Code)) {
					t.Errorf("entry's result %+v differs from the answer %+v", after.Result, res)
				}
			})
		})
	}
}
