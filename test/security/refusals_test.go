package security

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
)

// TestRefusalAudited: a batch or tools query refused whole is an audit
// record (the attack: session s1's agent claims to be bob, and nothing
// showed in `toolbus audit`), and a flood of refusals leaves at most
// audit.RefusalBurst records per caller, the rest counted; another
// caller's refusals are still recorded.
func TestRefusalAudited(t *testing.T) {
	d := newDeployment(t, func(c *router.Config) { c.Guard.Audit = &audit.Config{} })
	d.startWorker()
	ctx := testCtx(t)
	greet := func(user string) bus.Batch {
		return bus.Batch{User: json.RawMessage(`"` + user + `"`), Calls: []bus.Call{{ID: "c1", Name: "greet"}}}
	}
	denied := func(err error) {
		t.Helper()
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeDenied {
			t.Fatalf("got %v, want denied", err)
		}
	}
	s1 := d.conn("session-s1").client()
	_, err := s1.Query(ctx, "s1", bus.ToolsQuery{User: json.RawMessage(`"mallory"`)})
	denied(err)
	for range 3 * audit.RefusalBurst {
		_, err := s1.Call(ctx, "s1", greet("bob"), client.WithReplyID(client.NewReplyID()))
		denied(err)
	}
	_, err = d.conn("session-s3").client().Call(ctx, "s3", greet("alice"), client.WithReplyID("r3"))
	denied(err)
	dup := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet"}, {ID: "c1", Name: "greet"}}}
	var be *bus.Error
	if _, err := d.conn("session-s2").client().Call(ctx, "s2", dup, client.WithReplyID("r2")); !errors.As(err, &be) || be.Code != bus.CodeBadRequest {
		t.Fatalf("a batch with a call id twice: %v", err)
	}

	// What `toolbus audit --json` exports.
	js := testkit.JetStream(t, d.conn("operator").nc)
	var recs []audit.Record
	must(t, audit.Export(ctx, js, bus.NewSubjects(""), audit.Filter{}, func(raw json.RawMessage) error {
		var r audit.Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		if r.Decision.Behavior == audit.Refused {
			recs = append(recs, r)
		}
		return nil
	}))
	count := map[string]int{}
	var sawMallory, sawBob bool
	for _, r := range recs {
		count[r.Session]++
		switch {
		case r.Session == "s1":
			if r.User != "alice" || r.NATSUser != "session-s1" || r.Outcome.Code != bus.CodeDenied {
				t.Errorf("s1's refusal record: %+v", r)
			}
			sawMallory = sawMallory || strings.Contains(r.Decision.Rule, "tools query") && strings.Contains(r.Decision.Rule, "mallory")
			sawBob = sawBob || strings.Contains(r.Decision.Rule, "batch") && strings.Contains(r.Decision.Rule, `"bob"`)
		case r.Session == "s3":
			if r.User != "bob" || r.ReplyID != "r3" || !strings.Contains(r.Decision.Rule, `"alice"`) {
				t.Errorf("s3's refusal record: %+v", r)
			}
		case r.Session == "s2":
			// s2's own agent user, though bound to no user (1.13; "" before).
			if r.Outcome.Code != bus.CodeBadRequest || r.ReplyID != "r2" || r.NATSUser != "session-s2" {
				t.Errorf("s2's refusal record: %+v", r)
			}
		}
	}
	if !sawMallory || !sawBob {
		t.Errorf("s1's claims of mallory (tools query) and bob (batch) recorded: %v %v", sawMallory, sawBob)
	}
	if count["s1"] != audit.RefusalBurst || count["s3"] != 1 || count["s2"] != 1 {
		t.Fatalf("refusal records per session %v, want s1 %d (its flood bounded), s3 1, s2 1", count, audit.RefusalBurst)
	}
}
