package security

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
)

// TestAttackNoticesToOtherInboxes (session 35, red team on 1.25): a
// session agent names wildcards as its batches' reply subjects (another
// agent's inbox prefix + `*` or `>`, `_INBOX.*.*`, `_INBOX.>`, one already
// ending in .running) to have the router's running notices and replies
// spread to every agent, or to break the router's connection with an
// invalid subject (`_INBOX.>.running`). The router publishes them (a
// router login on _INBOX.> sees them), but the server matches a published
// subject's `*` and `>` as plain tokens: the victim's inbox subscriptions
// (the SDKs' <inbox>.*, <inbox>.*.running, <inbox>.>, under a random
// nuid) get nothing, and the router serves the next batch. (A literal
// subject under the victim's prefix reaches only a subscription of the
// whole prefix, which no SDK client makes.)
func TestAttackNoticesToOtherInboxes(t *testing.T) {
	d := newDeployment(t, func(c *router.Config) {
		c.Notices = router.Notices{First: 20 * time.Millisecond, Every: 40 * time.Millisecond}
	})
	release := make(chan struct{})
	slowReader(t, d, release)

	victim := d.conn("session-s2")
	got := make(chan *nats.Msg, 256)
	inbox := victim.nc.NewInbox() // _INBOX.session-s2.<nuid>, as the SDK clients' muxes
	for _, sub := range []string{inbox + ".*", inbox + ".*.running", inbox + ".>"} {
		_, err := victim.nc.ChanSubscribe(sub, got)
		must(t, err)
	}
	must(t, victim.nc.Flush())
	watch := d.conn("router")
	seen := make(chan *nats.Msg, 4096)
	_, err := watch.nc.ChanSubscribe("_INBOX.>", seen)
	must(t, err)
	must(t, watch.nc.Flush())

	attacker := d.conn("session-s1")
	replies := []string{"_INBOX.session-s2.*", "_INBOX.session-s2.>", "_INBOX.*.*", "_INBOX.>", "_INBOX.*.*.running"}
	for i, reply := range replies {
		e, err := bus.NewEvent(bus.TypeCallBatch, "test/session-s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "slowread", Input: json.RawMessage(`{}`)}}})
		must(t, err)
		e.ID, e.SessionID = fmt.Sprint("w", i), "s1"
		m, err := e.Msg("toolbus.call.s1")
		must(t, err)
		m.Reply = reply
		must(t, attacker.nc.PublishMsg(m))
	}
	// Notices of each batch, then (released) each batch's reply, as the
	// router published them.
	notices, answered := map[string]int{}, map[string]bool{}
	for len(notices) < len(replies) {
		m := testkit.Recv(t, seen, bound, "the router's notices")
		if s, ok := strings.CutSuffix(m.Subject, bus.RunningSuffix); ok && slices.Contains(replies, s) {
			notices[s]++
		}
	}
	for range replies {
		release <- struct{}{}
	}
	for len(answered) < len(replies) {
		m := testkit.Recv(t, seen, bound, "the router's replies")
		if slices.Contains(replies, m.Subject) {
			answered[m.Subject] = true
		}
	}
	select {
	case m := <-got:
		t.Fatalf("the victim's inbox got %s: %s", m.Subject, m.Data)
	default:
	}
	// The router's connection is whole: its next batch is answered.
	go func() { release <- struct{}{} }()
	if _, err := attacker.client().Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "slowread"}}}); err != nil {
		t.Fatal(err)
	}
	must(t, victim.nc.Flush()) // anything the server had for the victim is delivered by now
	if len(got) != 0 {
		m := <-got
		t.Fatalf("the victim's inbox got %s: %s", m.Subject, m.Data)
	}
}

// TestAttackCatalogueMarkersAfterCleanUp (session 35, red team on 7.1's
// bound): the worker of every tool fills the catalogue (--max-tools 256
// here), the operator deletes its names with tools.delete, as 1.25's note
// says to. Each delete leaves a KV delete marker, which the stream keeps
// and counts toward max_msgs (bound + 64 here): the catalogue then took
// only the margin's worth of new names (the 65th of 251 refused, "the
// stored catalogue of tools is at its stream's max_msgs"). Now a delete
// raises max_msgs by one (store.Count.Marked): every deleted name's room
// is taken again.
func TestAttackCatalogueMarkersAfterCleanUp(t *testing.T) {
	const maxTools = 256
	d := newDeployment(t, func(c *router.Config) { c.Store.MaxTools = maxTools })
	d.startWorker() // 5 tools
	w := d.conn(security.RoleWorker)
	var mine []string
	for i := 0; ; i++ {
		name := fmt.Sprintf("fill%d", i)
		if ack, _ := register(t, w, "attacker", ext(name)); len(ack.Accepted) != 1 {
			break
		}
		mine = append(mine, name)
	}
	op := d.conn("operator").client()
	for _, name := range mine {
		must(t, op.Admin(testCtx(t), "tools.delete", "", map[string]string{"name": name}, nil))
	}
	// The operator's own workers' new tools, as many as were deleted.
	for i := range mine {
		name := fmt.Sprintf("new%d", i)
		if ack, data := register(t, d.conn(security.RoleWorker), "legit", ext(name)); len(ack.Accepted) != 1 {
			t.Fatalf("after %d names deleted, new name %d refused: %s", len(mine), i, data)
		}
	}
}
