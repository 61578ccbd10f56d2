package security

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestAttackApproverAdmin (session 32, red team on the admin subjects,
// held): the approver's one admin verb is parked.list (its inbox's poll).
// It tries the others (session.mode, tools.delete, limits.reset, status)
// and parked.list with data it should not take: a negative limit, a cursor
// that is no cursor, members parked.list does not know (a "session" to
// widen it, a huge "max"). NATS refuses the other verbs; the router
// refuses the malformed lists bad_request; a huge limit is bounded by what
// one reply may carry.
func TestAttackApproverAdmin(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	ap := d.conn("approver")
	for _, verb := range []string{"session.mode", "tools.delete", "limits.reset", "status", "parked.get"} {
		ap.denyPublish("toolbus.admin." + verb)
	}
	cl := ap.client()
	for _, data := range []any{
		bus.ParkedQuery{Limit: -1},
		bus.ParkedQuery{After: "not a cursor"},
		json.RawMessage(`{"session":"s1","limit":1}`),
		json.RawMessage(`{"max":1000000000}`),
	} {
		var page bus.ParkedPage
		err := cl.Admin(testCtx(t), "parked.list", "", data, &page)
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest {
			t.Errorf("parked.list with %+v: %v (%d listed)", data, err, len(page.Parked))
		}
	}
	// Three parked calls; a limit of a billion lists the three, once.
	for _, id := range []string{"p1", "p2", "p3"} {
		if _, err := d.conn("session-s2").client().Call(testCtx(t), "s2", bus.Batch{Calls: []bus.Call{{ID: id, Name: "pick"}}}); err != nil {
			t.Fatal(err)
		}
	}
	var page bus.ParkedPage
	must(t, cl.Admin(testCtx(t), "parked.list", "", bus.ParkedQuery{Limit: 1 << 30}, &page))
	if len(page.Parked) != 3 {
		t.Fatalf("parked.list with a limit of 2^30: %d listed, want the 3 parked", len(page.Parked))
	}
	ap.noViolationsBut("toolbus.admin.")
}
