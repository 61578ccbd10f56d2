package security

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/router"
)

// TestAttack38RefusedCallsKeepNoQuota (session 38): an agent grows the
// quota store with calls that are refused. Each refusal below, before the
// quota step (a claimed user, a denied tool, an unknown tool, invalid
// input) or by it (a rate, a budget), leaves P_limits and P_LIMITS as they
// were: no key, no value, no counter, no write at all (their streams'
// states, sequences included, are unchanged).
func TestAttack38RefusedCallsKeepNoQuota(t *testing.T) {
	d := newDeployment(t, func(c *router.Config) {
		c.DefaultRules = []bus.Rule{{Tool: "deploy", Behavior: "deny"}}
		c.Guard = router.Guard{Limits: limits.Policy{Rules: []limits.Rule{
			{Name: "per-session", Tools: []string{"greet"}, Per: []string{limits.PerSession, limits.PerTool}, Rate: &limits.Rate{Calls: 1, IntervalMS: 3_600_000}},
			{Name: "per-user", Per: []string{limits.PerUser}, Budget: &limits.Budget{Units: 1}},
		}}}
	})
	d.startWorker()
	js, err := jetstream.New(d.conn("router").nc)
	must(t, err)
	s := bus.NewSubjects("")
	type count struct{ msgs, bytes, last, subjects uint64 }
	state := func() [2]count {
		var out [2]count
		for i, name := range []string{"KV_" + s.Bucket(limits.BucketRates), s.Stream(limits.StreamBudgets)} {
			st, err := js.Stream(testCtx(t), name)
			must(t, err)
			info, err := st.Info(testCtx(t))
			must(t, err)
			out[i] = count{info.State.Msgs, info.State.Bytes, info.State.LastSeq, info.State.NumSubjects}
		}
		return out
	}
	alice, bob := d.conn("session-s1").client(), d.conn("session-s3").client()
	if code := greetAs(t, alice, "s1", nil); code != "" { // s1's rate of greet, and alice's budget, spent
		t.Fatalf("first greet: %s", code)
	}
	before := state()
	for _, tc := range []struct {
		name, session string
		user          json.RawMessage
		call          bus.Call
		want          string
	}{
		{"a claimed user", "s3", json.RawMessage(`"alice"`), bus.Call{ID: "c1", Name: "greet"}, bus.CodeDenied},
		{"a denied tool", "s3", nil, bus.Call{ID: "c1", Name: "deploy", Input: json.RawMessage(`{}`)}, bus.CodeDenied},
		{"an unknown tool", "s3", nil, bus.Call{ID: "c1", Name: "no_such_tool"}, bus.CodeUnknownTool},
		{"invalid input", "s3", nil, bus.Call{ID: "c1", Name: "greet", Input: json.RawMessage(`{"who": 5}`)}, bus.CodeInvalidInput},
		{"a rate", "s1", nil, bus.Call{ID: "c1", Name: "greet"}, bus.CodeLimitExceeded},
		{"a budget", "s1", nil, bus.Call{ID: "c1", Name: "bigread"}, bus.CodeLimitExceeded},
	} {
		c := bob
		if tc.session == "s1" {
			c = alice
		}
		rep, err := c.Call(testCtx(t), tc.session, bus.Batch{User: tc.user, Calls: []bus.Call{tc.call}})
		code := ""
		switch {
		case isDenied(err):
			code = bus.CodeDenied
		case err != nil:
			t.Fatalf("%s: %v", tc.name, err)
		case rep.Results[0].Error != nil:
			code = rep.Results[0].Error.Code
		}
		if code != tc.want {
			t.Fatalf("%s: %q, want %q", tc.name, code, tc.want)
		}
		if after := state(); after != before {
			t.Fatalf("%s changed the quota store:\nbefore %+v\nafter  %+v", tc.name, before, after)
		}
	}
}
