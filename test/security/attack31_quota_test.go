package security

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/router"
)

// quotaDeployment is the secured deployment with a daily budget of two
// greet calls per user, and the worker serving greet.
func quotaDeployment(t *testing.T) *deployment {
	d := newDeployment(t, func(c *router.Config) {
		c.Guard = router.Guard{Limits: limits.Policy{Rules: []limits.Rule{
			{Name: "greet-per-user", Tools: []string{"greet"}, Per: []string{limits.PerUser}, Budget: &limits.Budget{Units: 2}}}}}
	})
	d.startWorker()
	return d
}

// greetAs calls greet once in session as the claimed user (nil: none) and
// returns its error code ("" when it ran), or the batch's refusal code.
func greetAs(t *testing.T, c *client.Client, session string, user json.RawMessage) string {
	t.Helper()
	rep, err := c.Call(testCtx(t), session, bus.Batch{User: user, Calls: []bus.Call{{ID: "c1", Name: "greet"}}})
	if isDenied(err) {
		return bus.CodeDenied
	}
	must(t, err)
	if r := rep.Results[0]; r.Error != nil {
		return r.Error.Code
	}
	return ""
}

// TestAttackQuotaIdentity (session 31, red team on quotas): a per-user
// budget counts the user the credentials bind, whatever the batch says.
// alice's agent (s1) spends her two calls sending no user; then neither a
// claim of bob, of another spelling of alice, of an object or of the
// empty string gets a third (claims are refused denied, nothing counted;
// no user or "alice" is alice, refused limit_exceeded). bob (s3) still has
// both of his: one user's spending takes nothing from another's.
func TestAttackQuotaIdentity(t *testing.T) {
	d := quotaDeployment(t)
	alice := d.conn("session-s1").client()
	for i := range 2 {
		if code := greetAs(t, alice, "s1", nil); code != "" {
			t.Fatalf("alice's call %d: %s", i+1, code)
		}
	}
	for _, claim := range []string{``, `""`, `"alice"`, `"bob"`, `"Alice"`, `"alice "`, `{"user":"alice"}`, `["alice"]`, `null`} {
		want := bus.CodeLimitExceeded
		if claim != `` && claim != `""` && claim != `"alice"` && claim != `null` {
			want = bus.CodeDenied
		}
		if code := greetAs(t, alice, "s1", json.RawMessage(claim)); code != want {
			t.Fatalf("alice claiming %s: %q, want %q", claim, code, want)
		}
	}
	bob := d.conn("session-s3").client()
	for i := range 3 {
		want := ""
		if i == 2 {
			want = bus.CodeLimitExceeded
		}
		if code := greetAs(t, bob, "s3", nil); code != want {
			t.Fatalf("bob's call %d: %q, want %q", i+1, code, want)
		}
	}
}

// TestAttackQuotaSharedAgentSpendsOwnLogin (session 31, red team; closed):
// the shared agent, in sessions of its own choosing, spends the
// per-user budget that a session with an agent login of its own but no
// user (s2) counts against too: both run as no user, one key "". Row 280
// gave such a session an identity of its own for the pools, tasks, replays
// and refusals (protocol 1.13), and now for quotas: it counts per user
// under its login (limits.Call.Login).
func TestAttackQuotaSharedAgentSpendsOwnLogin(t *testing.T) {
	d := quotaDeployment(t)
	shared := d.conn("agent").client()
	for i := range 2 {
		if code := greetAs(t, shared, fmt.Sprintf("anon%d", i), nil); code != "" {
			t.Fatalf("the shared agent's call %d: %s", i+1, code)
		}
	}
	if code := greetAs(t, shared, "anon9", nil); code != bus.CodeLimitExceeded {
		t.Fatalf("the shared agent's third call in a new session: %q, want limit_exceeded", code)
	}
	own := d.conn("session-s2").client()
	if code := greetAs(t, own, "s2", nil); code != "" {
		t.Fatalf("s2 (a login of its own) found its budget spent by the shared agent: %q", code)
	}
}
